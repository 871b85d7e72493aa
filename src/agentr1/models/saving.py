"""Saving a trained policy as a checkpoint whose bytes depend only on what was trained.

:func:`save_checkpoint` is what every checkpoint is written with: the ``pretrain``, ``sft`` and
``train`` outputs (DVC outputs, registered in MLflow) and the download / GGUF cache. It is
transformers' ``save_pretrained`` of the model and the tokenizer into an atomic directory (:func:`agentr1.io.atomic_dir`), made canonical before the rename:

* ``tokenizer_config.json`` loses the keys transformers records about how the tokenizer was
  *loaded* rather than what it is (:data:`LOAD_TIME_KEYS`): ``local_files_only`` is ``true``
  under ``HF_HUB_OFFLINE=1`` (set by the Makefile) and ``false`` without it (``dvc repro`` in the
  venv), ``is_local`` says whether it came from a directory or a hub id. Every other file
  (weights, ``config.json``, ``generation_config.json``, ``tokenizer.json``, the chat template)
  is already the same either way. Removing them changes nothing on load: transformers sets both
  again from the ``from_pretrained`` call.
* every file gets the mode a plain ``open`` gives under the process umask, every directory a
  plain ``mkdir``'s: safetensors writes ``model.safetensors`` 0600 (through its own temporary
  file), the other files are 0644, and the copy MLflow's artifact store keeps follows the modes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentr1.io import _ordinary_mode, atomic_dir

# what transformers 5 (``PreTrainedTokenizerBase._from_pretrained``) adds to a loaded tokenizer's
# init kwargs, which ``save_pretrained`` writes back (``name_or_path`` it removes itself)
LOAD_TIME_KEYS = ("is_local", "local_files_only")
TOKENIZER_CONFIG = "tokenizer_config.json"


def save_checkpoint(model, tokenizer, path: str | Path) -> Path:
    """Write ``model`` (safetensors + generation config) and ``tokenizer`` to ``path`` atomically,
    canonical (module docstring): the same weights and tokenizer give the same bytes and modes
    whatever the environment or the way the tokenizer was loaded."""
    path = Path(path)
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        drop_load_time_keys(tmp / TOKENIZER_CONFIG)
        ordinary_modes(tmp)
    return path


def drop_load_time_keys(config_file: Path) -> None:
    """Remove :data:`LOAD_TIME_KEYS` from the tokenizer config ``config_file``, written back the
    way transformers writes it (2-space indent, sorted keys, UTF-8, a final newline); a config
    without them is left untouched."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if not any(key in config for key in LOAD_TIME_KEYS):
        return
    for key in LOAD_TIME_KEYS:
        config.pop(key, None)
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def ordinary_modes(root: Path) -> None:
    """Give every file and directory under ``root`` the mode a plain ``open`` / ``mkdir`` gives."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            _ordinary_mode(Path(dirpath, name), is_dir=True)
        for name in filenames:
            _ordinary_mode(Path(dirpath, name), is_dir=False)
