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

Resuming (``agentr1 train --resume``; :func:`prepare_resume`, :func:`resume_conflicts`):

* a kill between the two renames of a save leaves no ``state`` but the previous one as
  ``.state.old-<pid>``: it is moved back when it verifies against its manifest (sizes and
  SHA-256), else the resume fails naming the bad file; a ``state`` without a manifest fails too;
  no state and no copy at all is "nothing to resume" (the caller decides);
* ``trainer.json`` holds the params the state was trained with (``params``: dotted key -> value);
  a resume whose params differ fails naming each key (old -> new). Keys that do not change what
  is trained may differ (:data:`RESUME_FREE_KEYS`: checkpoint / trace / dev-evaluation cadence,
  output dir, CPU threads and batching knobs), and so may ``train.steps`` while the lr schedule
  is ``constant`` (extending a run; a ``cosine`` schedule's lr depends on it at every step).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from agentr1.errors import StageError
from agentr1.io import atomic_dir

log = logging.getLogger(__name__)

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


def saved_step(path: str | Path) -> int | None:
    """The step in ``path``'s manifest (``None`` when it has none or it is unreadable)."""
    try:
        return _manifest(Path(path)).get("step")
    except StageError:
        return None


def _read_verified(path: Path, name: str, entry: dict[str, Any]) -> bytes:
    f = path / name
    if not f.is_file():
        raise StageError(
            f"checkpoint file {f} is missing: the state in {path} is incomplete; "
            "delete it (or run without --resume) to start over"
        )
    data = f.read_bytes()
    if len(data) != entry.get("bytes") or _sha256(data) != entry.get("sha256"):
        raise StageError(
            f"checkpoint file {f} is corrupt ({len(data)} bytes, checksum mismatch with "
            f"{path / MANIFEST}); delete {path} (or run without --resume) to start over"
        )
    return data


def _manifest(path: Path) -> dict[str, Any]:
    mf = path / MANIFEST
    if not mf.is_file():
        raise StageError(
            f"checkpoint manifest {mf} is missing: no resumable state in {path} (incomplete or "
            f"corrupt); delete {path} (or run without --resume) to start over"
        )
    try:
        manifest = json.loads(mf.read_text())
        files = manifest["files"]
        if manifest.get("format") != FORMAT or not isinstance(files, dict):
            raise ValueError(f"unknown format {manifest.get('format')!r}")
        for entry in files.values():
            if not isinstance(entry, dict):
                raise ValueError(f"bad file entry {entry!r}")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise StageError(f"checkpoint manifest {mf} is unreadable ({exc}); delete {path} to start over") from None
    return manifest


def verify_state(path: str | Path) -> int | None:
    """Check ``path``'s manifest and every file's size and SHA-256 without unpickling anything;
    returns the saved step, :class:`StageError` naming the file otherwise."""
    path = Path(path)
    manifest = _manifest(path)
    for name, entry in sorted(manifest["files"].items()):
        _read_verified(path, name, entry)
    return manifest.get("step")


def load_state(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, meta)`` as given to :func:`save_state`; :class:`StageError` naming the file
    when the manifest or any part is missing, truncated or corrupt."""
    path = Path(path)
    files = _manifest(path)["files"]
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


# ----------------------------------------------------------------------------- resuming
def backups(path: str | Path) -> list[Path]:
    """The ``.<name>.old-<pid>`` copies :func:`agentr1.io.atomic_dir` moved aside (a save killed
    between its two renames leaves the previous state only there)."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.glob(f".{path.name}.old-*") if p.is_dir())


def prepare_resume(path: str | Path) -> bool:
    """Make ``path`` the state to resume from. ``True``: a state with a manifest is there (moved
    back from a backup copy when a kill landed mid-save and the copy verifies); ``False``: no
    state and no copy at all (nothing to resume); :class:`StageError` when a state is there but
    has no manifest, or only backup copies that fail verification (each named)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise StageError(f"the training state {path} is not a directory: delete it (or run without --resume)")
        _manifest(path)  # missing / unreadable manifest -> StageError naming it
        return True
    good, problems = [], []
    for copy in backups(path):
        try:
            step = verify_state(copy)
        except StageError as exc:
            problems.append(str(exc))
            continue
        good.append((step if isinstance(step, int) else -1, copy.stat().st_mtime, copy))
    if good:
        step, _, copy = max(good)
        os.replace(copy, path)
        log.warning(
            "recovered the training state (step %s) from %s: a save was interrupted between its two renames", step, copy
        )
        return True
    if problems:
        raise StageError(
            f"no training state in {path}, and the backup copies left by an interrupted save do not "
            f"verify: {'; '.join(problems)}"
        )
    return False


# params that may differ between the run that saved a state and the one resuming it: logging,
# checkpoint and evaluation cadence, where outputs go, and resource knobs (threads, micro-batches,
# prompts per backend call, vLLM memory) - none changes what is optimized. Everything else in the
# saved params must match.
RESUME_FREE_KEYS = frozenset(
    {
        "train.checkpoint.every",
        "train.trace_every",
        "train.dev.every",
        "train.dev.examples",
        "train.out_dir",
        "train.num_threads",
        "train.micro_batch_size",
        "train.distributed.backend",
        "rollout.batch_size",
        "rollout.vllm.gpu_memory_utilization",
        "rollout.vllm.enforce_eager",
    }
)
STEPS_KEY = "train.steps"
_ABSENT = "<absent>"


def resume_conflicts(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every saved param the resuming run changes (not counting
    :data:`RESUME_FREE_KEYS`, nor ``train.steps`` while both use the constant lr schedule)."""
    saved, current = json.loads(json.dumps(saved)), json.loads(json.dumps(current))  # compare as saved (JSON)
    constant = saved.get("train.lr_schedule") == current.get("train.lr_schedule") == "constant"
    out = []
    for key in sorted(set(saved) | set(current)):
        if key in RESUME_FREE_KEYS or (key == STEPS_KEY and constant):
            continue
        old, new = saved.get(key, _ABSENT), current.get(key, _ABSENT)
        if old != new:
            out.append(f"{key}: {_show(old)} -> {_show(new)}")
    return out


def _show(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def check_resume(path: str | Path, meta: dict[str, Any], current: dict[str, Any], steps: int) -> None:
    """:class:`StageError` when the state in ``path`` (its ``meta``) cannot be continued by a run
    with params ``current`` and ``train.steps`` = ``steps``: the params differ (each key named,
    old -> new) or the state is already past ``steps``."""
    saved = meta.get("params")
    if saved is None:
        log.warning(
            "the training state in %s was saved without its params (an older version): cannot check that "
            "this run's params match it",
            path,
        )
    else:
        diff = resume_conflicts(saved, current)
        if diff:
            raise StageError(
                f"cannot resume the training state in {path} (step {meta.get('step')}): these params differ from the "
                "ones it was trained with (saved -> now):\n  - " + "\n  - ".join(diff) + "\n"
                "rerun without --resume to train from the cold start with the new params, or restore the saved values "
                "(params.yaml / --set) to continue it. (May change on a resume: checkpoint/trace/dev-evaluation cadence, "
                "threads and batching knobs, and train.steps with lr_schedule: constant.)"
            )
    step = meta.get("step")
    if isinstance(step, int) and step > steps:
        raise StageError(
            f"cannot resume the training state in {path}: it is at step {step}, past train.steps ({steps}); "
            f"set train.steps >= {step} to continue it, or run without --resume to start over"
        )
