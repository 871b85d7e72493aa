"""The metrics logger a trainer is handed: ``log(metrics, step)``. No MLflow here.

Trainers and evaluators depend on the :class:`MetricsLogger` protocol only; the MLflow
implementation (:class:`agentr1.tracking.mlflow_adapter.MLflowLogger`) is built by a stage run,
:class:`NullLogger` and :class:`InMemoryLogger` let the core run and be tested without MLflow.
Metric names are namespaced by the caller (``train/loss``, ``rollout/reward``, ``dev/em``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class MetricsLogger(Protocol):
    """Anything that records scalar metrics at an integer step."""

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record every ``name -> value`` of ``metrics`` at ``step``."""


@runtime_checkable
class TrajectoryLogger(Protocol):
    """A logger that also takes sampled episodes (MLflow: as traces) every N training steps;
    a trainer checks ``isinstance(logger, TrajectoryLogger)`` before calling it."""

    def log_trajectories(self, trajectories: Sequence[Any], step: int, split: str = "train") -> None:
        """Record (a sample of) ``trajectories`` produced at ``step``."""


def check_metrics(metrics: Mapping[str, float], step: int) -> dict[str, float]:
    """Validated copy of ``metrics`` as floats; ``TypeError`` for a non-numeric value or a
    non-integer/negative step (shared by every logger so they accept the same inputs)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"step must be a non-negative int, got {step!r}")
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (str, bytes, bool)) or not hasattr(value, "__float__"):
            raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}")
        out[str(key)] = float(value)
    return out


class NullLogger:
    """Accepts and validates metrics, records nothing (a run with tracking disabled)."""

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        check_metrics(metrics, step)

    def log_trajectories(self, trajectories: Sequence[Any], step: int, split: str = "train") -> None:
        """Nothing to record."""


class InMemoryLogger:
    """Keeps every logged metric: ``history[name] == [(step, value), ...]`` in logging order."""

    def __init__(self) -> None:
        self.history: dict[str, list[tuple[int, float]]] = {}
        self.trajectories: list[tuple[int, str, int]] = []  # (step, split, number of episodes)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in check_metrics(metrics, step).items():
            self.history.setdefault(key, []).append((step, value))

    def log_trajectories(self, trajectories: Sequence[Any], step: int, split: str = "train") -> None:
        self.trajectories.append((step, split, len(trajectories)))

    def last(self, name: str) -> float:
        """The most recent value of ``name`` (``KeyError`` if never logged)."""
        return self.history[name][-1][1]

    def finite(self) -> bool:
        """Whether every recorded value is finite (a cheap NaN/inf guard for tests)."""
        return all(math.isfinite(v) for series in self.history.values() for _, v in series)
