"""How one RL update cuts the prepared batch: mini-batches (optimizer steps) and micro-batches
(gradient accumulation), and the global denominator of the token-level aggregation.

* mini-batches: each of ``ppo_epochs`` epochs draws a permutation of the ``B`` rows keyed by
  ``(seed, step, 3, epoch)`` (:func:`agentr1.rl.sampling.seed_key`) and cuts it into
  ``mini_batches`` consecutive slices of ``B / mini_batches`` rows (slice ``k`` ends at
  ``floor((k + 1) B / mini_batches)``, for step rows whose count varies): one optimizer step each;
* micro-batches: this rank's contiguous share of a mini-batch's rows
  (:meth:`agentr1.rl.distributed.Dist.shard`) in chunks of ``micro_batch_size``, each cut to the
  columns its longest row needs and moved to the device;
* denominator: every micro-batch's loss is divided by the count over the whole (global)
  mini-batch - mask tokens for ``token-mean``, sequences with a mask token otherwise - so the
  micro-batch losses of all ranks add up to the mini-batch loss (:func:`agentr1.rl.losses.agg_loss`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from agentr1.rl.distributed import Dist
from agentr1.rl.masks import as_bool
from agentr1.rl.sampling import seed_key

# The per-token (B, T) tensors of a prepared batch, each with its use in an update: "loss" = every
# loss needs it; "optional" = a loss needs it when the run has it (KL, a critic, off_policy); None =
# kept for diagnostics. Step rows (agentr1.rl.steps) carry them all; micro-batches the first two kinds.
TOKEN_KEYS: dict[str, str | None] = {
    "input_ids": "loss",
    "attention_mask": "loss",
    "action_mask": None,
    "response_mask": None,
    "loss_mask": "loss",
    "adv_mask": "loss",
    "old_logp": "loss",
    "ref_logp": "optional",
    "values": "optional",
    "advantages": "loss",
    "returns": "loss",
    "token_rewards": None,
    "logprobs": None,
    "behaviour_weight": "optional",
}
LOSS_KEYS = tuple(k for k, use in TOKEN_KEYS.items() if use == "loss")
OPTIONAL_KEYS = tuple(k for k, use in TOKEN_KEYS.items() if use == "optional")


def mini_batches(batch_size: int, tcfg, seed: int, step: int) -> Iterator[tuple[int, int, list[int]]]:
    """``(epoch, k, rows)`` of every optimizer step of ``step`` (module docstring)."""
    t = tcfg
    cut = [k * batch_size // t.mini_batches for k in range(t.mini_batches + 1)]
    for epoch in range(t.ppo_epochs):
        gen = torch.Generator().manual_seed(seed_key(seed, step, 3, epoch))
        perm = torch.randperm(batch_size, generator=gen).tolist()
        for k in range(t.mini_batches):
            yield epoch, k, perm[cut[k] : cut[k + 1]]


def micro_batches(
    batch: dict[str, Any], rows: list[int], dist: Dist, micro_batch_size: int
) -> Iterator[tuple[bool, dict[str, torch.Tensor]]]:
    """``(last, mb)`` for this rank's share of ``rows`` in micro-batches of
    ``micro_batch_size``: the tensors a loss needs, cut to the longest row, on the device."""
    mbs = micro_batch_size
    local = dist.shard(rows)
    micro = [local[i : i + mbs] for i in range(0, len(local), mbs)]
    keys = LOSS_KEYS + tuple(k for k in OPTIONAL_KEYS if k in batch)
    for mi, idx in enumerate(micro):
        width = int(batch["attention_mask"][idx].sum(-1).max())
        yield mi == len(micro) - 1, {key: batch[key][idx, :width].to(dist.device) for key in keys}


def denominator(mask: torch.Tensor, agg_mode: str) -> float:
    """The global count a loss over ``mask`` is divided by (module docstring)."""
    m = as_bool(mask)
    return float(m.sum()) if agg_mode == "token-mean" else float(m.any(-1).sum())
