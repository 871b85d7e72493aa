"""Data parallelism for the trainer on ``torch.distributed`` (no home-made engine).

Under ``torchrun --nproc_per_node N`` (``WORLD_SIZE`` > 1 in the environment) every rank runs the
same trainer. :func:`init_distributed` starts the process group (``gloo`` on CPU, ``nccl`` on
GPU, or what ``train.distributed.backend`` says); :func:`wrap` puts a module under
``DistributedDataParallel`` (``ddp``) or ``FullyShardedDataParallel`` (``fsdp``, parameters
sharded for models that do not fit one device). Outside torchrun :class:`Dist` is the trivial
single-process context and every collective below is the identity.

How the trainer splits the work (``agentr1.rl.trainer``):

* rollouts: each rank rolls out its contiguous share of the step's questions (groups stay on
  one rank), then :meth:`Dist.all_gather_objects` gives every rank the global list of
  trajectories in rank order;
* no-grad forward passes (old / reference log-probs, values): each rank computes its share of
  the rows and :meth:`Dist.gather_rows` concatenates them, so every rank holds the full
  ``[B, L]`` tensors and computes the (global) advantages identically;
* updates: each rank back-propagates its share of every mini-batch; losses use the *global*
  mini-batch denominator (``agg_loss(..., denom=...)``) and are multiplied by the world size, so
  DDP's gradient average equals the gradient of the global mini-batch loss.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class Dist:
    """Rank, world size and device of this process; ``active`` when a process group is up."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    active: bool = False
    strategy: str = "ddp"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ work splitting
    def shard_range(self, n: int) -> tuple[int, int]:
        """``[start, end)`` of this rank's contiguous share of ``n`` items (``n`` must divide)."""
        if n % self.world_size:
            raise ValueError(f"{n} items cannot be split evenly over {self.world_size} ranks")
        k = n // self.world_size
        return self.rank * k, (self.rank + 1) * k

    def shard(self, items: Sequence[Any]) -> list[Any]:
        s, e = self.shard_range(len(items))
        return list(items[s:e])

    # ------------------------------------------------------------------ collectives
    def all_gather_objects(self, local: list[Any]) -> list[Any]:
        """Concatenation of every rank's ``local`` list, in rank order."""
        if not self.active:
            return list(local)
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, local)
        return [x for part in out for x in part]

    def gather_rows(self, local: torch.Tensor) -> torch.Tensor:
        """Concatenate equal-shaped ``[b, ...]`` tensors of all ranks along dim 0 (rank order)."""
        if not self.active:
            return local
        x = local.to(self.device).contiguous()
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x)
        return torch.cat(parts, dim=0).to(local.device)

    def all_reduce_sum(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks (a copy; on ``x``'s device)."""
        if not self.active:
            return x
        y = x.to(self.device, copy=True)
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        return y.to(x.device)

    def broadcast_object(self, obj: Any) -> Any:
        """``obj`` of rank 0 on every rank."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


def init_distributed(dist_cfg=None, timeout_s: float = 1800.0) -> Dist:
    """Start the process group when launched by torchrun (``WORLD_SIZE`` > 1); otherwise return
    the single-process context. ``dist_cfg`` is ``train.distributed``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    strategy = getattr(dist_cfg, "strategy", "ddp")
    cuda = torch.cuda.is_available()
    if world <= 1:
        return Dist(device=torch.device("cuda" if cuda else "cpu"), strategy=strategy)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = getattr(dist_cfg, "backend", "auto")
    if backend == "auto":
        backend = "nccl" if cuda else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return Dist(rank, world, local_rank, device, True, strategy)


def shutdown(ctx: Dist) -> None:
    """Leave the process group. Every rank first meets at a barrier: a rank that destroys the
    group while another still has gloo traffic in flight can leave that one blocked for ever in
    ``destroy_process_group`` (seen in CI with two ranks)."""
    if ctx.active and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def wrap(module: torch.nn.Module, ctx: Dist) -> torch.nn.Module:
    """``module`` under DDP or FSDP (``ctx.strategy``) when distributed, else as is."""
    if not ctx.active:
        return module
    if ctx.strategy == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        kwargs = {"device_id": ctx.device} if ctx.device.type == "cuda" else {}
        return FSDP(module, use_orig_params=True, **kwargs)
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DDP(module, device_ids=ids)


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DDP/FSDP wrapper (or ``module`` itself)."""
    return getattr(module, "module", module)


def clip_grad_norm(module: torch.nn.Module, grad_clip: float) -> float:
    """Clip the gradients of ``module`` to total norm ``grad_clip`` (0 = no clipping) and return
    the norm before clipping; under FSDP the norm over all shards."""
    max_norm = grad_clip if grad_clip > 0 else float("inf")
    if hasattr(module, "clip_grad_norm_"):  # FSDP: norm over the shards
        return float(module.clip_grad_norm_(max_norm))
    return float(torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm))


@contextlib.contextmanager
def no_sync(module: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce of this backward (gradient accumulation) when ``enabled``."""
    if enabled and hasattr(module, "no_sync"):
        with module.no_sync():
            yield
    else:
        yield


@contextlib.contextmanager
def full_params(module: torch.nn.Module) -> Iterator[None]:
    """Unshard FSDP parameters for generation / saving (no-op for DDP and plain modules)."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # pragma: no cover
        FSDP = None
    if FSDP is not None and isinstance(module, FSDP):
        with FSDP.summon_full_params(module, writeback=False):
            yield
    else:
        yield
