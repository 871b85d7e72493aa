"""Cross-section checks: what a run refuses that no single params section can see by itself.

Where a check goes (docs/DEVELOPMENT.md): a check of one section's values is a validator of that
section's model (``config/<section>.py``; e.g. :class:`agentr1.config.TrainConfig` refuses
``old_logprobs: rollout`` without the loss mask), run when ``params.yaml`` is read. A check that
needs two sections or the launch (world size, FSDP/DDP, whether a start checkpoint exists) is a
clause of :func:`check_run`, the one function the trainer and ``agentr1 profile --dry-run``
(without torch) ask before anything starts; neither re-checks.
"""

from __future__ import annotations

import inspect

from agentr1.errors import StageError
from agentr1.registry import POLICY_LOSSES


def check_run(tcfg, rollout_cfg, world: int = 1, strategy: str = "ddp", has_start_checkpoint: bool = True) -> None:
    """:class:`StageError` naming the setting when the trainer cannot run ``tcfg`` (a validated
    ``train`` section) with ``rollout_cfg`` on ``world`` ranks under ``strategy``."""
    t = tcfg
    if rollout_cfg.backend == "vllm" and not has_start_checkpoint:
        raise StageError(
            "rollout.backend: vllm needs the start checkpoint (Trainer(model_path=...)) to build "
            "the engine; or set rollout.backend: hf"
        )
    if rollout_cfg.backend == "vllm" and strategy == "fsdp" and world > 1 and t.dev.every:
        raise StageError(
            "train.dev.every > 0 with rollout.backend: vllm under FSDP: the rank-0 dev rollout "
            "cannot gather the sharded weights; set train.dev.every: 0 (evaluate after training)"
        )
    if t.off_policy.correction != "none" and "weights" not in _loss_parameters(t.policy_loss):
        raise StageError(
            f"train.off_policy.correction: {t.off_policy.correction} weighs the policy loss per "
            f"token, but policy loss {t.policy_loss!r} takes no `weights`: add it, or set correction: none"
        )
    batch = t.batch_questions * t.group_size
    if t.batch_questions % world:
        raise StageError(f"train.batch_questions ({t.batch_questions}) must divide by the world size ({world})")
    if (batch // t.mini_batches) % world:  # batch % mini_batches: TrainConfig
        raise StageError(
            f"the batch of {batch} episodes (batch_questions x group_size) must split into "
            f"{t.mini_batches} mini-batches whose size divides by the world size ({world})"
        )
    if t.sample_unit == "step" and world > 1:
        raise StageError(
            f"train.sample_unit: step gives each step a number of rows that need not split evenly over "
            f"{world} ranks (every rank must take part in each gradient sync): run it in one process, "
            "or set train.sample_unit: trajectory"
        )


def _loss_parameters(name: str) -> frozenset[str]:
    """The parameter names of policy loss ``name`` (imports its module, and so torch: asked only
    when an off-policy correction is set)."""
    return frozenset(inspect.signature(POLICY_LOSSES.get(name)).parameters)
