"""agentr1.tracking: the MLflow adapter (runs, traces, models, registry) at the edge of the system.

Core modules never import MLflow: a trainer gets a :class:`MetricsLogger` handed to it
(:class:`NullLogger`/:class:`InMemoryLogger` without MLflow, :class:`MLflowLogger` inside a
:func:`stage_run`). The MLflow-backed names below are imported lazily, so importing this package
does not import ``mlflow``. The gate itself is ``agentr1.tracking.gate.gate`` (a pure function;
``agentr1.tracking.gate`` is its module).

- :mod:`.logger`: ``MetricsLogger`` protocol, ``NullLogger``, ``InMemoryLogger`` (no MLflow);
- :mod:`.provenance`: git sha/dirty flag, ``dvc.lock`` hashes, pipeline id, flat params (no MLflow);
- :mod:`.run`: ``StageRun``, a stage's handle on its run (metrics, artifacts, tags, traces, model;
  no MLflow import until it logs);
- :mod:`.mlflow_adapter`: tracking URI, reachability check, experiment per profile, ``stage_run``;
- :mod:`.traces`: trajectories as MLflow traces (AGENT/LLM/RETRIEVER/TOOL spans) and a table;
- :mod:`.registry`: policy checkpoints as pyfunc models, versions, aliases, the promotion gate;
- :mod:`.compare`: ``agentr1 compare`` / ``agentr1 promote``;
- :mod:`.views`: what the UI opens on: the RL runs side by side (a shared view), a colour per
  method, the champion on the Models page, links to them;
- :mod:`.datasets`: the processed files a stage read, as MLflow dataset inputs;
- :mod:`.store`: opening a store (checks, atomic first creation of a SQLite store, bounded HTTP);
- :mod:`.writelock`: one writer at a time (``track``, ``promote``, an evaluation's registration);
- :mod:`.retry`: bounded retries of a stage run's writes while the store is busy;
- :mod:`.owner`: which process runs a stage run; runs of killed processes, resumed runs;
- :mod:`.replaycheck`: the files ``agentr1 track`` replays, checked before anything is written;
- :mod:`.storage`: S3 sync of plain files and folders (boto3; independent of MLflow).
"""

from __future__ import annotations

import importlib
from typing import Any

from agentr1.tracking.logger import InMemoryLogger, MetricsLogger, NullLogger, TrajectoryLogger

_LAZY = {
    "MLflowLogger": "agentr1.tracking.mlflow_adapter",
    "StageRun": "agentr1.tracking.run",
    "stage_run": "agentr1.tracking.mlflow_adapter",
    "resolve_tracking_uri": "agentr1.tracking.uri",
    "check_reachable": "agentr1.tracking.mlflow_adapter",
    "log_trajectory_traces": "agentr1.tracking.traces",
    "log_trajectory_table": "agentr1.tracking.traces",
    "log_policy_model": "agentr1.tracking.registry",
    "promote": "agentr1.tracking.registry",
    "GateStats": "agentr1.tracking.gate",
}

__all__ = ["InMemoryLogger", "MetricsLogger", "NullLogger", "TrajectoryLogger", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentr1.tracking' has no attribute {name!r}")
