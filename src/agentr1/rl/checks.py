"""What the RL trainer refuses to run: settings that contradict each other or the world size.

Checked when a :class:`agentr1.rl.trainer.Trainer` is built, and by ``agentr1 profile --dry-run``
(without torch) before anything starts.
"""

from __future__ import annotations

from agentr1.errors import StageError


def check_train_config(
    tcfg, rollout_cfg, world: int = 1, strategy: str = "ddp", has_start_checkpoint: bool = True
) -> None:
    """:class:`StageError` naming the setting when the trainer cannot run ``tcfg`` with
    ``rollout_cfg`` on ``world`` ranks under ``strategy`` (``agentr1 profile --dry-run`` uses it too)."""
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
    if t.old_logprobs == "rollout" and not t.loss_mask:
        raise StageError(
            "train.old_logprobs: rollout needs loss_mask: true (observation tokens have no "
            "sampling-time log-probs); use old_logprobs: recompute"
        )
    if t.off_policy.correction == "decoupled" and (t.old_logprobs != "recompute" or not t.loss_mask):
        raise StageError(
            "train.off_policy.correction: decoupled weighs pi_prox / pi_behav with the recomputed old "
            "log-probs as pi_prox and the sampling-time ones as pi_behav, which exist only for action "
            "tokens: set train.old_logprobs: recompute and train.loss_mask: true (or correction: none)"
        )
    batch = t.batch_questions * t.group_size
    if t.batch_questions % world:
        raise StageError(f"train.batch_questions ({t.batch_questions}) must divide by the world size ({world})")
    if batch % t.mini_batches or (batch // t.mini_batches) % world:
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
