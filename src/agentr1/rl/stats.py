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
        vec = torch.tensor([self.sums[k] for k in keys_s] + [self.wsum[k] for k in keys_w] + [self.wts[k] for k in keys_w],
                           dtype=torch.float64)
        vec = dist.all_reduce_sum(vec) if len(vec) else vec
        out = {k: float(vec[i]) / max(n_opt_steps, 1) for i, k in enumerate(keys_s)}
        n = len(keys_s)
        for i, k in enumerate(keys_w):
            out[k] = float(vec[n + i]) / max(float(vec[n + len(keys_w) + i]), 1e-12)
        return out


def deterministic_metrics(history: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """The history without wall-clock entries (``time/*``): what two identical runs must share."""
    return [{k: v for k, v in h.items() if not k.startswith(TIME_PREFIX)} for h in history]
