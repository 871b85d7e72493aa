"""What ``agentr1 evaluate --policy NAME`` evaluates: :func:`resolve_policy`.

NAME is a named run of params ``runs`` or its replica ``<run>-<seed>`` (kind ``rl``: the checkpoint
``<train.out_dir>/<NAME>/checkpoint`` of ``agentr1 train --run NAME``) or one of the
:data:`BASELINES`: ``cold_start`` (the SFT checkpoint ``sft.out_dir`` as an agent),
``base_tool_call`` (the base policy ``pretrain.out_dir`` as an agent: the paper's
prompted-base-model baseline) and ``naive_rag`` (the cold-start weights, one retrieval, one
answer turn: :func:`agentr1.eval.baselines.naive_rag`) and ``cold_start_reference`` (the reference
demonstrator's cold start, stage ``sft_reference``, as an agent; never registered).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentr1.errors import StageError
from agentr1.models import is_checkpoint

BASELINES = ("cold_start", "base_tool_call", "naive_rag", "cold_start_reference")


@dataclass(frozen=True)
class Policy:
    """What ``--policy NAME`` resolves to: the kind, its checkpoint, the DVC stage key (used as
    the MLflow run name), whether it goes to the model registry and the stage that writes its
    checkpoint."""

    name: str
    kind: str  # rl | cold_start | base_tool_call | naive_rag
    checkpoint: Path
    registrable: bool
    run_name: str
    produced_by: str


def resolve_policy(cfg, name: str | None) -> Policy:
    """The :class:`Policy` of ``name``; :class:`StageError` naming the allowed names for an unknown
    one and the stage to run first when its checkpoint is missing."""
    allowed = (
        f"the runs in params `runs` ({', '.join(sorted(cfg.runs))}), their replicas <run>-<seed> "
        f"(seeds {cfg.seeds}), or the baselines {', '.join(BASELINES)}"
    )
    if not name:
        raise StageError(f"--policy NAME is required: NAME is one of {allowed}")
    if name in cfg.runs and name in BASELINES:
        raise StageError(f"run {name!r} in params `runs` shadows the baseline of the same name: rename the run")
    if cfg.is_run(name):
        ckpt = Path(cfg.train_for(name).out_dir) / name / "checkpoint"
        policy = Policy(
            name, "rl", ckpt, True, f"evaluate@{name}", f"`agentr1 train --run {name}` (or `dvc repro train@{name}`)"
        )
    elif name == "cold_start_reference":
        if cfg.sft_reference is None:
            raise StageError("--policy cold_start_reference: params define no sft_reference (the reference cold start)")
        policy = Policy(
            name,
            name,
            Path(cfg.sft_for("reference").out_dir),
            False,
            f"evaluate_baseline@{name}",
            "`agentr1 sft_reference` (or `dvc repro sft_reference`)",
        )
    elif name in BASELINES:
        base = name == "base_tool_call"
        ckpt = Path(cfg.pretrain.out_dir if base else cfg.sft.out_dir)
        policy = Policy(
            name,
            name,
            ckpt,
            name == "cold_start",
            f"evaluate_baseline@{name}",
            "`agentr1 pretrain` (or `dvc repro pretrain`)" if base else "`agentr1 sft` (or `dvc repro sft`)",
        )
    else:
        raise StageError(f"unknown policy {name!r}: --policy takes {allowed}")
    if not is_checkpoint(policy.checkpoint):
        raise StageError(f"no checkpoint for policy {name!r} in {policy.checkpoint}: run {policy.produced_by} first")
    return policy
