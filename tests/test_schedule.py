"""The one lr schedule (agentr1.lm.schedule): the same floats as the two hand-written schedules it
replaced, applied by torch's LambdaLR at every optimizer step, and resumable from a step count."""

from __future__ import annotations

import math

import pytest
import torch

from agentr1.lm.schedule import lr_at, lr_lambda, scheduler

# (base lr, warmup steps, total steps): the committed configs (sft 3e-3/30/300, pretrain 3e-3/20/600,
# smol sft 5e-5/3/30) and the tests' ones
CONFIGS = [
    (0.003, 30, 300),
    (0.003, 20, 600),
    (5e-5, 3, 30),
    (1e-2, 3, 30),
    (1e-2, 10, 120),
    (1e-4, 0, 40),
    (1e-6, 7, 13),
    (0.0123, 1, 1),
]


def sft_lr_at_before(step, lr, warmup_steps, total_steps):
    """agentr1.lm.sft.lr_at as it was (commit 071983a)."""
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    return lr * (0.1 + (1 - 0.1) * 0.5 * (1 + math.cos(math.pi * progress)))


def trainer_lr_before(opt_step, lr, scale, warmup_steps, total_steps, schedule, min_ratio):
    """The trainer's ``t.lr * lr_scale * lr_factor(...)`` as it was (commit 071983a)."""
    if warmup_steps > 0 and opt_step < warmup_steps:
        factor = (opt_step + 1) / warmup_steps
    elif schedule == "constant":
        factor = 1.0
    else:
        span = max(total_steps - warmup_steps, 1)
        progress = min(max(opt_step - warmup_steps, 0) / span, 1.0)
        factor = min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return lr * scale * factor


@pytest.mark.parametrize("lr,warmup,total", CONFIGS)
def test_sft_schedule_is_bit_identical(lr, warmup, total):
    for step in range(total + 5):
        assert lr_at(step, lr, warmup, total) == sft_lr_at_before(step, lr, warmup, total), step


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
@pytest.mark.parametrize("lr,warmup,total", CONFIGS)
@pytest.mark.parametrize("scale", [1.0, 0.5, 0.3])
def test_trainer_schedule_is_bit_identical_after_warmup(schedule, lr, warmup, total, scale):
    """Bit-identical at every step after the warmup (every committed run has train.warmup_steps 0);
    during the warmup ``b * (s + 1) / W`` (the SFT's arithmetic) and the old ``b * ((s + 1) / W)``
    can differ by rounding only: each rounds twice, so they are at most 2 ulps apart."""
    for step in range(total + 5):
        new, old = (
            lr_at(step, lr * scale, warmup, total, schedule, 0.1),
            trainer_lr_before(step, lr, scale, warmup, total, schedule, 0.1),
        )
        if step >= warmup:
            assert new == old, step
        else:
            assert abs(new - old) <= 2 * math.ulp(max(new, old)), step


def test_schedule_shape_and_bad_name():
    assert lr_at(0, 1.0, 4, 20) == 0.25 and lr_at(3, 1.0, 4, 20) == 1.0 == lr_at(4, 1.0, 4, 20)
    assert lr_at(12, 1.0, 4, 20) == pytest.approx(0.55) and lr_at(20, 1.0, 4, 20) == pytest.approx(0.1)
    assert lr_at(50, 1.0, 4, 20) == lr_at(20, 1.0, 4, 20)  # stays at min_ratio * lr after total_steps
    assert [lr_at(s, 2.0, 2, 10, "constant") for s in (0, 1, 2, 9, 30)] == [1.0, 2.0, 2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="unknown lr schedule 'linear'"):
        lr_at(0, 1.0, 0, 10, "linear")


def _opt(lr):
    w, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(1))
    return torch.optim.AdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}], lr=lr)


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_lambda_lr_applies_exactly_the_schedule_and_resumes(schedule):
    lr, warmup, total = 0.003, 30, 120
    fn = lr_lambda(lr, warmup, total, schedule, 0.1)
    opt = _opt(123.0)  # the optimizer's own lr is replaced by the schedule's
    sched = scheduler(opt, fn)
    seen = []
    for _ in range(total + 2):
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    assert seen == [[lr_at(s, lr, warmup, total, schedule)] * 2 for s in range(total + 2)]
    resumed = _opt(lr)  # a resumed run: a fresh optimizer, the scheduler built at the saved count
    scheduler(resumed, fn, start=47)
    assert [g["lr"] for g in resumed.param_groups] == seen[47]


def test_base_lr_may_change_between_steps():
    """The trainer's base lr is ``lr * lr_scale``: read at every step, so a roll-back's new scale
    takes effect at the next step (or at once when the scheduler is built again)."""
    scale = [1.0]
    opt = _opt(0.0)
    sched = scheduler(opt, lr_lambda(lambda: 0.01 * scale[0], 0, 10, "constant"))
    assert opt.param_groups[0]["lr"] == 0.01
    scale[0] = 0.5
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.01 * 0.5
