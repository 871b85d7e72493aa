"""``tracking``: MLflow (store, experiment, traces, registry and promotion gate)."""

from __future__ import annotations

from pydantic import Field

from agentr1.config.base import _Section


class TrackingConfig(_Section):
    """MLflow (``agentr1.tracking``). ``uri``: the tracking store (env ``MLFLOW_TRACKING_URI``
    wins); a ``sqlite:///`` path is relative to the working directory, its artifacts go under
    ``artifact_root``; an ``http(s)://`` server is checked at stage start (``connect_timeout_s``)
    and a stage fails naming it when unreachable. The experiment is ``<experiment_prefix>-<profile>``;
    ``parent_run`` nests the stage runs of one pipeline (tag ``agentr1.pipeline_id``) under a
    parent run. ``trace_sample``: episodes logged as traces per evaluated split and per traced
    training step (each costs about 0.15 s to export to the SQLite store). ``registered_model``
    and ``gate_metric`` (with ``<metric>_ci_lower``/``_ci_upper``) drive the registry and
    ``agentr1 promote``. ``enabled: false`` runs stages without MLflow (no-op logger)."""

    enabled: bool = True
    uri: str = "sqlite:///mlflow/mlflow.db"
    artifact_root: str = "mlflow/artifacts"
    experiment_prefix: str = "agentr1"
    parent_run: bool = True
    connect_timeout_s: float = Field(5.0, gt=0)
    trace_sample: int = Field(8, ge=0)
    registered_model: str = "agentr1-policy"
    gate_metric: str = "test/em"
