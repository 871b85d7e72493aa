"""The optimizer and learning-rate schedule of pretraining, SFT and RL.

:func:`make_optimizer`: AdamW with betas :data:`BETAS`, weight decay on matrices only (not on
norms and biases). The schedule: linear warmup, then constant or cosine.

For optimizer step ``s`` (0-based), base lr ``b``, ``W`` warmup steps and ``T`` total steps::

    lr(s) = b * (s + 1) / W                                   s < W   (warmup)
    lr(s) = b                                                 constant
    lr(s) = b * (r + (1 - r) * 0.5 * (1 + cos(pi * p)))       cosine, p = min(max(s - W, 0) / max(T - W, 1), 1)

with ``r`` = ``min_ratio`` (the cosine ends at ``r * b`` at step ``T`` and stays there).

Torch applies it: :func:`scheduler` is a ``LambdaLR`` whose lambda is :func:`lr_lambda`.
``LambdaLR`` sets ``lr = initial_lr * lambda(s)``; the lambda here returns the learning rate
itself and every group's ``initial_lr`` is 1, so the lr is exactly the float above (a multiplier
``f`` with ``b * f == b * (s + 1) / W`` does not exist for every ``b``, so the warmup could not be
written as a factor of ``b`` without changing some lr values in their last bit). The scheduler's
counter (``last_epoch``) is the optimizer-step count: a run that saves that count resumes the
schedule exactly by building the scheduler again with ``start`` = the count.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

SCHEDULES = ("constant", "cosine")
MIN_LR_RATIO = 0.1  # where the cosine of pretraining and SFT ends, as a share of the base lr
BETAS = (0.9, 0.95)


def make_optimizer(model, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on parameters of 2+ dimensions only."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS)


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, schedule: str = "cosine",
          min_ratio: float = 0.1) -> float:
    """The learning rate at optimizer step ``step`` (module docstring)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return base_lr
    span = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def lr_lambda(base_lr: Callable[[], float] | float, warmup_steps: int, total_steps: int, schedule: str = "cosine",
              min_ratio: float = 0.1) -> Callable[[int], float]:
    """``step -> lr_at(step, ...)`` for :func:`scheduler`; ``base_lr`` may be a function, read at
    every step (the trainer's base lr changes when the collapse guard scales it)."""
    base = base_lr if callable(base_lr) else (lambda: base_lr)
    return lambda step: lr_at(step, base(), warmup_steps, total_steps, schedule, min_ratio)


def scheduler(opt: torch.optim.Optimizer, fn: Callable[[int], float], start: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` setting every group of ``opt`` to ``fn(step)`` (``initial_lr`` 1, module
    docstring), positioned at optimizer step ``start``: the groups hold ``fn(start)`` now, and
    ``fn(start + k)`` after ``k`` calls of its ``step()`` (one after each ``opt.step()``)."""
    for group in opt.param_groups:
        group["initial_lr"] = 1.0
    return torch.optim.lr_scheduler.LambdaLR(opt, fn, last_epoch=start - 1)
