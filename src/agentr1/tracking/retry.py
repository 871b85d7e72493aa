"""Bounded retries of a stage run's MLflow writes: a store that is busy for a while (a SQLite file
locked by another writer, a server answering 429/5xx or dropping connections) must not crash a
stage that has hours of work in memory.

:func:`retrying` calls a write again with exponential backoff (0.25 s doubling to 8 s, with a
private RNG's jitter: the global ``random`` is part of a trainer's resumable state) while it fails
with a *transient* error (:func:`is_transient`) and the :class:`Deadline` (``tracking.retry_timeout_s``)
has time left; a store that still fails then, or fails with another tracking error
(:func:`is_tracking_error`), raises :class:`TrackingFailed` (a :class:`StageError` naming what was
written and why). Anything else - a bug, a bad metric value - is raised as is.

One attempt may outlast the deadline: MLflow's SQLite store waits up to 20 s for a lock
(``PRAGMA busy_timeout``) and its REST client retries HTTP errors itself
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``) before an error reaches this module, so the worst case is
about the deadline plus one such wait. No library here does this for arbitrary calls (urllib3's
``Retry`` is per HTTP request, which MLflow's REST client already uses; tenacity is not a dependency).
"""

from __future__ import annotations

import logging
import random
import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

from agentr1.errors import StageError

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_DELAY_S = 0.25
MAX_DELAY_S = 8.0
# MLflow error codes of a store that may answer later (SQLite OperationalError -> TEMPORARILY_UNAVAILABLE, 429)
TRANSIENT_CODES = {"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "SERVICE_UNAVAILABLE", "DEADLINE_EXCEEDED"}
TRANSIENT_TEXT = re.compile(
    r"database (?:table )?is (?:locked|busy)|temporarily unavailable|too many requests|max retries exceeded|"
    r"connection (?:refused|reset|aborted|error)|remote ?disconnected|timed? ?out|service unavailable|bad gateway|"
    r"gateway time-?out|\b(?:429|502|503|504) (?:client|server) error",
    re.IGNORECASE,
)
_jitter = random.Random()  # never the global RNG (a trainer checkpoints and restores it)


class TrackingFailed(StageError):
    """An MLflow write of a stage run failed for good (after retries when transient)."""


class Deadline:
    """A time budget shared by several writes (``seconds`` from now)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = max(float(seconds), 0.0)
        self.end = time.monotonic() + self.seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()


def is_tracking_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from the tracking store (MLflow, SQLAlchemy, SQLite, the network or
    the artifact filesystem) rather than from the caller's own code."""
    if isinstance(exc, (TrackingFailed, OSError, sqlite3.Error)):  # OSError: requests' errors, disks
        return True
    try:
        from mlflow.exceptions import MlflowException
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:  # pragma: no cover - both come with mlflow
        return False
    return isinstance(exc, (MlflowException, SQLAlchemyError))


def is_transient(exc: BaseException) -> bool:
    """Whether a retry may succeed: a locked/busy SQLite store, HTTP 429/502/503/504, a refused,
    reset or timed-out connection (by MLflow's error code or the error's text)."""
    if not is_tracking_error(exc) or isinstance(exc, TrackingFailed):
        return False
    if getattr(exc, "error_code", None) in TRANSIENT_CODES or isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    return bool(TRANSIENT_TEXT.search(str(exc)))


def short(exc: BaseException, limit: int = 300) -> str:
    """``exc`` on one line, clipped (SQLAlchemy appends the SQL and a link to its docs)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def retrying(fn: Callable[..., T], *args: Any, what: str, deadline: Deadline, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, called again after a transient failure until ``deadline``
    (module docstring); :class:`TrackingFailed` naming ``what`` when the store still fails."""
    delay, attempts, t0 = FIRST_DELAY_S, 0, time.monotonic()
    while True:
        attempts += 1
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not is_tracking_error(exc):
                raise
            if isinstance(exc, TrackingFailed):
                raise
            left = deadline.remaining()
            if not is_transient(exc) or left <= 0:
                waited = f" after {attempts} attempts in {time.monotonic() - t0:.0f}s" if attempts > 1 else ""
                raise TrackingFailed(f"{what}: {short(exc)}{waited}") from exc
            pause = min(delay * (0.5 + _jitter.random()), left, MAX_DELAY_S)
            log.info(
                "MLflow store busy (%s): %s; retrying in %.2fs (%.0fs of tracking.retry_timeout_s left)",
                short(exc, 120),
                what,
                pause,
                left,
            )
            time.sleep(pause)
            delay = min(delay * 2, MAX_DELAY_S)
