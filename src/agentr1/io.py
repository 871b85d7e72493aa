"""Atomic file output: a stage that fails leaves no half-written output behind.

Everything is written to a temporary sibling first and renamed into place only when complete
(``os.replace`` is atomic on one filesystem).

Temporary siblings are named ``.<name>.tmp-<pid>-<random>`` and a directory being replaced is
moved aside as ``.<name>.old-<pid>``: a process killed mid-write (SIGTERM, OOM) leaves them behind,
and the next write of the same path removes those of dead processes
(:func:`remove_stale_temps`; never this process's own, never a live process's).

:func:`check_destination` tells, before a stage or command does its work, whether it will be able
to write its output path at all (a folder under ``/proc``, ``/dev/null`` as a folder, a file where a
folder goes), so it fails in a second with the field to fix instead of after the work.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentr1.errors import StageError

log = logging.getLogger(__name__)

LEGACY_TEMP_AGE_S = 3600.0  # a temporary without a pid (written before pids were in the name) is stale after this
_TEMP = re.compile(r"^\.(?P<name>.+?)\.(?P<kind>tmp|old)-(?P<rest>.*)$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _ordinary_mode(path: Path, is_dir: bool) -> None:
    """mkdtemp/mkstemp create 0700/0600 entries; give them the mode a plain mkdir/open would."""
    os.chmod(path, (0o777 if is_dir else 0o666) & ~_umask())


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (a zombie or another user's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or a number no process can have
        return False
    except PermissionError:
        return True
    except OSError:
        return True  # cannot tell: assume alive (never delete what may be in use)
    return True


def _temp_owner(kind: str, rest: str) -> int | None:
    m = re.match(r"(\d+)-" if kind == "tmp" else r"(\d+)$", rest)
    return int(m.group(1)) if m else None


def _age_s(path: Path) -> float:
    try:
        newest = path.lstat().st_mtime
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                newest = max(newest, child.lstat().st_mtime)
    except OSError:
        return 0.0
    return time.time() - newest


def remove_stale_temps(
    parent: str | Path,
    name: str | None = None,
    kinds: tuple[str, ...] = ("tmp", "old"),
    keep_orphans: bool = True,
    legacy_age_s: float = LEGACY_TEMP_AGE_S,
) -> list[Path]:
    """Remove the temporaries that :func:`atomic_dir` / :func:`atomic_path` left in ``parent``
    (those of the path ``name``, or of every path when ``None``) when their writer is gone: the
    pid in the name is not this process and no longer alive, or (a name without a pid) nothing in
    it changed for ``legacy_age_s``. With ``keep_orphans`` an ``.old`` copy whose path is missing
    is kept (a kill between the two renames: it is the only copy left). Returns what was removed."""
    parent = Path(parent)
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    me = os.getpid()
    for entry in entries:
        m = _TEMP.match(entry.name)
        if not m or m["kind"] not in kinds or (name is not None and m["name"] != name):
            continue
        if m["kind"] == "old" and keep_orphans and not (parent / m["name"]).exists():
            continue
        pid = _temp_owner(m["kind"], m["rest"])
        stale = (pid != me and not pid_alive(pid)) if pid is not None else _age_s(entry) > legacy_age_s
        if not stale:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
        if not entry.exists():
            removed.append(entry)
            log.info("removed the stale temporary %s (left by a killed write)", entry)
    return removed


def tree_digest(root: str | Path, exclude: frozenset[str] = frozenset()) -> str:
    """SHA-256 over every file under ``root`` (relative POSIX paths in ``exclude`` left out): for
    each file in sorted relative-path order, its path, a NUL, its size, a NUL and its bytes. Any
    added, removed, renamed or edited file changes the digest."""
    root = Path(root)
    files = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    h = hashlib.sha256()
    for rel in sorted(set(files) - exclude):
        h.update(f"{rel}\0{files[rel].stat().st_size}\0".encode())
        with files[rel].open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, path.name, kinds=("tmp",))
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent))
    _ordinary_mode(tmp, is_dir=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
    remove_stale_temps(path.parent, path.name, kinds=("old",))  # path is in place: older copies are garbage


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary file path that is renamed to ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, path.name, kinds=("tmp",))
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    _ordinary_mode(tmp, is_dir=False)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write deterministic JSON (sorted keys, fixed indent, trailing newline)."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _kind(path: Path) -> str:
    """What ``path`` (which exists) is, in words: ``a file``, ``a character device``, ..."""
    import stat

    mode = path.stat().st_mode
    for test, word in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return word
    return "not a file or folder"


def _default_fix(field: str, kind: str) -> str:
    what = "a folder" if kind == "dir" else "a file path in a folder"
    if field.startswith("-"):
        return f"pass {field} {what} you can write to"
    if field.isupper():  # an environment variable
        return f"point {field} at {what} you can write to (or unset it)"
    return f"set {field} to {what} you can write to (in the params file, or --set {field}=PATH)"


def check_destination(
    path: str | Path, field: str, kind: str = "dir", replaced: bool = False, fix: str | None = None
) -> None:
    """Raise :class:`StageError` naming ``field``, ``path`` and the fix when output ``path`` could
    not be written; creates nothing that stays (the write test is a temporary folder, removed).

    ``kind="dir"``: ``path`` is (or will be made as) a folder, written into; with ``replaced`` it
    is swapped in whole (:func:`atomic_dir`), so its parent is written instead. ``kind="file"``:
    a file written through a temporary sibling (:func:`atomic_path`), so it must not be a folder
    nor a device/FIFO. In each case the nearest existing ancestor of where new entries go must be
    a folder that accepts a new entry."""
    if kind not in ("dir", "file"):
        raise ValueError(f"kind must be 'dir' or 'file', not {kind!r}")
    fix = fix or _default_fix(field, kind)
    where = f"{field} ({path})"
    if not str(path).strip():
        raise StageError(f"{field} is empty: {fix}")
    p = Path(path)
    try:
        exists = p.exists()
        if p.is_symlink() and not exists:
            raise StageError(f"{where} is a broken symbolic link (to {os.readlink(p)}): {fix}")
        if exists:
            found = _kind(p)
            if kind == "dir" and found != "a folder":
                raise StageError(f"{where} is {found}, not a folder: {fix}")
            if kind == "file" and found != "a file":
                raise StageError(f"{where} is {found}, not a regular file: {fix}")
        writes_in = p if (kind == "dir" and not replaced) else p.absolute().parent
        ancestor = writes_in.absolute()
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise StageError(f"{where} cannot be created: {ancestor} is {_kind(ancestor)}, not a folder: {fix}")
    except OSError as exc:  # a name too long, a loop of links, an unreadable parent
        raise StageError(f"{where} cannot be checked ({exc.strerror or exc}): {fix}") from None
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".agentr1-write-test-", dir=ancestor))
    except OSError as exc:
        raise StageError(
            f"{where} cannot be written: {ancestor} takes no new entries ({exc.strerror or exc}): {fix}"
        ) from None
