"""End-to-end RL for a tool-using agent (Agent-R1): the loop, read top to bottom.

One module of some 450 lines on purpose: it is the loop and nothing else (the parts it calls are
their own modules, listed below), so that one step reads top to bottom in one place.

One step ``k`` (:meth:`Trainer.train_step`): collect -> score -> advantages -> update.
1. collect (:mod:`agentr1.rl.sampling`): ``batch_questions`` questions, each rolled out
   ``group_size`` times through the multi-turn engine (token-exact trajectories with
   ``action_mask``); with ``filter_groups``, groups without a learning signal are refilled;
2. score: outcome reward ``R_i`` per episode (:func:`agentr1.env.rewards.score_episode`) on its
   last action token, process rewards on the tokens closing tool calls (``r_t``);
3. advantages (:meth:`prepare`): old log-probs ``log pi_old`` (a no-grad pass, or the sampling-time
   ones), reference log-probs ``log pi_ref``, critic values ``V``; with ``kl.mode: reward``
   ``r_t -= beta * KL_t`` first; then the registry estimator (gae / grpo / rloo / ...) gives
   ``A_t`` and returns ``G_t`` over the advantage mask ``a_t`` (0 off the mask);
4. update (:meth:`update`): ``ppo_epochs`` x ``mini_batches`` optimizer steps, each accumulated over
   micro-batches (:mod:`agentr1.rl.batches`), gradients clipped, lr warmup + constant/cosine.

The objective of a mini-batch, with ``m_t`` the loss mask, ``rho_t = exp(log pi - log pi_old)``::

    l_t      = max(-A_t rho_t, -A_t clip(rho_t, 1 - eps_low, 1 + eps_high))    (ppo_clip; dual clip
                                                                               caps it at -A_t c, A_t < 0)
    l_t     *= min(pi_old(a_t) / pi_behav(a_t), cap)                          (off_policy.correction:
                                                                               decoupled; pi_behav = the
                                                                               sampling-time log-probs)
    L_policy = agg(l, m) + beta * agg(KL(pi || pi_ref), m) [kl.mode: loss] - c_H * agg(H, m)
    L_critic = 0.5 * agg(max((V - G)^2, (V_old + clip(V - V_old, -e, e) - G)^2), a)

Masks: ``action_mask`` (policy-sampled tokens) is the single source; :func:`agentr1.rl.masks.select_masks`
turns ``train.loss_mask`` / ``train.advantage_mask`` into ``m`` and ``a`` (``action_mask`` when on,
every response token when off). Aggregation ``agg`` is token-level by default: ``token-mean`` =
``sum_t m_t l_t / sum_t m_t`` over the *global* mini-batch (the denominator is counted once and
passed to every micro-batch and rank, so their losses add up to it; seq-mean modes:
:mod:`agentr1.rl.losses`). Each rank's loss is scaled by the world size (DDP averages gradients).
A step whose loss or gradient norm is not finite, or whose reward drops, is skipped, rolled back
(:mod:`agentr1.rl.state`) or stops the run (:mod:`agentr1.rl.collapse`); checkpoints every
``checkpoint.every`` steps (:mod:`agentr1.rl.state`, :mod:`agentr1.rl.checkpoint`).

Simplifications (stated, as nanoGPT/CleanRL do):

* ``rollout.backend: hf`` rolls out with the trainer's own weights (no copy, no sync); ``vllm``
  builds one engine per rank from ``model_path`` and loads the current weights into it before
  every rollout (:mod:`agentr1.rl.weight_sync`) - a colocated engine synced every step;
* ``old_logprobs: recompute`` (default) is exact for every response token; ``rollout`` reuses the
  sampling-time log-probs (floating-point noise apart) and is refused with ``loss_mask: false``;
* log-probs are ``log_softmax(logits / T)`` at the sampling temperature (verl's convention);
  top-p truncation is not renormalised;
* the reference model is a full frozen copy on every rank; no-grad passes are sharded by rows and
  all-gathered (:mod:`agentr1.rl.logprobs`), so every rank computes the same global advantages;
  truncated episodes are not bootstrapped (the last action token is terminal);
* FSDP shards the trained modules (:mod:`agentr1.rl.distributed`), but checkpoints and roll-backs
  are DDP / single-process only; it is not exercised by the CPU tests.

Determinism: every random draw is keyed by ``(seed, step[, rank, epoch])`` (:func:`agentr1.rl.sampling.seed_key`),
none uses the global RNG: on the CPU a config gives the same numbers, resumed or not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from agentr1.config.checks import check_run
from agentr1.env.rewards import EpisodeScore
from agentr1.errors import StageError
from agentr1.registry import ESTIMATORS
from agentr1.rl import collapse
from agentr1.rl.advantages import compute_advantage
from agentr1.rl.batches import denominator, micro_batches, mini_batches
from agentr1.rl.collapse import Collapse
from agentr1.rl.critic import build_modules
from agentr1.rl.distributed import Dist, no_sync
from agentr1.rl.logprobs import forward_module, row_forward
from agentr1.rl.losses import (
    apply_kl_penalty,
    behaviour_weights,
    compute_policy_loss,
    entropy_bonus,
    kl_estimate,
    kl_loss,
    value_loss,
)
from agentr1.rl.masks import as_bool, build_token_rewards, masked_mean, select_masks
from agentr1.rl.optim import Optimizers
from agentr1.rl.sampling import Episodes, Sampling
from agentr1.rl.state import Resumable
from agentr1.rl.stats import StepStats
from agentr1.rl.steps import anchor_groups, step_rows, turn_index
from agentr1.rl.weight_sync import WeightSync
from agentr1.rollout import Trajectory, collate

log = logging.getLogger(__name__)


class Trainer(Sampling, Optimizers, Resumable):
    """The RL trainer (module docstring) of ``policy`` (a transformers causal LM) with the run's
    ``train``, ``rollout``, ``reward`` sections; ``episodes`` to roll out, ``logger.log``
    for rank 0's metrics, ``state_dir`` for checkpoints (``None``: in memory, for roll-backs),
    ``model_path`` the start checkpoint (vLLM's engine), ``run_params`` saved with the state."""

    def __init__(
        self,
        policy,
        tokenizer,
        tcfg,
        rollout_cfg,
        reward_cfg,
        *,
        episodes: Episodes | None = None,
        logger=None,
        seed: int = 0,
        dist: Dist | None = None,
        state_dir: str | Path | None = None,
        model_path: str | Path | None = None,
        run_params: dict[str, Any] | None = None,
    ):
        self.tcfg, self.rollout_cfg, self.reward_cfg = tcfg, rollout_cfg, reward_cfg
        self.model_path = None if model_path is None else str(model_path)
        self.weight_sync = WeightSync(self.model_path)  # the vLLM engine (rollout.backend: vllm), built on first use
        self.dist, self.seed, self.tokenizer = dist or Dist(), seed, tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        ep = episodes or Episodes()
        self.env, self.train_questions, self.dev_questions = ep.env, list(ep.train or []), list(ep.dev or [])
        self.fresh = ep.fresh
        self.logger = logger
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.params = self._params(run_params)  # saved with every checkpoint; a resume must match them
        check_run(
            tcfg,
            rollout_cfg,
            self.dist.world_size,
            self.dist.strategy,
            has_start_checkpoint=self.model_path is not None,
        )
        self.policy = policy.to(self.dist.device)  # actor, frozen reference, critic, optimizers (DDP/FSDP-wrapped)
        self.actor, self.ref, self.critic, self.opt, self.critic_opt = build_modules(
            policy, tcfg, rollout_cfg, self.dist
        )
        # state that a checkpoint carries (agentr1.rl.state)
        self.step, self.opt_steps, self.critic_opt_steps, self.rollbacks, self.lr_scale = 0, 0, 0, 0, 1.0
        self.history: list[dict[str, float]] = []
        self.guard_rewards: list[float] = []
        self.events: list[dict[str, Any]] = []
        self._build_schedulers()
        self._memory_state: tuple[dict, dict] | None = None
        self.on_step: Callable[[int, dict], None] | None = None  # hook after each finished step

    # ------------------------------------------------------------------ the loop
    def train(self, until: int | None = None) -> list[dict[str, float]]:
        """Run steps ``self.step + 1 .. until`` (default ``train.steps``); a dev evaluation at step 0,
        a checkpoint every ``checkpoint.every`` steps and, with ``collapse.action: rollback``, at the
        start. Returns the history of per-step metrics (with those of a resumed checkpoint)."""
        end = self.tcfg.steps if until is None else min(until, self.tcfg.steps)
        if self.step == 0 and not self.history:
            if self.tcfg.dev.every:
                self._record(0, self.evaluate_dev(0))
            if self.tcfg.collapse.action == "rollback":
                self.save()  # the first roll-back target
        every = self.tcfg.checkpoint.every
        while self.step < end:
            step = self.step + 1
            metrics = self.train_step(step)
            if metrics is not None and every and step % every == 0:
                self.save()
            if metrics is not None and self.dist.is_main:
                log.info(
                    "step %d/%d reward %.3f em %.3f | rollout %.1fs update %.1fs",
                    step,
                    self.tcfg.steps,
                    metrics["rollout/reward"],
                    metrics["rollout/em"],
                    metrics["time/rollout_s"],
                    metrics["time/update_s"],
                )
            if self.on_step is not None and metrics is not None:
                self.on_step(step, metrics)
        return self.history

    def train_step(self, step: int) -> dict[str, float] | None:
        """collect -> score -> advantages -> update for step ``step``; its metrics, or ``None`` when
        the collapse guard skipped it or rolled back."""
        t0 = time.perf_counter()
        trajs, scores, metrics = self.collect_batch(step)  # 1-2: collect and score
        t1 = time.perf_counter()
        self._trace(trajs, step)
        try:
            drop = collapse.reward_drop(metrics["rollout/reward"], self.guard_rewards, self.tcfg.collapse)
            if drop is not None:
                raise Collapse(drop)
            batch = self.prepare(trajs, scores)  # 3: advantages
            t2 = time.perf_counter()
            metrics.update(batch["stats"])
            metrics.update(self.update(batch, step))  # 4: update
        except Collapse as exc:
            self._on_collapse(step, str(exc.args[0]))
            if self.tcfg.collapse.action == "skip":
                self.step = step
                metrics["train/skipped"] = 1.0
                self._record(step, metrics)
            return None
        t3 = time.perf_counter()
        self.guard_rewards.append(metrics["rollout/reward"])
        metrics.update({"time/rollout_s": t1 - t0, "time/prepare_s": t2 - t1, "time/update_s": t3 - t2})
        self.step = step
        dev = self.tcfg.dev
        if dev.every and (step % dev.every == 0 or step == self.tcfg.steps):
            te = time.perf_counter()
            metrics.update(self.evaluate_dev(step))
            metrics["time/eval_s"] = time.perf_counter() - te
        metrics["time/step_s"] = time.perf_counter() - t0
        metrics["train/lr_scale"] = self.lr_scale
        self._record(step, metrics)
        return metrics

    # ------------------------------------------------------------------ 3: rewards, log-probs, advantages
    @torch.no_grad()
    def prepare(self, trajs: Sequence[Trajectory], scores: Sequence[EpisodeScore]) -> dict[str, Any]:
        """Collate, place rewards, compute old/ref log-probs, values and advantages."""
        t = self.tcfg
        batch, rewards = self._collate(trajs, scores)
        B = batch["input_ids"].shape[0]
        loss_mask, adv_mask = batch["loss_mask"], batch["adv_mask"]
        stats: dict[str, float] = {}
        old = self._old_logprobs(batch, loss_mask, stats)
        if self.ref is not None:
            rewards = self._reference(batch, rewards, old, loss_mask, stats)
        values = self._values(batch, adv_mask)
        adv, ret, step_diagnostics = self._advantages(batch, rewards, values, adv_mask, B)
        batch["token_rewards"], batch["advantages"], batch["returns"] = rewards, adv, ret
        stats["train/adv_abs_mean"] = float(masked_mean(adv.abs(), adv_mask))
        stats["train/token_reward_sum"] = float(rewards.sum() / B)
        stats.update(step_diagnostics)
        if t.sample_unit == "step":
            batch = step_rows(batch, turn_index(batch["action_mask"]))
            stats["train/step_rows"] = float(batch["input_ids"].shape[0])
        batch["stats"] = stats
        return batch

    def _collate(
        self, trajs: Sequence[Trajectory], scores: Sequence[EpisodeScore]
    ) -> tuple[dict[str, Any], torch.Tensor]:
        """Step 3's inputs: the collated batch with ``response_mask``, the loss mask ``m`` and the
        advantage mask ``a`` (``select_masks``), and the token rewards ``R_i`` on the last action
        token plus ``r_t`` on the tokens closing tool calls. Raises ``StageError`` when an episode
        has no policy token."""
        t = self.tcfg
        empty = [tr.qid for tr in trajs if tr.num_action_tokens == 0]
        if empty:
            raise StageError(
                f"{len(empty)} episode(s) have no policy token (e.g. {empty[0]}): the prompt fills "
                f"rollout.max_total_tokens ({self.rollout_cfg.max_total_tokens}); raise it"
            )
        batch = collate(list(trajs), self.pad_id)
        B, L = batch["input_ids"].shape
        pos = torch.arange(L).unsqueeze(0)
        start, length = batch["response_start"].unsqueeze(1), batch["response_length"].unsqueeze(1)
        batch["response_mask"] = ((pos >= start) & (pos < start + length)).long()
        loss_mask, adv_mask = select_masks(batch["action_mask"], batch["response_mask"], t.loss_mask, t.advantage_mask)
        batch["loss_mask"], batch["adv_mask"] = loss_mask, adv_mask
        process = [(b, int(batch["response_start"][b]) + tok, v) for b, s in enumerate(scores) for tok, v in s.process]
        rewards = build_token_rewards([s.reward for s in scores], batch["action_mask"], process or None)
        return batch, rewards

    def _old_logprobs(self, batch: dict[str, Any], loss_mask: torch.Tensor, stats: dict[str, float]) -> torch.Tensor:
        """``log pi_old`` over the loss mask (a no-grad pass of the actor, or the sampling-time
        log-probs, 0 off the mask) into ``batch["old_logp"]``; with ``off_policy.correction:
        decoupled`` also the weights ``min(pi_old / pi_behav, cap)`` into ``batch["behaviour_weight"]``
        and their stats."""
        t = self.tcfg
        actor = forward_module(self.actor, self.dist)
        actor.eval()
        if t.old_logprobs == "recompute":
            old = self._row_forward(lambda i, a, m: actor(i, a, m)[0], batch, "loss_mask")
        else:
            old = torch.where(as_bool(loss_mask), batch["logprobs"], torch.zeros(()))
        batch["old_logp"] = old
        if t.off_policy.correction == "decoupled":
            batch["behaviour_weight"], w_st = behaviour_weights(
                old, batch["logprobs"], loss_mask, t.off_policy.weight_cap
            )
            stats.update({f"train/{k}": float(v) for k, v in w_st.items()})
        return old

    def _reference(
        self,
        batch: dict[str, Any],
        rewards: torch.Tensor,
        old: torch.Tensor,
        loss_mask: torch.Tensor,
        stats: dict[str, float],
    ) -> torch.Tensor:
        """``log pi_ref`` into ``batch["ref_logp"]`` and ``train/kl_ref`` = mean_m KL(pi_old || pi_ref);
        with ``kl.mode: reward`` returns ``r_t - beta * KL_t`` (else ``rewards`` as given)."""
        t = self.tcfg
        batch["ref_logp"] = self._row_forward(lambda i, a, m: self.ref(i, a, m)[0], batch, "loss_mask")
        kl_tok = kl_estimate(old, batch["ref_logp"], t.kl.estimator, loss_mask)
        stats["train/kl_ref"] = float(masked_mean(kl_tok, loss_mask))
        if t.kl.mode == "reward":
            rewards, kl_stats = apply_kl_penalty(rewards, old, batch["ref_logp"], loss_mask, t.kl.coef, t.kl.estimator)
            stats["train/kl_penalty"] = float(kl_stats["kl"]) * t.kl.coef
        return rewards

    def _values(self, batch: dict[str, Any], adv_mask: torch.Tensor) -> torch.Tensor | None:
        """The critic's values ``V`` over the advantage mask ``a`` (0 off it) into ``batch["values"]``;
        ``None`` without a critic."""
        values = None
        if self.critic is not None:
            critic = forward_module(self.critic, self.dist)
            critic.eval()
            values = self._row_forward(lambda i, a, m: critic(i, a, m), batch, "adv_mask")
            values = torch.where(as_bool(adv_mask), values, torch.zeros(()))
            batch["values"] = values
        return values

    def _advantages(
        self,
        batch: dict[str, Any],
        rewards: torch.Tensor,
        values: torch.Tensor | None,
        adv_mask: torch.Tensor,
        B: int,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """The registry estimator's ``A_t`` and ``G_t`` over the advantage mask ``a``, episodes grouped
        by question (``b // group_size``), with GiGPO's anchor-state step groups for a stepwise
        estimator; returns ``(advantages, returns, step diagnostics)``."""
        t = self.tcfg
        index = [b // t.group_size for b in range(B)]
        steps = None
        if ESTIMATORS.spec(t.estimator).meta.get("stepwise"):
            g = t.gigpo
            steps = anchor_groups(
                batch["input_ids"], batch["action_mask"], index, g.similarity, g.anchor, g.window, g.max_compare
            )
        norm_by_std = t.gigpo.norm_by_std(t.norm_by_std) if steps is not None else t.norm_by_std
        step_diagnostics: dict[str, float] = {}  # GiGPO's step statistics (agentr1.rl.stats.step_stats)
        adv, ret = compute_advantage(
            t.estimator,
            rewards,
            adv_mask,
            values=values,
            index=index,
            gamma=t.gamma,
            lam=t.lam,
            whiten=t.whiten,
            norm_by_std=norm_by_std,
            steps=steps,
            step_weight=t.gigpo.step_weight,
            episode_stats=t.gigpo.episode_stats,
            diagnostics=step_diagnostics,
        )
        return adv, ret, step_diagnostics

    def _row_forward(self, fn, batch: dict, key_mask: str) -> torch.Tensor:
        """:func:`agentr1.rl.logprobs.row_forward`: no grad, sharded over ranks, all-gathered."""
        return row_forward(fn, batch, key_mask, self.dist, self.tcfg.micro_batch_size)

    # ------------------------------------------------------------------ 4: update
    def update(self, batch: dict[str, Any], step: int) -> dict[str, float]:
        """``ppo_epochs`` x ``mini_batches`` optimizer steps on a prepared batch; raises
        :class:`~agentr1.rl.collapse.Collapse` on a non-finite loss or gradient (no optimizer step
        is taken then). The policy waits for the critic's ``warmup_steps``."""
        update_policy = step > self.tcfg.critic.warmup_steps or self.critic is None
        acc = StepStats()
        n_steps = 0
        self.actor.train()
        if self.critic is not None:
            self.critic.train()
        for epoch, k, rows in mini_batches(batch["input_ids"].shape[0], self.tcfg, self.seed, step):
            lr = self.opt.param_groups[0]["lr"]
            finite = self._accumulate(batch, rows, update_policy, acc)
            self._optimizer_step(finite, update_policy, acc, (step, epoch, k))
            acc.mean("lr", lr, 1.0 / self.dist.world_size)
            n_steps += 1
        self.actor.eval()
        out = {f"train/{k}": v for k, v in acc.result(self.dist, n_steps).items()}
        out["train/policy_updated"] = float(update_policy)
        return out

    def _accumulate(self, batch: dict[str, Any], rows: list[int], update_policy: bool, acc: StepStats) -> torch.Tensor:
        """Backward passes of ``L_policy`` (when ``update_policy``) and ``L_critic`` over the
        mini-batch ``rows``, each x world size; gradients are synced on the last micro-batch
        only. Returns this rank's 0/1 flag "every loss finite"."""
        d, t = self.dist, self.tcfg
        pol_denom, val_denom = (
            denominator(batch["loss_mask"][rows], t.agg_mode),
            denominator(batch["adv_mask"][rows], t.agg_mode),
        )
        norm_const = float(self.rollout_cfg.max_total_tokens)
        finite = torch.ones(1)
        for last, mb in micro_batches(batch, rows, d, t.micro_batch_size):
            n_tok = float(as_bool(mb["loss_mask"]).sum())
            if update_policy:
                with no_sync(self.actor, not last):
                    loss, st = self._policy_loss(mb, pol_denom, norm_const)
                    finite *= float(torch.isfinite(loss.detach()))
                    (loss * d.world_size).backward()
                acc.policy(st, n_tok)
            if self.critic is not None:
                with no_sync(self.critic, not last):
                    v = self.critic(mb["input_ids"], mb["attention_mask"], mb["adv_mask"])
                    vloss, vst = value_loss(
                        v,
                        mb["values"],
                        mb["returns"],
                        mb["adv_mask"],
                        clip_range=t.critic.value_clip,
                        agg_mode=t.agg_mode,
                        denom=val_denom,
                        norm_const=norm_const,
                    )
                    finite *= float(torch.isfinite(vloss.detach()))
                    (vloss * d.world_size).backward()
                acc.critic(float(vloss.detach()), vst, float(as_bool(mb["adv_mask"]).sum()))
        return finite

    def _policy_loss(self, mb: dict, denom: float, norm_const: float) -> tuple[torch.Tensor, dict[str, float]]:
        """``L_policy`` of a micro-batch (module docstring) and its stats."""
        t, lm = self.tcfg, mb["loss_mask"]
        logp, ent = self.actor(mb["input_ids"], mb["attention_mask"], lm, with_entropy=True)
        agg = dict(agg_mode=t.agg_mode, denom=denom, norm_const=norm_const)
        weights = {"weights": mb["behaviour_weight"]} if "behaviour_weight" in mb else {}
        pg, st = compute_policy_loss(
            t.policy_loss,
            logp,
            mb["old_logp"],
            mb["advantages"],
            lm,
            clip_low=t.clip_low,
            clip_high=t.clip_high,
            dual_clip=t.dual_clip,
            **agg,
            **weights,
        )
        loss = pg
        stats = {"pg_loss": float(pg.detach())}
        for name in ("clipfrac", "approx_kl", "ratio_mean"):
            if name in st:
                stats[name] = float(st[name])
        if self.ref is not None and t.kl.mode == "loss":
            kl, _ = kl_loss(logp, mb["ref_logp"], lm, estimator=t.kl.estimator, **agg)
            loss = loss + t.kl.coef * kl
            stats["kl_loss"] = float(kl.detach())
        bonus, est = entropy_bonus(ent, lm, t.entropy_coef, **agg)
        if t.entropy_coef > 0:
            loss = loss + bonus
        stats["entropy"] = float(est["entropy"])
        stats["loss"] = float(loss.detach())
        return loss, stats
