"""Resumable training state: one directory, written atomically, verified on load.

Layout of a state directory (``<out_dir>/<run>/state``)::

    manifest.json     {"format": 1, "step": k, "files": {name: {"sha256": ..., "bytes": ...}}}
    <name>.pt         one ``torch.save`` per part (policy, critic, optimizers, schedule, RNG)
    trainer.json      plain-JSON part (step, metric history, collapse-guard state)

The directory is built in a temporary sibling and renamed into place only when every file is
written (:func:`agentr1.io.atomic_dir`), so a run killed while saving leaves the previous state
intact. :func:`load_state` checks the manifest and every file's size and SHA-256 before
unpickling anything: a missing, truncated or corrupt file raises :class:`StageError` naming it.
Tensors are loaded with ``weights_only=True`` (no arbitrary code from a checkpoint).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import torch

from agentr1.errors import StageError
from agentr1.io import atomic_dir

FORMAT = 1
MANIFEST = "manifest.json"
JSON_PART = "trainer"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_state(path: str | Path, tensors: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``tensors`` (name -> object of tensors/containers, one ``.pt`` file each) and
    ``meta`` (JSON-serialisable, ``trainer.json``) to ``path`` atomically. ``meta['step']`` is
    copied into the manifest."""
    path = Path(path)
    files: dict[str, dict[str, Any]] = {}
    with atomic_dir(path) as tmp:
        for name, obj in tensors.items():
            buf = io.BytesIO()
            torch.save(obj, buf)
            data = buf.getvalue()
            (tmp / f"{name}.pt").write_bytes(data)
            files[f"{name}.pt"] = {"sha256": _sha256(data), "bytes": len(data)}
        data = (json.dumps(meta, sort_keys=True, indent=1) + "\n").encode()
        (tmp / f"{JSON_PART}.json").write_bytes(data)
        files[f"{JSON_PART}.json"] = {"sha256": _sha256(data), "bytes": len(data)}
        manifest = {"format": FORMAT, "step": meta.get("step"), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    return path


def has_state(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def _read_verified(path: Path, name: str, entry: dict[str, Any]) -> bytes:
    f = path / name
    if not f.is_file():
        raise StageError(f"checkpoint file {f} is missing: the state in {path} is incomplete; "
                         "delete it (or run without --resume) to start over")
    data = f.read_bytes()
    if len(data) != entry.get("bytes") or _sha256(data) != entry.get("sha256"):
        raise StageError(f"checkpoint file {f} is corrupt ({len(data)} bytes, checksum mismatch with "
                         f"{path / MANIFEST}); delete {path} (or run without --resume) to start over")
    return data


def load_state(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, meta)`` as given to :func:`save_state`; :class:`StageError` naming the file
    when the manifest or any part is missing, truncated or corrupt."""
    path = Path(path)
    mf = path / MANIFEST
    if not mf.is_file():
        raise StageError(f"checkpoint manifest {mf} is missing: no resumable state in {path}")
    try:
        manifest = json.loads(mf.read_text())
        files = manifest["files"]
        if manifest.get("format") != FORMAT or not isinstance(files, dict):
            raise ValueError(f"unknown format {manifest.get('format')!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise StageError(f"checkpoint manifest {mf} is unreadable ({exc}); delete {path} to start over") from None
    tensors: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for name, entry in sorted(files.items()):
        data = _read_verified(path, name, entry)
        try:
            if name == f"{JSON_PART}.json":
                meta = json.loads(data)
            else:
                tensors[name[: -len(".pt")]] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unpickling problem is a corrupt file
            raise StageError(f"checkpoint file {path / name} cannot be read ({type(exc).__name__}: {exc})") from None
    return tensors, meta
