"""agentr1.stages: the DVC stages, one module each, over one :class:`StageContext`.

``agentr1 <stage>`` (and ``dvc repro``, whose ``dvc.yaml`` calls it) runs :func:`run`, which opens
the stage's context (:func:`agentr1.stages.context.open_stage`: its MLflow run when tracking is on)
and calls the stage module's ``run(ctx, args)``. Before the run opens, a stage module may

* ``before(cfg, args)``: check preconditions and clean up what must go even if tracking fails
  (``validate`` deletes its old success marker);
* ``names(cfg, args) -> (run name, variant)``: the MLflow run name (the stage's ``dvc.lock`` key,
  e.g. ``train@ppo``) and the named run of params ``runs`` whose effective config the run logs.

Either may raise :class:`agentr1.errors.StageError`; no run is opened then.

This package and :mod:`agentr1.tracking` are the only code that talks to MLflow; the domain
packages below them (data, retrieval, models, env, rollout, eval, rl, report) never import it nor
anything above them (``tests/test_import_rules.py``).

Under ``torchrun`` only rank 0 (env ``RANK``) tracks.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from agentr1.config import Config
from agentr1.stages.context import StageContext, open_stage

# DVC stage -> (its module, the help line of `agentr1 <stage>`)
STAGES: dict[str, tuple[str, str]] = {
    "prepare": ("agentr1.stages.prepare", "build the unified dataset (data/processed)"),
    "validate": ("agentr1.stages.validate", "validate the dataset with Great Expectations"),
    "index": ("agentr1.stages.index", "build the retrieval index and its recall report"),
    "pretrain": ("agentr1.stages.pretrain", "the base policy: a reader pretrained on drills over fresh worlds, and its reading gate"),
    "sft": ("agentr1.stages.sft", "the SFT cold start from the base policy on oracle demonstrations"),
    "train": ("agentr1.stages.train", "RL from the cold start with a named run (--run NAME; torchrun for data parallel)"),
    "evaluate": ("agentr1.stages.evaluate", "greedy EM/F1 with bootstrap CIs of one policy on evaluate.splits (--policy NAME)"),
    "report": ("agentr1.stages.report", "Table 3/4 analogues, breakdowns, plots and summary.md from the evaluations"),
}

__all__ = ["STAGES", "StageContext", "open_stage", "run"]


def run(stage: str, cfg: Config, args: Any = None) -> Any:
    """Run DVC stage ``stage`` (a key of :data:`STAGES`) with params ``cfg`` and the CLI
    arguments ``args`` (an ``argparse.Namespace`` or ``None``); returns what the stage returns."""
    if stage not in STAGES:
        raise KeyError(f"unknown stage {stage!r}: one of {', '.join(STAGES)}")
    module = importlib.import_module(STAGES[stage][0])
    if hasattr(module, "before"):
        module.before(cfg, args)
    run_name, variant = module.names(cfg, args) if hasattr(module, "names") else (stage, None)
    tracked = int(os.environ.get("RANK", "0")) == 0
    with open_stage(cfg, stage, run_name=run_name, variant=variant, tracked=tracked) as ctx:
        return module.run(ctx, args)
