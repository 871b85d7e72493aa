"""What every DVC stage gets: a :class:`StageContext`, opened once per stage by :func:`open_stage`.

A stage is a function ``run(ctx, args)`` over its context. The context holds

* ``cfg``: the validated params;
* ``run``: the stage's tracking run (:class:`agentr1.tracking.run.StageRun`: metrics, artifacts,
  tags, traces, the registry), a disabled one when ``tracking.enabled`` is false or on a non-zero
  rank of a distributed job, so a stage never asks whether tracking is on;
* ``dataset()``: the processed dataset, after checking that ``agentr1 validate`` passed on
  exactly these files and params;
* ``env()``: the ToolEnv with the retriever that ``agentr1 index`` built;
* ``checkpoint(path, made_by)``: a saved policy's folder, or a :class:`StageError` naming the
  command that writes it;
* ``phase(name)``: a timed, logged phase whose seconds land in ``ctx.times`` (the stage's
  ``timing.json``: never a DVC output, so every tracked file is the same bits on every run).

Every failure a user can fix is a :class:`StageError` with the fix in its message.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.config import Config
from agentr1.env.load import load_env
from agentr1.errors import StageError
from agentr1.tracking.run import StageRun

log = logging.getLogger("agentr1.stages")


@dataclass
class StageContext:
    """One stage execution (module docstring)."""

    cfg: Config
    stage: str
    run: StageRun
    times: dict[str, float] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @contextlib.contextmanager
    def phase(self, name: str, digits: int = 2, quiet: bool = False) -> Iterator[None]:
        """Time the block into ``times[name]`` (rounded to ``digits``), logging start and end
        unless ``quiet``."""
        if not quiet:
            log.info("%s: %s ...", self.stage, name)
        t0 = time.perf_counter()
        yield
        self.times[name] = round(time.perf_counter() - t0, digits)
        if not quiet:
            log.info("%s: %s done in %.1fs", self.stage, name, self.times[name])

    def dataset(self) -> Any:
        """The validated processed dataset (:class:`agentr1.data.schema.Dataset`, read once)."""
        if "dataset" not in self._cache:
            from agentr1.data.schema import read_dataset
            from agentr1.data.validation import require_validated

            require_validated(self.cfg)
            try:
                self._cache["dataset"] = read_dataset(self.cfg.data.processed_dir)
            except FileNotFoundError as exc:
                raise StageError(f"{exc}: run `agentr1 prepare` (or `dvc repro prepare`) first") from None
        return self._cache["dataset"]

    def env(self) -> Any:
        """The :class:`agentr1.env.ToolEnv` of ``env.*`` over the built index (made once)."""
        if "env" not in self._cache:
            self._cache["env"] = load_env(self.cfg)
        return self._cache["env"]

    @staticmethod
    def checkpoint(path: str | Path, made_by: str) -> Path:
        """``path`` when it holds a saved policy, else a :class:`StageError` saying to run
        ``made_by`` first."""
        from agentr1.models import is_checkpoint

        path = Path(path)
        if not is_checkpoint(path):
            raise StageError(f"no checkpoint in {path}: run {made_by} first")
        return path


@contextlib.contextmanager
def open_stage(
    cfg: Config,
    stage: str,
    run_name: str | None = None,
    variant: str | None = None,
    tracked: bool = True,
    extra_tags: dict[str, str] | None = None,
    continue_run: str | None = None,
) -> Iterator[StageContext]:
    """The :class:`StageContext` of one execution of ``stage``: inside the stage's MLflow run
    (:func:`agentr1.tracking.mlflow_adapter.stage_run`, named ``run_name``, with the effective
    config of the named run ``variant`` and ``extra_tags``; continuing the MLflow run
    ``continue_run`` of an interrupted execution when it can) when ``tracked`` and
    ``tracking.enabled``, else with a disabled run and without importing MLflow."""
    if not (tracked and cfg.tracking.enabled):
        if tracked:
            log.info("tracking disabled (tracking.enabled: false): stage %s runs without MLflow", stage)
        yield StageContext(cfg, stage, StageRun(cfg, stage))
        return
    from agentr1.tracking.mlflow_adapter import stage_run

    with stage_run(
        cfg, stage, run_name=run_name, variant=variant, extra_tags=extra_tags, continue_run=continue_run
    ) as run:
        yield StageContext(cfg, stage, run)
