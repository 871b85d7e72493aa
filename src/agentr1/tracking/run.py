"""The handle a stage holds on its MLflow run: :class:`StageRun`. Importing this module does not
import ``mlflow`` (each method imports it when it has something to log), so a stage run with
tracking off (``tracking.enabled: false``, or a non-zero rank of a distributed job) costs nothing.

:func:`agentr1.tracking.mlflow_adapter.stage_run` opens the MLflow run and yields an enabled
:class:`StageRun`; ``StageRun(cfg, stage)`` without a ``run_id`` is the disabled one, whose
``log_*``/``set_tags``/``tag_checkpoint``/``log_model`` do nothing and whose ``logger`` is a
:class:`NullLogger`. Stages log through these methods only: no stage module imports ``mlflow``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from agentr1.tracking.logger import MetricsLogger, NullLogger
from agentr1.tracking.tags import CHECKPOINT_TAG

if TYPE_CHECKING:
    from agentr1.config import Config
    from agentr1.rollout.trajectory import Trajectory


@dataclass
class StageRun:
    """One stage execution's MLflow run. ``run_id`` is ``None`` when tracking is disabled; every
    method is then a no-op and ``logger`` is a :class:`NullLogger`."""

    cfg: "Config"
    stage: str
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None
    pipeline_id: str | None = None
    logger: MetricsLogger = field(default_factory=NullLogger)
    trace_tags: dict[str, str] = field(default_factory=dict)  # on every trace: agentr1.run_name, agentr1.policy
    pipeline: "StageRun | None" = None  # the pipeline's parent run (tracking.parent_run), if any

    @property
    def enabled(self) -> bool:
        return self.run_id is not None

    def client(self) -> Any:
        """An ``MlflowClient`` on this run's store (enabled runs only)."""
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """``metrics`` at ``step`` (through :attr:`logger`, which checks every value is finite)."""
        self.logger.log(metrics, step=step)

    def log_artifacts(self, paths: Sequence[str | Path], artifact_path: str) -> None:
        """Each file or folder of ``paths`` as an artifact under ``artifact_path``."""
        if not self.enabled:
            return
        import mlflow

        for path in paths:
            if Path(path).is_dir():
                mlflow.log_artifacts(str(path), artifact_path=artifact_path, run_id=self.run_id)
            else:
                mlflow.log_artifact(str(path), artifact_path=artifact_path, run_id=self.run_id)

    def log_curve(self, csv_path: str | Path, columns: Mapping[str, str], step_column: str = "step") -> int:
        """Replay a curve a stage wrote (one CSV row per step) as step metrics: column ``c`` of
        each row becomes metric ``columns[c]`` at the row's ``step_column``; empty cells (a value
        not measured at that step) are left out. What a live run logged step by step, for a run
        reconstructed from the outputs; returns the number of rows read."""
        with open(csv_path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        series = [(int(row[step_column]), {name: float(row[col]) for col, name in columns.items() if row.get(col) not in ("", None)})
                  for row in rows]
        series = [(step, metrics) for step, metrics in series if metrics]
        log_steps = getattr(self.logger, "log_steps", None)
        if log_steps is not None:
            log_steps(series)
        else:
            for step, metrics in series:
                self.logger.log(metrics, step=step)
        return len(rows)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Tags on this run."""
        if self.enabled:
            client = self.client()
            for key, value in tags.items():
                client.set_tag(self.run_id, key, value)

    def log_traces(self, trajectories: Sequence["Trajectory"], sample_n: int | None = None, **kw: Any) -> list[str]:
        """:func:`agentr1.tracking.traces.log_trajectory_traces` into this run
        (``sample_n`` defaults to ``tracking.trace_sample``)."""
        if not self.enabled:
            return []
        from agentr1.tracking.traces import log_trajectory_traces

        n = self.cfg.tracking.trace_sample if sample_n is None else sample_n
        kw["tags"] = {**self.trace_tags, **kw.get("tags", {})}
        return log_trajectory_traces(trajectories, n, run_id=self.run_id, seed=self.cfg.seed, **kw)

    def log_episode_traces(self, rows: Sequence[Mapping[str, Any]], split: str, sample_n: int | None = None,
                           tags: Mapping[str, str] | None = None) -> list[str]:
        """:func:`agentr1.tracking.traces.log_episode_traces` of scored episode rows (an
        evaluation's ``episodes.jsonl``, in question order) into this run: the same seeded sample
        and tags as :meth:`log_traces` of the episodes' trajectories."""
        if not self.enabled:
            return []
        from agentr1.tracking.traces import log_episode_traces

        n = self.cfg.tracking.trace_sample if sample_n is None else sample_n
        return log_episode_traces(rows, n, run_id=self.run_id, seed=self.cfg.seed, split=split,
                                  tags={**self.trace_tags, **(tags or {})})

    def log_episode_table(self, rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
        """:func:`agentr1.tracking.traces.log_episode_table` into this run."""
        if self.enabled:
            from agentr1.tracking.traces import log_episode_table

            log_episode_table(rows, artifact_file, run_id=self.run_id)

    def pipeline_run(self) -> "StageRun":
        """The pipeline's parent run (where the report's headline results go), or a disabled run
        when tracking is off or ``tracking.parent_run`` is false."""
        return self.pipeline if self.pipeline is not None else StageRun(self.cfg, "pipeline")

    def log_table(self, trajectories: Sequence["Trajectory"], artifact_file: str, **kw: Any) -> None:
        """:func:`agentr1.tracking.traces.log_trajectory_table` into this run."""
        if self.enabled:
            from agentr1.tracking.traces import log_trajectory_table

            log_trajectory_table(trajectories, artifact_file, run_id=self.run_id, **kw)

    def tag_checkpoint(self, checkpoint_dir: str | Path) -> str | None:
        """Tag this run with the digest of the checkpoint it wrote (``agentr1.checkpoint_sha256``),
        so a registered version can name the run its weights come from; the digest (``None``
        when disabled)."""
        if not self.enabled:
            return None
        from agentr1.io import tree_digest

        digest = tree_digest(checkpoint_dir)
        self.set_tags({CHECKPOINT_TAG: digest})
        return digest

    def log_model(self, checkpoint_dir: str | Path, metrics: Mapping[str, float], **kw: Any) -> Any:
        """:func:`agentr1.tracking.registry.log_policy_model` from this run (``None`` when disabled)."""
        if not self.enabled:
            return None
        from agentr1.tracking.registry import log_policy_model

        kw.setdefault("registered_name", self.cfg.tracking.registered_model)
        return log_policy_model(checkpoint_dir, metrics, run_id=self.run_id, **kw)
