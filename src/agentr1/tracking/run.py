"""The handle a stage holds on its MLflow run: :class:`StageRun`. Importing this module does not
import ``mlflow`` (each method imports it when it has something to log), so a stage run with
tracking off (``tracking.enabled: false``, or a non-zero rank of a distributed job) costs nothing.

:func:`agentr1.tracking.mlflow_adapter.stage_run` opens the MLflow run and yields an enabled
:class:`StageRun`; ``StageRun(cfg, stage)`` without a ``run_id`` is the disabled one, whose
``log_*``/``set_tags``/``tag_checkpoint``/``log_model`` do nothing and whose ``logger`` is a
:class:`NullLogger`. Stages log through these methods only: no stage module imports ``mlflow``.

Every write is retried while the store is busy (:func:`agentr1.tracking.retry.retrying`, up to
``tracking.retry_timeout_s``). One that still fails is recorded in :attr:`StageRun.health` and
raises :class:`agentr1.tracking.retry.TrackingFailed`, as does every later write of the run; the
step-wise logger then goes on silently (a trainer keeps training). The stage's outputs are not
affected: :func:`agentr1.tracking.mlflow_adapter.stage_run` ends such a run FAILED and says to log
it with ``agentr1 track``.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agentr1.tracking.logger import MetricsLogger, NullLogger
from agentr1.tracking.retry import Deadline, TrackingFailed, retrying, short
from agentr1.tracking.tags import CHECKPOINT_TAG

if TYPE_CHECKING:
    from agentr1.config import Config
    from agentr1.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)
T = TypeVar("T")
_TAG_BATCH = 100  # MLflow's MAX_PARAMS_TAGS_PER_BATCH


@dataclass
class TrackingHealth:
    """Whether a stage run's tracking still works; shared by the run and its loggers. ``failure``:
    the first write that failed for good (then every later write is skipped or refused)."""

    run_name: str = ""
    run_id: str | None = None
    retry_timeout_s: float = 120.0
    failure: str | None = None

    def deadline(self) -> Deadline:
        return Deadline(self.retry_timeout_s)

    def fail(self, exc: BaseException) -> None:
        """Record ``exc`` (the first time: with a warning) as the run's tracking failure."""
        if self.failure is None:
            self.failure = (
                short(exc, 1000) if isinstance(exc, TrackingFailed) else f"{type(exc).__name__}: {short(exc, 1000)}"
            )
            log.warning(
                "MLflow tracking of %s (run %s) failed: %s. The stage goes on without MLflow; its run will end "
                "FAILED: run `agentr1 track` after it to log the stage from its outputs",
                self.run_name,
                self.run_id,
                self.failure,
            )

    def write(self, fn: Callable[..., T], *args: Any, what: str, retry: bool = True, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` retried while the store is busy (a single attempt without
        ``retry``: a write that is not safe to repeat); :class:`TrackingFailed` when it fails
        for good, or at once when an earlier write did."""
        if self.failure is not None:
            raise TrackingFailed(f"{what}: skipped, the MLflow store failed earlier ({self.failure})")
        try:
            return retrying(fn, *args, what=what, deadline=self.deadline() if retry else Deadline(0), **kwargs)
        except TrackingFailed as exc:
            self.fail(exc)
            raise


@dataclass
class StageRun:
    """One stage execution's MLflow run. ``run_id`` is ``None`` when tracking is disabled; every
    method is then a no-op and ``logger`` is a :class:`NullLogger`."""

    cfg: Config
    stage: str
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None
    pipeline_id: str | None = None
    logger: MetricsLogger = field(default_factory=NullLogger)
    trace_tags: dict[str, str] = field(default_factory=dict)  # on every trace: agentr1.run_name, agentr1.policy
    pipeline: StageRun | None = None  # the pipeline's parent run (tracking.parent_run), if any
    health: TrackingHealth = field(default_factory=TrackingHealth)
    logged_through: int = -1  # a continued run (train --resume): the last step it already holds
    outputs: str | None = None  # where the stage saved its outputs (named when tracking fails)

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

    @property
    def tracking_failed(self) -> bool:
        """Whether a write of this run failed for good (:class:`TrackingHealth`)."""
        return self.health.failure is not None

    def _write(self, fn: Callable[..., T], *args: Any, what: str, retry: bool = True, **kwargs: Any) -> T:
        return self.health.write(fn, *args, what=f"{what} of {self.stage} run {self.run_id}", retry=retry, **kwargs)

    def log_artifacts(self, paths: Sequence[str | Path], artifact_path: str) -> None:
        """Each file or folder of ``paths`` as an artifact under ``artifact_path``."""
        if not self.enabled:
            return
        import mlflow

        for path in paths:
            write = mlflow.log_artifacts if Path(path).is_dir() else mlflow.log_artifact
            self._write(write, str(path), what=f"artifact {path}", artifact_path=artifact_path, run_id=self.run_id)

    def catch_up(self, history: Sequence[Mapping[str, Any]]) -> int:
        """Log the steps of ``history`` (rows ``{"step": k, metric: value, ...}``, a resumed
        trainer's) that this run does not hold yet: all of them in a new run; in a continued one
        the logger skips each metric at the steps the run holds of it. Returns the number of steps
        after :attr:`logged_through` (those a continued run lacked entirely)."""
        series = [
            (
                int(h["step"]),
                {k: v for k, v in h.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)},
            )
            for h in history
        ]
        series = [(step, metrics) for step, metrics in series if metrics]
        if not self.enabled or not series:
            return 0
        self._log_series(series)
        return sum(step > self.logged_through for step, _ in series)

    def _log_series(self, series: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        """Every ``(step, metrics)`` of ``series``, batched when the logger can (``log_steps``)."""
        log_steps = getattr(self.logger, "log_steps", None)
        if log_steps is not None:
            log_steps(series)
        else:
            for step, metrics in series:
                self.logger.log(metrics, step=step)

    def log_curve(self, csv_path: str | Path, columns: Mapping[str, str], step_column: str = "step") -> int:
        """Replay a curve a stage wrote (one CSV row per step) as step metrics: column ``c`` of
        each row becomes metric ``columns[c]`` at the row's ``step_column``; empty cells (a value
        not measured at that step) are left out. What a live run logged step by step, for a run
        reconstructed from the outputs; returns the number of rows read."""
        with open(csv_path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        series = [
            (
                int(row[step_column]),
                {name: float(row[col]) for col, name in columns.items() if row.get(col) not in ("", None)},
            )
            for row in rows
        ]
        self._log_series([(step, metrics) for step, metrics in series if metrics])
        return len(rows)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Tags on this run."""
        if not self.enabled or not tags:
            return
        from mlflow.entities import RunTag

        client = self.client()
        items = [RunTag(key, str(value)) for key, value in tags.items()]
        for i in range(0, len(items), _TAG_BATCH):
            self._write(client.log_batch, self.run_id, what="tags", tags=items[i : i + _TAG_BATCH])

    def log_traces(self, trajectories: Sequence[Trajectory], sample_n: int | None = None, **kw: Any) -> list[str]:
        """:func:`agentr1.tracking.traces.log_trajectory_traces` into this run
        (``sample_n`` defaults to ``tracking.trace_sample``)."""
        if not self.enabled:
            return []
        from agentr1.tracking.traces import log_trajectory_traces

        n = self.cfg.tracking.trace_sample if sample_n is None else sample_n
        kw["tags"] = {**self.trace_tags, **kw.get("tags", {})}
        # not retried: a trace written before the failure would be written twice
        return self._write(
            log_trajectory_traces,
            trajectories,
            n,
            what="traces",
            retry=False,
            run_id=self.run_id,
            seed=self.cfg.seed,
            **kw,
        )

    def log_episode_traces(
        self,
        rows: Sequence[Mapping[str, Any]],
        split: str,
        sample_n: int | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[str]:
        """:func:`agentr1.tracking.traces.log_episode_traces` of scored episode rows (an
        evaluation's ``episodes.jsonl``, in question order) into this run: the same seeded sample
        and tags as :meth:`log_traces` of the episodes' trajectories."""
        if not self.enabled:
            return []
        from agentr1.tracking.traces import log_episode_traces

        n = self.cfg.tracking.trace_sample if sample_n is None else sample_n
        return self._write(
            log_episode_traces,
            rows,
            n,
            what="traces",
            retry=False,
            run_id=self.run_id,
            seed=self.cfg.seed,
            split=split,
            tags={**self.trace_tags, **(tags or {})},
        )

    def log_episode_table(self, rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
        """:func:`agentr1.tracking.traces.log_episode_table` into this run."""
        if self.enabled:
            from agentr1.tracking.traces import log_episode_table

            self._write(log_episode_table, rows, artifact_file, what=f"table {artifact_file}", run_id=self.run_id)

    def log_rows(self, rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
        """:func:`agentr1.tracking.traces.log_rows` into this run (a table the UI renders)."""
        if self.enabled:
            from agentr1.tracking.traces import log_rows

            self._write(log_rows, rows, artifact_file, what=f"table {artifact_file}", run_id=self.run_id)

    def pipeline_run(self) -> StageRun:
        """The pipeline's parent run (where the report's headline results go), or a disabled run
        when tracking is off or ``tracking.parent_run`` is false."""
        return self.pipeline if self.pipeline is not None else StageRun(self.cfg, "pipeline")

    def log_table(self, trajectories: Sequence[Trajectory], artifact_file: str, **kw: Any) -> None:
        """:func:`agentr1.tracking.traces.log_trajectory_table` into this run."""
        if self.enabled:
            from agentr1.tracking.traces import log_trajectory_table

            self._write(
                log_trajectory_table,
                trajectories,
                artifact_file,
                what=f"table {artifact_file}",
                run_id=self.run_id,
                **kw,
            )

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
        # not retried: it registers a model version, which a second attempt would register again
        return self._write(
            log_policy_model, checkpoint_dir, metrics, what="model", retry=False, run_id=self.run_id, **kw
        )
