"""The collapse guard of the RL trainer (``train.collapse``): what counts as a collapse, and
what the trainer does about it.

A step *collapses* when its loss or a gradient norm is not finite (any rank; no optimizer step
is taken then), or when its mean rollout reward ``r`` falls more than ``reward_drop`` below the
mean of the last ``window`` guarded steps' rewards (only once ``window`` steps are recorded).
The response (``action``): ``stop`` raises :class:`StageError`; ``skip`` drops the step's update
and goes on; ``rollback`` restores the last checkpoint and multiplies the lr by ``lr_factor``,
at most ``max_rollbacks`` times (then it stops as ``stop`` does).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

from agentr1.errors import StageError

log = logging.getLogger(__name__)


class Collapse(Exception):
    """The guard fired during a step (the reason in ``args[0]``)."""


def reward_drop(reward: float, history: Sequence[float], cfg) -> str | None:
    """The reason when ``reward`` fell more than ``cfg.reward_drop`` below the mean of the last
    ``cfg.window`` entries of ``history``; ``None`` when it did not, when ``reward_drop`` is off
    (null) or when there are fewer than ``window`` entries."""
    hist = history[-cfg.window :]
    if cfg.reward_drop is None or len(hist) < cfg.window:
        return None
    ref = sum(hist) / len(hist)
    if reward < ref - cfg.reward_drop:
        return f"mean reward {reward:.3f} fell more than {cfg.reward_drop} below the running mean {ref:.3f}"
    return None


def nonfinite(
    finite_ranks: float, world_size: int, norms: Mapping[str, float], step: int, epoch: int, mini_batch: int
) -> str | None:
    """The reason when a rank's loss was not finite (``finite_ranks``, the sum over ranks of a 0/1
    flag, is below ``world_size``) or a gradient norm is not; ``None`` when all are finite."""
    if finite_ranks < world_size or not all(math.isfinite(v) for v in norms.values()):
        return (
            f"non-finite loss or gradient at step {step} (epoch {epoch}, mini-batch {mini_batch}; grad norms {norms})"
        )
    return None


def respond(cfg, step: int, reason: str, rollbacks: int) -> str:
    """The action to take for a collapse at ``step`` after ``rollbacks`` earlier roll-backs:
    ``"skip"`` or ``"rollback"``; :class:`StageError` for ``stop`` or when ``max_rollbacks``
    roll-backs were already made."""
    if cfg.action == "stop":
        raise StageError(f"training collapsed at step {step}: {reason} (train.collapse.action: stop)")
    if cfg.action == "skip":
        log.warning("collapse guard: step %d skipped: %s", step, reason)
        return "skip"
    if rollbacks >= cfg.max_rollbacks:
        raise StageError(
            f"training collapsed at step {step}: {reason}; already rolled back {rollbacks} "
            f"time(s) (train.collapse.max_rollbacks); lower train.lr or check the data"
        )
    return "rollback"
