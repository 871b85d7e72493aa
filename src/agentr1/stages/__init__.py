"""agentr1.stages: the DVC stages, one module each, over one :class:`StageContext`.

Each stage module declares itself with ``SPEC`` (:class:`agentr1.stages.spec.StageSpec`: its
name, help line, arguments and ``dvc.lock`` keys); :data:`STAGES` is what the modules of this
package declare, found without importing them (:func:`agentr1.stages.spec.discover`).

``agentr1 <stage>`` (and ``dvc repro``, whose ``dvc.yaml`` calls it) runs :func:`run`, which opens
the stage's context (:func:`agentr1.stages.context.open_stage`: its MLflow run when tracking is on)
and calls the stage module's ``run(ctx, args)``. Before the run opens, a stage module may

* ``before(cfg, args)``: check preconditions and clean up what must go even if tracking fails
  (``validate`` deletes its old success marker);
* ``names(cfg, args) -> (run name, variant)``: the MLflow run name (the stage's ``dvc.lock`` key,
  e.g. ``train@ppo``) and the named run of params ``runs`` whose effective config the run logs;
* ``continues(cfg, args) -> run id or None``: the MLflow run of an interrupted execution that
  this one continues (``train --resume``), when the store still has it (not owned by a live process).

Any of them may raise :class:`agentr1.errors.StageError`; no run is opened then.

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
from agentr1.stages.spec import StageSpec, discover

# DVC stage -> (its module, its spec), in the order of `agentr1 --help`
STAGES: dict[str, tuple[str, StageSpec]] = discover(__name__)

__all__ = ["STAGES", "StageContext", "StageSpec", "open_stage", "run"]


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
    resumes = module.continues(cfg, args) if tracked and hasattr(module, "continues") else None
    with open_stage(cfg, stage, run_name=run_name, variant=variant, tracked=tracked, continue_run=resumes) as ctx:
        return module.run(ctx, args)
