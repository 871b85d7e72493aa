"""The training statistics of one RL step, accumulated over micro-batches and optimizer steps,
and what the histories of two identical runs share."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentr1.rl.distributed import Dist

TIME_PREFIX = "time/"
ADDITIVE_STATS = frozenset({"pg_loss", "kl_loss", "entropy", "loss"})
CRITIC_MEANS = ("vf_clipfrac", "vpred_mean", "vf_explained_var")


class StepStats:
    """Accumulates per-micro-batch stats: ``add`` (a sum, e.g. a loss piece with the global
    denominator) and ``mean`` (a weighted mean, e.g. clipfrac weighted by tokens); reduced over
    ranks and averaged over optimizer steps by :meth:`result`."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.wsum: dict[str, float] = {}
        self.wts: dict[str, float] = {}

    def add(self, name: str, value: float) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(value)

    def mean(self, name: str, value: float, weight: float) -> None:
        self.wsum[name] = self.wsum.get(name, 0.0) + float(value) * weight
        self.wts[name] = self.wts.get(name, 0.0) + weight

    def policy(self, stats: dict[str, float], n_tok: float) -> None:
        """A micro-batch's policy-loss stats: the pieces of the global mini-batch loss
        (:data:`ADDITIVE_STATS`) add up; the rest are per-micro-batch means, weighted by its
        ``n_tok`` loss-mask tokens."""
        for name, v in stats.items():
            if name in ADDITIVE_STATS:
                self.add(name, v)
            else:
                self.mean(name, v, n_tok)

    def critic(self, vloss: float, stats, n_adv: float) -> None:
        """A micro-batch's value loss (a piece of the global one) and its means, weighted by its
        ``n_adv`` advantage-mask tokens."""
        self.add("vf_loss", vloss)
        for name in CRITIC_MEANS:
            self.mean(name, float(stats[name]), n_adv)

    def result(self, dist: Dist, n_opt_steps: int) -> dict[str, float]:
        keys_s, keys_w = sorted(self.sums), sorted(self.wsum)
        vec = torch.tensor(
            [self.sums[k] for k in keys_s] + [self.wsum[k] for k in keys_w] + [self.wts[k] for k in keys_w],
            dtype=torch.float64,
        )
        vec = dist.all_reduce_sum(vec) if len(vec) else vec
        out = {k: float(vec[i]) / max(n_opt_steps, 1) for i, k in enumerate(keys_s)}
        n = len(keys_s)
        for i, k in enumerate(keys_w):
            out[k] = float(vec[n + i]) / max(float(vec[n + len(keys_w) + i]), 1e-12)
        return out


def deterministic_metrics(history: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """The history without wall-clock entries (``time/*``): what two identical runs must share."""
    return [{k: v for k, v in h.items() if not k.startswith(TIME_PREFIX)} for h in history]


def step_stats(steps, a_ep: torch.Tensor, a_step: torch.Tensor) -> dict[str, float]:
    """GiGPO's diagnostics of a batch (:mod:`agentr1.rl.steps`), from the two advantages the
    estimator computed for the update (``a_ep`` ``[B]``, ``a_step`` ``[B, J]``:
    :func:`agentr1.rl.advantages.gigpo_parts`, handed over by :func:`agentr1.rl.advantages.gigpo`):
    the share of turns whose step group holds more than one turn (``train/step_group_shared``; every
    first turn shares the prompt when ``group_size > 1``), the same share over the later turns
    (``train/step_group_shared_later``: where step credit can differ from the episode's), and the
    mean ``|a_bj|`` of the turns against the mean ``|a_b|`` of the episodes
    (``train/step_adv_abs``, ``train/episode_adv_abs``)."""
    sizes = steps.sizes()
    valid = steps.group >= 0
    later = valid.clone()
    later[:, 0] = False

    def share(sel: torch.Tensor) -> float:
        return float((sizes[sel] > 1).float().mean()) if bool(sel.any()) else 0.0

    return {
        "train/step_group_shared": share(valid),
        "train/step_group_shared_later": share(later),
        "train/step_adv_abs": float(a_step[valid].abs().mean()),
        "train/episode_adv_abs": float(a_ep.abs().mean()),
    }
