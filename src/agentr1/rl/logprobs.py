"""No-grad forward passes of the RL trainer over a whole batch (old / reference log-probs, values).

Each rank computes its share of the rows (:meth:`Dist.shard_range`) in micro-batches, each cut
to the columns its longest row needs, and the shares are all-gathered, so every rank ends with
the whole ``[B, L]`` tensor (float32, on the CPU; zero beyond each row's trimmed width).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from agentr1.rl.distributed import Dist, unwrap


def forward_module(module, dist: Dist):
    """The module for no-grad passes: unwrapped under DDP (no collectives), wrapped under FSDP."""
    return module if dist.strategy == "fsdp" and dist.active else unwrap(module)


def row_forward(
    fn: Callable[..., torch.Tensor], batch: dict, key_mask: str, dist: Dist, micro_batch_size: int
) -> torch.Tensor:
    """``fn(input_ids, attention_mask, batch[key_mask])`` over every row of ``batch`` (module
    docstring) as one no-grad ``[B, L]`` tensor."""
    B, L = batch["input_ids"].shape
    s, e = dist.shard_range(B)
    out = torch.zeros((e - s, L), dtype=torch.float32)
    for i in range(s, e, micro_batch_size):
        j = min(i + micro_batch_size, e)
        width = int(batch["attention_mask"][i:j].sum(-1).max())
        args = [batch[k][i:j, :width].to(dist.device) for k in ("input_ids", "attention_mask", key_mask)]
        with torch.no_grad():
            out[i - s : j - s, :width] = fn(*args).float().cpu()
    return dist.gather_rows(out)
