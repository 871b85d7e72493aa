"""Where a run came from: git state, the stage's ``dvc.lock`` hashes, the pipeline id, flat params.

Pure functions over files and subprocesses (no MLflow), so they are tested directly.

``dvc.lock`` and timing: ``dvc repro`` writes a stage's lock entry *after* its command exits, so
at stage start the lock holds the stage's previous entry (or none). :func:`dvc_dep_hashes`
therefore takes each dependency's hash from the freshest place it can: the ``outs`` entry of the
upstream stage that produced it (already re-locked in this repro), else the md5 of the file as
it is now (DVC 3 hashes files as the plain md5 of their bytes), else the stage's own locked value
(a directory that no stage produces, e.g. ``src/agentr1/rollout``), flagged as ``locked``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from agentr1.config import flatten
from agentr1.errors import StageError

# libyaml's parser when PyYAML has it: dvc.lock is read at every stage start (about 0.5 s in pure
# Python for the nano pipeline's 85 kB lock, 0.05 s in C)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

PIPELINE_ENV = "AGENTR1_PIPELINE_ID"
MAX_PARAM_KEY = 250
MAX_PARAM_VALUE = 6000  # MLflow's MAX_PARAM_VAL_LENGTH (mlflow.utils.validation)
TRUNCATED = "...[truncated]"


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def git_state(cwd: str | Path = ".", exclude: Iterable[str] = ()) -> tuple[str, bool | None]:
    """``(commit sha, dirty)`` of the repository holding ``cwd``; ``("unknown", None)`` outside
    git. Dirty = any modified, staged or untracked (not ignored) file outside the paths
    ``exclude`` (relative to ``cwd``; :func:`pipeline_outputs`, so the files ``dvc repro``
    itself rewrites - ``dvc.lock``, uncached metrics and reports - do not count as a dirty tree)."""
    cwd = Path(cwd)
    sha = _git(["rev-parse", "HEAD"], cwd)
    if sha is None:
        return "unknown", None
    status = _git(["status", "--porcelain", "--", ".", *(f":(exclude){p}" for p in exclude)], cwd)
    return sha.strip(), (bool(status.strip()) if status is not None else None)


def pipeline_id(params_hash: str, sha: str) -> str:
    """Id that groups the stage runs of one ``dvc repro``: env ``AGENTR1_PIPELINE_ID`` when set
    (flows set one per pipeline run), else ``<sha[:12]>-<params_hash>`` - every stage of a repro
    sees the same commit and params, so they share it (as do repeats of an identical repro). The
    dirty flag is left out on purpose: ``dvc repro`` itself rewrites the tracked ``dvc.lock``
    after the first stage, which would split one repro into two groups."""
    env = os.environ.get(PIPELINE_ENV, "").strip()
    if env:
        return env
    return f"{sha[:12]}-{params_hash}"


def _md5_file(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_hash(item: Mapping[str, Any]) -> str | None:
    """The hash a ``dvc.lock`` dep/out item records (``md5``, else ``etag`` or ``checksum``)."""
    for key in ("md5", "etag", "checksum"):
        if item.get(key):
            return str(item[key])
    return None


_LOCKS: dict[tuple[str, int, int], dict[str, Any]] = {}


LOCK_FIX = "restore it from git (`git checkout dvc.lock`) or re-create it with `dvc repro`"


def _read_lock(lock_path: Path) -> dict[str, Any]:
    """The ``stages`` mapping of ``lock_path``; :class:`StageError` in one line naming the file (and
    the line of a YAML error) when it is not YAML/UTF-8, its root is not a mapping or its
    ``stages`` is not a mapping."""
    try:
        lock = yaml.load(lock_path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise StageError(f"{lock_path} is not valid YAML{where} ({problem}): {LOCK_FIX}") from None
    except UnicodeDecodeError as exc:
        raise StageError(f"{lock_path} is not UTF-8 text (byte offset {exc.start}): {LOCK_FIX}") from None
    except OSError as exc:
        raise StageError(f"cannot read {lock_path} ({exc.strerror or exc}): {LOCK_FIX}") from None
    if lock is None:
        return {}
    if not isinstance(lock, dict):
        raise StageError(
            f"{lock_path}: the top level is a {type(lock).__name__}, not a mapping with `stages`: {LOCK_FIX}"
        )
    stages = lock.get("stages")
    if stages is None:
        return {}
    if not isinstance(stages, dict):
        raise StageError(
            f"{lock_path}: `stages` is a {type(stages).__name__}, not a mapping of stage entries: {LOCK_FIX}"
        )
    return stages


def lock_stages(lock_path: str | Path) -> dict[str, Any]:
    """The ``stages`` of a ``dvc.lock`` (key -> entry, in the lock's order), parsed once per
    (path, size, mtime); :class:`StageError` naming the file when it cannot be (:func:`_read_lock`).
    An entry may still be anything YAML holds: the readers below take what is a mapping
    (:func:`entry_items`), ``agentr1 track`` checks every entry (:func:`agentr1.stages.track.lock_entries`)."""
    lock_path = Path(lock_path)
    st = lock_path.stat()
    key = (str(lock_path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _LOCKS:
        stages = _read_lock(lock_path)
        _LOCKS.clear()
        _LOCKS[key] = stages
    return _LOCKS[key]


def entry_items(entry: Any, field: str) -> list[dict[str, Any]]:
    """The ``deps``/``outs`` items of a lock entry that are mappings with a string ``path``
    (anything else in a hand-edited lock is left out here)."""
    items = entry.get(field) if isinstance(entry, dict) else None
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, dict) and isinstance(i.get("path"), str) and i["path"]]


def project_root(lock_path: str | Path) -> Path:
    """The folder the paths of ``lock_path`` are relative to: the nearest folder from the lock's own
    upward that holds ``.dvc`` (a pipeline of its own, ``pipelines/<name>/dvc.lock``, runs its stages
    from the project root: :mod:`agentr1.pipelines`), else the lock's folder."""
    folder = Path(lock_path).parent
    if (folder / ".dvc").is_dir():
        return folder
    for above in folder.resolve().parents:
        if (above / ".dvc").is_dir():
            return above
    return folder


def dvc_dep_hashes(
    stage: str, lock_path: str | Path = "dvc.lock", root: str | Path | None = None
) -> dict[str, dict[str, str]]:
    """``{dep path: {"hash": ..., "source": "upstream"|"file"|"locked"}}`` for ``stage``'s
    dependencies in ``dvc.lock`` (see the module docstring); ``{}`` when the lock or the stage's
    entry is missing (first run). ``stage`` is the lock key, e.g. ``train@ppo``."""
    lock_path = Path(lock_path)
    root = Path(root) if root is not None else project_root(lock_path)
    if not lock_path.is_file():
        return {}
    stages = lock_stages(lock_path)
    entry = stages.get(stage)
    if not entry or not isinstance(entry, dict):
        return {}
    produced = {
        out["path"]: entry_hash(out)
        for name, other in stages.items()
        if name != stage
        for out in entry_items(other, "outs")
    }
    result: dict[str, dict[str, str]] = {}
    for dep in entry_items(entry, "deps"):
        path = dep["path"]
        if produced.get(path):
            result[path] = {"hash": produced[path], "source": "upstream"}
        elif (root / path).is_file():
            result[path] = {"hash": _md5_file(root / path), "source": "file"}
        else:
            result[path] = {"hash": entry_hash(dep) or "", "source": "locked"}
    return result


def pipeline_outputs(lock_path: str | Path = "dvc.lock") -> list[str]:
    """The lock and every output path its stages list (relative to :func:`project_root`): what a
    ``dvc repro`` writes, left out of :func:`git_state`'s dirty check. ``[]`` without a lock."""
    lock_path = Path(lock_path)
    if not lock_path.is_file():
        return []
    paths = {out["path"] for entry in lock_stages(lock_path).values() for out in entry_items(entry, "outs")}
    lock_name = os.path.relpath(lock_path.resolve(), project_root(lock_path).resolve())
    return [lock_name, *sorted(paths)]


def stage_outputs(stage: str, lock_path: str | Path = "dvc.lock") -> list[str]:
    """The output paths of ``stage``'s (previous) ``dvc.lock`` entry; ``[]`` when it has none."""
    lock_path = Path(lock_path)
    if not lock_path.is_file():
        return []
    return [out["path"] for out in entry_items(lock_stages(lock_path).get(stage), "outs")]


def dvc_hash(path: str | Path) -> str | None:
    """The md5 ``dvc.lock`` records for ``path`` once DVC has hashed it: the file's md5, or for a
    folder ``<md5>.dir``, the md5 of DVC's listing ``json.dumps([{"md5", "relpath"}...] sorted by
    relpath, sort_keys=True)`` of its files; ``None`` when ``path`` does not exist."""
    path = Path(path)
    if path.is_file():
        return _md5_file(path)
    if not path.is_dir():
        return None
    files = sorted((f.relative_to(path).as_posix(), f) for f in path.rglob("*") if f.is_file())
    listing = [{"md5": _md5_file(f), "relpath": rel} for rel, f in files]
    return hashlib.md5(json.dumps(listing, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def flat_params(tree: Mapping[str, Any]) -> dict[str, str]:
    """Flat, MLflow-safe params: dotted keys, JSON for lists/``None``/bools, values and keys
    clipped to MLflow's limits with a visible ``...[truncated]`` marker (so logging never fails
    on a long list such as ``data.real.sources``)."""
    out = {}
    for key, value in flatten(tree).items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        out[_clip(key, MAX_PARAM_KEY)] = _clip(text, MAX_PARAM_VALUE)
    return out
