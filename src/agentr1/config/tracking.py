"""``tracking``: MLflow (store, experiment, traces, registry and promotion gate)."""

from __future__ import annotations

from pydantic import Field

from agentr1.config.base import _Section


class TrackingConfig(_Section):
    """MLflow (``agentr1.tracking``). ``uri``: the tracking store (env ``MLFLOW_TRACKING_URI``
    wins); a ``sqlite:///`` path is relative to the working directory, its artifacts go under
    ``artifact_root``; an ``http(s)://`` server is checked at stage start (``connect_timeout_s``)
    and a stage fails naming it when unreachable or failing; ``http_timeout_s``, ``http_retries``
    and ``http_backoff_factor`` then bound MLflow's own HTTP client for the rest of the process
    (``MLFLOW_HTTP_REQUEST_TIMEOUT`` / ``_MAX_RETRIES`` / ``_BACKOFF_FACTOR`` when set win).
    The experiment is ``<experiment_prefix>-<profile>``;
    ``parent_run`` nests the stage runs of one pipeline (tag ``agentr1.pipeline_id``) under a
    parent run. ``trace_sample``: episodes logged as traces per evaluated split and per traced
    training step (each costs about 0.15 s to export to the SQLite store). ``retry_timeout_s``:
    how long a stage run retries a write the store refuses for a while (locked, 429/5xx, dropped
    connections) before it goes on without MLflow, ends its run FAILED and leaves it to
    ``agentr1 track``. ``lock_timeout_s``: how long a command that writes from what the store
    holds (``agentr1 track``, ``agentr1 promote``, the evaluation's registration) waits for
    another such command to finish (:mod:`agentr1.tracking.writelock`). ``registered_model`` and
    ``gate_metric`` (with ``<metric>_ci_lower`` /
    ``_ci_upper``) drive the registry and ``agentr1 promote``. ``enabled: false`` runs stages
    without MLflow (no-op logger)."""

    enabled: bool = True
    uri: str = "sqlite:///mlflow/mlflow.db"
    artifact_root: str = "mlflow/artifacts"
    experiment_prefix: str = "agentr1"
    parent_run: bool = True
    connect_timeout_s: float = Field(5.0, gt=0)
    http_timeout_s: int = Field(60, ge=1)
    http_retries: int = Field(2, ge=0, le=10)
    http_backoff_factor: int = Field(1, ge=0, le=120)
    retry_timeout_s: float = Field(120.0, ge=0)
    lock_timeout_s: float = Field(600.0, ge=0)
    trace_sample: int = Field(8, ge=0)
    registered_model: str = "agentr1-policy"
    gate_metric: str = "test/em"
