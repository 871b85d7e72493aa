"""Build the rollout backend ``rollout.backend`` names (:data:`agentr1.registry.BACKENDS`).

A backend plug-in is a builder ``fn(rollout_cfg, *, model=None, tokenizer=None, model_path=None)
-> Backend`` (the interface in :mod:`agentr1.rollout.backends`) registered under the
``agentr1.backends`` entry-point group; each builder takes the keyword arguments it uses (an
in-memory model and tokenizer, or a checkpoint directory) and ignores the others. The built-ins
below import their backend module only when called: vLLM and transformers load on demand.
"""

from __future__ import annotations

from typing import Any

from agentr1.registry import BACKENDS

# what make_backend offers every builder; each takes the ones in its signature
BUILD_INPUTS = frozenset({"model", "tokenizer", "model_path"})


def make_backend(rollout_cfg: Any, model: Any = None, tokenizer: Any = None, model_path: str | None = None) -> Any:
    """The backend ``rollout_cfg.backend`` names, built from ``model`` + ``tokenizer`` (``hf``)
    or from the checkpoint directory ``model_path`` (``vllm``)."""
    return BACKENDS.call(
        rollout_cfg.backend, rollout_cfg, shared=BUILD_INPUTS, model=model, tokenizer=tokenizer, model_path=model_path
    )


def hf_backend(rollout_cfg: Any, model: Any = None, tokenizer: Any = None) -> Any:
    """:class:`agentr1.rollout.hf.HFBackend` over an in-memory transformers model and tokenizer."""
    from agentr1.rollout.hf import HFBackend

    if model is None or tokenizer is None:
        raise ValueError("the hf backend needs model= and tokenizer=")
    return HFBackend(model, tokenizer)


def vllm_backend(rollout_cfg: Any, model_path: str | None = None) -> Any:
    """:class:`agentr1.rollout.vllm.VLLMBackend` loading the checkpoint ``model_path`` on the GPU
    (settings from ``rollout.vllm``; context ``rollout.max_total_tokens``)."""
    from agentr1.rollout.vllm import VLLMBackend

    if model_path is None:
        raise ValueError("the vllm backend needs model_path= (a checkpoint directory)")
    v = rollout_cfg.vllm
    return VLLMBackend(
        model_path,
        gpu_memory_utilization=v.gpu_memory_utilization,
        enforce_eager=v.enforce_eager,
        dtype=v.dtype,
        max_model_len=rollout_cfg.max_total_tokens,
    )
