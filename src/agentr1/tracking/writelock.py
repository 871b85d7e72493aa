"""One writer at a time on an MLflow tracking store: :func:`writer_lock`.

Why: the commands that decide what to write from what the store holds (``agentr1 track`` plans
the runs a store lacks, the evaluation's registration looks for its version, ``agentr1 promote``
reads both aliases before moving one) give wrong answers when two run at once: both see an
empty store and both log every stage (6 versions instead of 3), or both gate against the same
champion. Holding this lock around the read-decide-write phase makes two such commands behave
as if run one after the other. Taken by ``agentr1 track`` (its whole write phase, the plan made
again inside), ``agentr1 promote`` and the evaluate stage's registration and gate; not by train
or plain run logging, whose writes never depend on what another command wrote.

Where the lock lives:

* a ``sqlite:///`` store: ``<db>.writer-lock`` beside the database file, so every process that
  opens the same file (however its URI was spelled relative to its working directory) shares it;
* any other store (an ``http(s)://`` server, a database server): a per-user lock in
  ``$XDG_CACHE_HOME/agentr1/locks`` (default ``~/.cache``), keyed by a hash of the redacted URI.
  That serialises the writers of one machine and user only; writers on other machines are not
  serialised, which is why registration is idempotent on its own
  (:func:`agentr1.tracking.registry.register_evaluation` reuses a complete version of the same
  evaluation and deletes an unfinished one) and ``agentr1 track`` adds nothing a second time.

The lock is an OS file lock (``filelock``: ``flock`` on POSIX), released by the kernel when its
holder dies, so a ``kill -9`` never leaves the store locked. It is re-entrant within a thread
(``agentr1 track`` holds it while the evaluate stage's replay takes it again). A waiting command
logs who holds it (pid and command, from ``<lock>.holder``) and gives up after
``tracking.lock_timeout_s`` with a :class:`StageError` naming the lock file, the holder and the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from agentr1.errors import StageError
from agentr1.tracking.redact import redact_uri
from agentr1.tracking.uri import resolve_tracking_uri, sqlite_path

if TYPE_CHECKING:
    from agentr1.config import Config

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0  # TrackingConfig.lock_timeout_s's default; a plain URI gets it too
SUFFIX = ".writer-lock"
_held: dict[tuple[str, int], list] = {}  # (lock file, thread) -> [FileLock, depth]: re-entrant
_held_guard = threading.Lock()


def lock_file(uri: str) -> Path:
    """The lock file of store ``uri`` (module docstring)."""
    db = sqlite_path(uri)
    if db is not None:
        return db.with_name(db.name + SUFFIX)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(redact_uri(uri.strip()).encode()).hexdigest()[:16]
    return cache / "agentr1" / "locks" / f"mlflow-{key}{SUFFIX}"


def holder_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".holder")


def _holder(lock: Path) -> dict:
    """What the holder of ``lock`` wrote about itself (``{}`` when unknown or unreadable)."""
    try:
        data = json.loads(holder_file(lock).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(info: dict) -> str:
    if not info:
        return "holder unknown"
    since = info.get("since")
    when = time.strftime("%H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else "?"
    return (
        f"held by pid {info.get('pid', '?')} on {info.get('host', '?')} since {when}: "
        f"{info.get('what', '?')} (`{info.get('command', '?')}`)"
    )


def _write_holder(lock: Path, what: str) -> None:
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "what": what,
        "since": time.time(),
        "command": redact_uri(" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "?")[:300],
    }
    try:
        holder_file(lock).write_text(json.dumps(info) + "\n")
    except OSError as exc:  # informative only: the lock itself holds
        log.debug("cannot write %s: %s", holder_file(lock), exc)


@contextlib.contextmanager
def writer_lock(store: Config | str, what: str, timeout_s: float | None = None) -> Iterator[Path | None]:
    """Hold the writer lock of ``store`` (a config: its tracking store and
    ``tracking.lock_timeout_s``; or a tracking URI) while the block runs; ``what`` names the
    command in the holder file and in the messages (``agentr1 track``). Waits up to
    ``timeout_s`` (default: the config's, else :data:`DEFAULT_TIMEOUT_S`), logging the holder,
    then :class:`StageError` naming the lock file, the holder and the fix. Yields the lock file
    (``None`` when tracking is disabled: nothing is written, nothing is locked)."""
    from filelock import FileLock

    if not isinstance(store, str) and not store.tracking.enabled:
        yield None
        return
    uri = store if isinstance(store, str) else resolve_tracking_uri(store)
    if timeout_s is not None:
        limit = float(timeout_s)
    else:
        limit = DEFAULT_TIMEOUT_S if isinstance(store, str) else float(store.tracking.lock_timeout_s)
    path = lock_file(uri)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = (str(path.resolve()), threading.get_ident())
    except OSError as exc:
        raise StageError(
            f"MLflow tracking store {redact_uri(uri)}: cannot create the writer lock's folder "
            f"{path.parent} ({exc}): fix its permissions or the store's path"
        ) from None
    with _held_guard:
        entry = _held.get(key)
        if entry is not None:  # this thread holds it already (track -> the evaluate stage's replay)
            entry[1] += 1
    if entry is not None:
        try:
            yield path
        finally:
            with _held_guard:
                entry[1] -= 1
        return
    lock = FileLock(str(path), preserve_lock_file=True)
    _acquire(lock, path, uri, what, limit)
    _write_holder(path, what)
    with _held_guard:
        _held[key] = [lock, 1]
    try:
        yield path
    finally:
        with _held_guard:
            _held.pop(key, None)
        with contextlib.suppress(OSError):
            holder_file(path).unlink()  # before the release: the next holder writes its own
        lock.release()


def _acquire(lock, path: Path, uri: str, what: str, limit: float) -> None:
    """Take ``lock`` (the store's writer lock file ``path``) at once, else log its holder and wait
    up to ``limit`` s; :class:`StageError` naming the holder and the fix when it stays held."""
    from filelock import Timeout

    start = time.monotonic()
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.warning(
                "%s: waiting up to %.0f s for the writer lock of MLflow store %s (%s; lock %s)",
                what,
                limit,
                redact_uri(uri),
                _describe(_holder(path)),
                path,
            )
            lock.acquire(timeout=max(limit, 0.0))
    except Timeout:
        raise StageError(
            f"{what}: another command has been writing to MLflow tracking store {redact_uri(uri)} for more than "
            f"{limit:g} s ({_describe(_holder(path))}; lock {path}): wait for it to finish and run this again, or "
            f"stop it if it hangs (the lock is freed when its process exits); tracking.lock_timeout_s sets how long "
            f"to wait"
        ) from None
    except OSError as exc:
        raise StageError(
            f"{what}: cannot lock {path} for MLflow tracking store {redact_uri(uri)} ({exc}): fix the "
            "permissions of its folder"
        ) from None
    waited = time.monotonic() - start
    if waited >= 1.0:
        log.info("%s: got the writer lock of %s after %.1f s", what, redact_uri(uri), waited)
