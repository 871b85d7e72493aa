"""The RL trainer's optimizer steps: gradient clipping, the non-finite guard, the lr schedulers.

Actor and critic each have an AdamW (:func:`agentr1.lm.schedule.make_optimizer`) and a
``LambdaLR`` over ``steps x ppo_epochs x mini_batches`` optimizer steps: linear warmup, then
constant or cosine (:mod:`agentr1.lm.schedule`), with base lr ``lr * lr_scale`` read at every
step (the collapse guard's roll-back scales it). The schedulers are positioned at the saved
optimizer-step counters, so a resumed run continues the schedule exactly.

One optimizer step (:meth:`Optimizers._optimizer_step`): the "every loss finite" flags are summed
over ranks, each trained module's gradients clipped to ``grad_clip`` (the norms before clipping
are the ``grad_norm`` / ``critic_grad_norm`` stats); if a flag or a norm is not finite the
gradients are dropped and :class:`agentr1.rl.collapse.Collapse` is raised, nothing stepped;
otherwise the optimizers and schedulers step (the actor's only once the critic's warm-up is over).

:class:`Optimizers` is the part of :class:`agentr1.rl.trainer.Trainer` that does this.
"""

from __future__ import annotations

import torch

from agentr1.lm.schedule import lr_lambda, scheduler
from agentr1.rl import collapse
from agentr1.rl.collapse import Collapse
from agentr1.rl.distributed import clip_grad_norm
from agentr1.rl.stats import StepStats


class Optimizers:
    """Stepping and scheduling the trainer's optimizers (module docstring); a mixin of it."""

    def _build_schedulers(self) -> None:
        """The lr schedulers (:mod:`agentr1.lm.schedule`) of the actor and the critic at their
        optimizer-step counts, over ``steps x ppo_epochs x mini_batches`` optimizer steps, with base
        lr ``lr * lr_scale`` (read at every step). Rebuilt whenever the counts or ``lr_scale`` are
        set from outside the update (a loaded checkpoint, a roll-back)."""
        t = self.tcfg
        total = max(t.steps * t.ppo_epochs * t.mini_batches, 1)

        def build(opt, lr: float, start: int):
            fn = lr_lambda(lambda: lr * self.lr_scale, t.warmup_steps, total, t.lr_schedule, t.min_lr_ratio)
            return scheduler(opt, fn, start=start)

        self.scheduler = build(self.opt, t.lr, self.opt_steps)
        self.critic_scheduler = (
            None if self.critic_opt is None else build(self.critic_opt, t.critic.lr, self.critic_opt_steps)
        )

    def _optimizer_step(
        self, finite: torch.Tensor, update_policy: bool, acc: StepStats, at: tuple[int, int, int]
    ) -> None:
        """Clip the gradients, step the optimizers and lr schedulers (the actor's only when
        ``update_policy``); :class:`Collapse` (gradients dropped) when a rank's loss or a gradient
        norm is not finite. ``at`` = ``(step, epoch, mini_batch)``."""
        d = self.dist
        finite = d.all_reduce_sum(finite)
        norms = {}
        if update_policy:
            norms["grad_norm"] = clip_grad_norm(self.actor, self.tcfg.grad_clip)
        if self.critic is not None:
            norms["critic_grad_norm"] = clip_grad_norm(self.critic, self.tcfg.grad_clip)
        reason = collapse.nonfinite(float(finite), d.world_size, norms, *at)
        if reason is not None:
            self._zero_grad()
            raise Collapse(reason)
        if update_policy:
            self.opt.step()
            self.scheduler.step()
            self.opt_steps += 1
        if self.critic_opt is not None:
            self.critic_opt.step()
            self.critic_scheduler.step()
            self.critic_opt_steps += 1
        self._zero_grad()
        for name, v in norms.items():
            acc.mean(name, v, 1.0 / d.world_size)  # identical on every rank

    def _zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        if self.critic_opt is not None:
            self.critic_opt.zero_grad(set_to_none=True)
