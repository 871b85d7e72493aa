"""End-to-end RL for a tool-using agent (Agent-R1): one file, read top to bottom.

One training step ``k`` (:meth:`Trainer.train_step`)::

    1. questions   ``batch_questions`` train questions drawn with a generator seeded by (seed, k)
    2. rollout     each question ``group_size`` times through the multi-turn RolloutEngine + ToolEnv
                   (token-exact trajectories with action_mask; rank r rolls out its share); with
                   filter_groups, groups whose rewards are all equal are replaced by fresh ones
                   (DAPO's dynamic sampling)
    3. rewards     outcome reward per episode (format + answer metric, env.rewards.score_episode) on the last
                   action token; optional process rewards on the token closing each tool call
    4. log-probs   old log-probs (a no-grad forward pass of the rollout policy, or the sampling-
                   time ones), reference log-probs (frozen start policy) for the KL, critic values
    5. advantages  registry estimator (gae / grpo / reinforce_pp / reinforce_pp_baseline / rloo)
                   over the advantage mask; KL as a reward penalty first when kl.mode = reward
    6. update      ppo_epochs x mini_batches optimizer steps; each mini-batch is accumulated over
                   micro-batches; policy loss (registry) + kl.coef * KL (kl.mode = loss)
                   - entropy_coef * entropy, all over the loss mask; clipped value loss for the
                   critic; gradient clipping; warmup + constant/cosine lr (agentr1.rl.schedule, a
                   LambdaLR per optimizer)
    7. metrics     rollout/* (with the share of groups whose rewards differ, i.e. that carry a learning
                   signal, and of solved groups), train/*, time/* (and dev/* every dev.every steps, greedy)
    8. guard       non-finite loss/gradient or a reward drop -> skip / roll back / stop (agentr1.rl.collapse)
    9. checkpoint  every checkpoint.every steps (resumable; agentr1.rl.checkpoint)

Masks (ARCHITECTURE invariants 2-4): ``action_mask`` (policy-sampled tokens) is the single source;
``select_masks`` turns the two switches into the loss mask and the advantage mask.

Simplifications (stated, as nanoGPT/CleanRL do):

* ``rollout.backend: hf`` rolls out with the trainer's own weights (no copy, no sync);
  ``rollout.backend: vllm`` builds one vLLM engine per rank from ``model_path`` (the start
  checkpoint) and, before every rollout (training and dev), loads the current policy weights
  into it (``VLLMBackend.load_weights``; gathered first under FSDP; agentr1.rl.weight_sync) - a
  colocated "hybrid engine" that syncs every step, simpler than verl's resharding;
* ``old_logprobs: recompute`` (default) runs a forward pass with the weights that sampled the
  batch - exact for every response token (needed when the loss mask is off, since observation
  tokens have no sampling-time log-prob); ``rollout`` reuses the sampling-time log-probs, which
  differ from a training forward pass only by floating-point noise (batched KV-cache decoding vs
  one padded pass) at ``temperature``, and is refused with ``loss_mask: false``;
* log-probs are ``log_softmax(logits / T)`` with ``T`` the sampling temperature (verl's
  convention), so the ratio compares like with like; top-p truncation is not renormalised;
* the reference model is a full frozen copy on every rank, and the no-grad passes are sharded by
  rows and all-gathered (agentr1.rl.logprobs) (every rank then holds the whole batch and computes identical global
  advantages); truncated episodes are not bootstrapped (the last action token is terminal);
* the lr schedule is a pure function of the optimizer-step counter, which is what is saved;
* FSDP (``train.distributed.strategy: fsdp``, GPU) shards the trained modules and unshards them
  for generation and export, but resumable checkpoints / roll-backs are DDP and single-process
  only (a sharded optimizer state would need per-rank files); it is not exercised by the CPU
  tests.

Determinism: every random draw is keyed by ``(seed, step[, rank, epoch])`` (question sample,
rollout seed, mini-batch permutation); nothing depends on the global RNG, so on the CPU the same
config gives the same numbers and a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from agentr1.config import flatten
from agentr1.env.rewards import EpisodeScore, score_episode
from agentr1.errors import StageError
from agentr1.registry import ESTIMATORS
from agentr1.rl import checkpoint as ckpt
from agentr1.rl import collapse
from agentr1.rl.advantages import compute_advantage
from agentr1.rl.collapse import Collapse
from agentr1.rl.critic import PolicyLogProbs, build_critic
from agentr1.rl.distributed import Dist, full_params, no_sync, unwrap, wrap
from agentr1.rl.logprobs import forward_module, row_forward
from agentr1.rl.losses import apply_kl_penalty, compute_policy_loss, entropy_bonus, kl_estimate, kl_loss, value_loss
from agentr1.rl.masks import as_bool, build_token_rewards, masked_mean, select_masks
from agentr1.rl.schedule import lr_lambda, make_optimizer, scheduler
from agentr1.rl.stats import StepStats
from agentr1.rl.weight_sync import WeightSync
from agentr1.rollout import RolloutEngine, Trajectory, collate, make_backend

log = logging.getLogger(__name__)

TIME_PREFIX = "time/"
ADDITIVE_STATS = frozenset({"pg_loss", "kl_loss", "entropy", "loss"})


# ----------------------------------------------------------------------------- small pieces
def _key(*parts: int) -> int:
    """A deterministic 63-bit seed from integers (seed, step, rank, ...)."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFF)) * 1099511628211) % (1 << 63)
    return h


def group_signal(scores: Sequence[EpisodeScore], group_size: int) -> tuple[list[bool], list[bool]]:
    """Per group of ``group_size`` consecutive episodes: does it carry a learning signal (its
    rewards differ, so a group baseline leaves a non-zero advantage), and is it solved (some
    episode has EM 1)?"""
    groups = [scores[i : i + group_size] for i in range(0, len(scores), group_size)]
    informative = [max(s.reward for s in g) > min(s.reward for s in g) for g in groups]
    solved = [any(s.em >= 1 for s in g) for g in groups]
    return informative, solved


def rollout_metrics(trajs: Sequence[Trajectory], scores: Sequence[EpisodeScore], group_size: int = 1) -> dict[str, float]:
    """Means over the episodes; with groups (``group_size`` > 1) also the share of groups with a
    learning signal (``rollout/informative_groups``) and of solved ones (``rollout/solved_groups``)."""
    n = len(trajs)
    out = {
        "rollout/reward": sum(s.reward for s in scores) / n,
        "rollout/em": sum(s.em for s in scores) / n,
        "rollout/format_rate": sum(s.format_ok for s in scores) / n,
        "rollout/tool_calls": sum(s.tool_calls for s in scores) / n,
        "rollout/turns": sum(t.num_turns for t in trajs) / n,
        "rollout/answered": sum(t.answer is not None for t in trajs) / n,
        "rollout/response_length": sum(len(t.response_ids) for t in trajs) / n,
        "rollout/action_tokens": sum(t.num_action_tokens for t in trajs) / n,
        "rollout/max_length_rate": sum(t.reason == "max_length" for t in trajs) / n,
    }
    if group_size > 1:
        informative, solved = group_signal(scores, group_size)
        out["rollout/informative_groups"] = sum(informative) / len(informative)
        out["rollout/solved_groups"] = sum(solved) / len(solved)
    return out


# ----------------------------------------------------------------------------- the trainer
def check_train_config(tcfg, rollout_cfg, world: int = 1, strategy: str = "ddp", has_start_checkpoint: bool = True) -> None:
    """:class:`StageError` naming the setting when the trainer cannot run ``tcfg`` with
    ``rollout_cfg`` on ``world`` ranks under ``strategy`` (``agentr1 profile --dry-run`` uses it too)."""
    t = tcfg
    if rollout_cfg.backend == "vllm" and not has_start_checkpoint:
        raise StageError("rollout.backend: vllm needs the start checkpoint (Trainer(model_path=...)) to build "
                         "the engine; or set rollout.backend: hf")
    if rollout_cfg.backend == "vllm" and strategy == "fsdp" and world > 1 and t.dev.every:
        raise StageError("train.dev.every > 0 with rollout.backend: vllm under FSDP: the rank-0 dev rollout "
                         "cannot gather the sharded weights; set train.dev.every: 0 (evaluate after training)")
    if t.old_logprobs == "rollout" and not t.loss_mask:
        raise StageError("train.old_logprobs: rollout needs loss_mask: true (observation tokens have no "
                         "sampling-time log-probs); use old_logprobs: recompute")
    batch = t.batch_questions * t.group_size
    if t.batch_questions % world:
        raise StageError(f"train.batch_questions ({t.batch_questions}) must divide by the world size ({world})")
    if batch % t.mini_batches or (batch // t.mini_batches) % world:
        raise StageError(f"the batch of {batch} episodes (batch_questions x group_size) must split into "
                         f"{t.mini_batches} mini-batches whose size divides by the world size ({world})")


class Trainer:
    """The RL trainer (module docstring). ``policy`` is a transformers causal LM (the start
    policy, e.g. the SFT cold start), ``tcfg`` a ``TrainConfig`` (the run's merged ``train``
    section). ``env`` and ``train_questions`` are needed for :meth:`train`/:meth:`collect`, not
    for :meth:`update` on given trajectories. ``logger`` has ``log(metrics, step)``; metrics go
    to it from rank 0 only. ``state_dir`` holds the resumable checkpoint (``None`` = in memory,
    for the collapse guard's roll-backs only)."""

    def __init__(
        self,
        policy,
        tokenizer,
        tcfg,
        rollout_cfg,
        reward_cfg,
        *,
        env=None,
        train_questions: Sequence[dict] | None = None,
        dev_questions: Sequence[dict] | None = None,
        logger=None,
        seed: int = 0,
        dist: Dist | None = None,
        state_dir: str | Path | None = None,
        model_path: str | Path | None = None,
        run_params: dict[str, Any] | None = None,
    ):
        self.tcfg, self.rollout_cfg, self.reward_cfg = tcfg, rollout_cfg, reward_cfg
        self.model_path = None if model_path is None else str(model_path)  # vllm: the checkpoint it starts from
        self.weight_sync = WeightSync(self.model_path)  # the vLLM engine (rollout.backend: vllm), built on first use
        self.dist = dist or Dist()
        self.seed = seed
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.env = env
        self.train_questions = list(train_questions or [])
        self.dev_questions = list(dev_questions or [])
        self.logger = logger
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.params = self._params(run_params)  # saved with every checkpoint; a resume must match them
        check_train_config(tcfg, rollout_cfg, self.dist.world_size, self.dist.strategy,
                           has_start_checkpoint=self.model_path is not None)

        device = self.dist.device
        self.policy = policy.to(device)
        share_prefix = not (self.dist.active and self.dist.strategy == "fsdp")
        self.actor = wrap(PolicyLogProbs(self.policy, rollout_cfg.temperature, share_prefix), self.dist)
        self.ref: PolicyLogProbs | None = None
        if tcfg.kl.mode != "none" and tcfg.kl.coef > 0:
            ref_model = copy.deepcopy(policy).eval().requires_grad_(False)
            self.ref = PolicyLogProbs(ref_model, rollout_cfg.temperature, share_prefix)
        self.critic = None
        self.critic_opt = None
        if ESTIMATORS.spec(tcfg.estimator).meta.get("needs_values"):
            self.critic = wrap(build_critic(self.policy, tcfg.critic, next(policy.parameters()).dtype, share_prefix).to(device), self.dist)
            self.critic_opt = make_optimizer(self.critic, tcfg.critic.lr, tcfg.weight_decay)
        self.opt = make_optimizer(self.actor, tcfg.lr, tcfg.weight_decay)

        # state that a checkpoint carries
        self.step = 0
        self.opt_steps = 0
        self.critic_opt_steps = 0
        self.lr_scale = 1.0
        self.rollbacks = 0
        self.history: list[dict[str, float]] = []
        self.guard_rewards: list[float] = []
        self.events: list[dict[str, Any]] = []
        self._build_schedulers()
        self._memory_state: tuple[dict, dict] | None = None
        self.on_step: Callable[[int, dict], None] | None = None  # hook after each finished step

    def _params(self, extra: dict[str, Any] | None) -> dict[str, Any]:
        """What this run trains with, as dotted keys (``train.*``, ``rollout.*``, ``reward.*``, the
        seed, the train questions' ids; ``extra``: what the caller adds, e.g. ``env.*``)."""
        ids = "\n".join(str(q.get("id", "")) for q in self.train_questions)
        params: dict[str, Any] = {"seed": self.seed,
                                  "data.train_questions": f"{len(self.train_questions)} ids, sha256 "
                                                          f"{hashlib.sha256(ids.encode()).hexdigest()[:16]}"}
        for name, section in (("train", self.tcfg), ("rollout", self.rollout_cfg), ("reward", self.reward_cfg)):
            if hasattr(section, "model_dump"):
                params.update(flatten(section.model_dump(mode="json"), f"{name}."))
        params.update(extra or {})
        return params

    # ------------------------------------------------------------------ 1-2: questions, rollout
    def sample_questions(self, step: int, round_: int = 0) -> list[dict]:
        """``batch_questions`` train questions for ``step`` (round ``round_`` > 0: a refill of
        dynamic sampling, its own draw)."""
        n = len(self.train_questions)
        if n < self.tcfg.batch_questions:
            raise StageError(f"{n} train questions < train.batch_questions ({self.tcfg.batch_questions})")
        gen = torch.Generator().manual_seed(_key(self.seed, step, 1, *([round_] if round_ else [])))
        return [self.train_questions[i] for i in torch.randperm(n, generator=gen)[: self.tcfg.batch_questions].tolist()]

    def _engine(self, rollout_cfg) -> RolloutEngine:
        if self.env is None:
            raise ValueError("the trainer needs env= to roll out")
        if rollout_cfg.backend == "vllm":  # under FSDP inside full_params(self.actor), as collect does
            backend = self.weight_sync.synced(rollout_cfg, self.policy)
        else:
            backend = make_backend(rollout_cfg, model=self.policy, tokenizer=self.tokenizer)
        return RolloutEngine(backend, self.env, self.tokenizer, rollout_cfg)

    @torch.no_grad()
    def collect(self, step: int, round_: int = 0) -> list[Trajectory]:
        """This step's trajectories (global, question-major, groups contiguous); ``round_`` > 0:
        a refill round of dynamic sampling."""
        local_q = self.dist.shard(self.sample_questions(step, round_))
        self.policy.eval()
        seed = _key(self.seed, step, 2, self.dist.rank, *([round_] if round_ else []))
        with full_params(self.actor):
            local = self._engine(self.rollout_cfg).rollout(local_q, self.tcfg.group_size, seed=seed)
        return self.dist.all_gather_objects(local)

    def collect_batch(self, step: int) -> tuple[list[Trajectory], list[EpisodeScore], dict[str, float]]:
        """This step's training batch, its scores and the rollout metrics of its first round
        (so ``rollout/*`` means the same with or without dynamic sampling). With
        ``filter_groups.enabled``, groups without a learning signal (:func:`group_signal`) are
        replaced by informative groups of up to ``max_rounds`` refill rounds
        (:class:`agentr1.config.FilterGroupsConfig`); ``rollout/filter_rounds`` and
        ``rollout/batch_informative_groups`` say what that took and gave."""
        g = self.tcfg.group_size
        trajs = self.collect(step)
        scores = [score_episode(tr, self.reward_cfg) for tr in trajs]
        metrics = rollout_metrics(trajs, scores, g)
        fg = self.tcfg.filter_groups
        if not fg.enabled:
            return trajs, scores, metrics
        kept: list[tuple[list, list]] = []
        dropped: list[tuple[list, list]] = []
        n_groups, rounds = len(trajs) // g, 0
        while True:
            for i, ok in zip(range(0, len(trajs), g), group_signal(scores, g)[0]):
                (kept if ok else dropped).append((trajs[i : i + g], scores[i : i + g]))
            if len(kept) >= n_groups or rounds == fg.max_rounds:
                break
            rounds += 1
            trajs = self.collect(step, rounds)
            scores = [score_episode(tr, self.reward_cfg) for tr in trajs]
        informative = min(len(kept), n_groups)
        batch = (kept + dropped)[:n_groups]
        metrics["rollout/filter_rounds"] = float(rounds)
        metrics["rollout/batch_informative_groups"] = informative / n_groups
        return [t for grp, _ in batch for t in grp], [s for _, grp in batch for s in grp], metrics

    # ------------------------------------------------------------------ 3-5: batch, advantages
    def _row_forward(self, fn, batch: dict, key_mask: str) -> torch.Tensor:
        """:func:`agentr1.rl.logprobs.row_forward` in this trainer's micro-batches."""
        return row_forward(fn, batch, key_mask, self.dist, self.tcfg.micro_batch_size)

    @torch.no_grad()
    def prepare(self, trajs: Sequence[Trajectory], scores: Sequence[EpisodeScore]) -> dict[str, Any]:
        """Collate, place rewards, compute old/ref log-probs, values and advantages."""
        t = self.tcfg
        empty = [tr.qid for tr in trajs if tr.num_action_tokens == 0]
        if empty:
            raise StageError(f"{len(empty)} episode(s) have no policy token (e.g. {empty[0]}): the prompt fills "
                             f"rollout.max_total_tokens ({self.rollout_cfg.max_total_tokens}); raise it")
        batch = collate(list(trajs), self.pad_id)
        B, L = batch["input_ids"].shape
        pos = torch.arange(L).unsqueeze(0)
        start, length = batch["response_start"].unsqueeze(1), batch["response_length"].unsqueeze(1)
        batch["response_mask"] = ((pos >= start) & (pos < start + length)).long()
        loss_mask, adv_mask = select_masks(batch["action_mask"], batch["response_mask"], t.loss_mask, t.advantage_mask)
        batch["loss_mask"], batch["adv_mask"] = loss_mask, adv_mask
        process = [(b, int(batch["response_start"][b]) + tok, v) for b, s in enumerate(scores) for tok, v in s.process]
        rewards = build_token_rewards([s.reward for s in scores], batch["action_mask"], process or None)

        actor = forward_module(self.actor, self.dist)
        actor.eval()
        if t.old_logprobs == "recompute":
            old = self._row_forward(lambda i, a, m: actor(i, a, m)[0], batch, "loss_mask")
        else:
            old = torch.where(as_bool(loss_mask), batch["logprobs"], torch.zeros(()))
        batch["old_logp"] = old
        stats: dict[str, float] = {}
        if self.ref is not None:
            batch["ref_logp"] = self._row_forward(lambda i, a, m: self.ref(i, a, m)[0], batch, "loss_mask")
            kl_tok = kl_estimate(old, batch["ref_logp"], t.kl.estimator, loss_mask)
            stats["train/kl_ref"] = float(masked_mean(kl_tok, loss_mask))
            if t.kl.mode == "reward":
                rewards, kl_stats = apply_kl_penalty(rewards, old, batch["ref_logp"], loss_mask, t.kl.coef, t.kl.estimator)
                stats["train/kl_penalty"] = float(kl_stats["kl"]) * t.kl.coef
        values = None
        if self.critic is not None:
            critic = forward_module(self.critic, self.dist)
            critic.eval()
            values = self._row_forward(lambda i, a, m: critic(i, a, m), batch, "adv_mask")
            values = torch.where(as_bool(adv_mask), values, torch.zeros(()))
            batch["values"] = values
        index = [b // t.group_size for b in range(B)]
        adv, ret = compute_advantage(t.estimator, rewards, adv_mask, values=values, index=index, gamma=t.gamma,
                                     lam=t.lam, whiten=t.whiten, norm_by_std=t.norm_by_std)
        batch["token_rewards"], batch["advantages"], batch["returns"] = rewards, adv, ret
        stats["train/adv_abs_mean"] = float(masked_mean(adv.abs(), adv_mask))
        stats["train/token_reward_sum"] = float(rewards.sum() / B)
        batch["stats"] = stats
        return batch

    # ------------------------------------------------------------------ 6: update
    def _build_schedulers(self) -> None:
        """The lr schedulers (:mod:`agentr1.rl.schedule`) of the actor and the critic at their
        optimizer-step counts, over ``steps x ppo_epochs x mini_batches`` optimizer steps, with base
        lr ``lr * lr_scale`` (read at every step). Rebuilt whenever the counts or ``lr_scale`` are
        set from outside the update (a loaded checkpoint, a roll-back)."""
        t = self.tcfg
        total = max(t.steps * t.ppo_epochs * t.mini_batches, 1)

        def build(opt, lr: float, start: int):
            fn = lr_lambda(lambda: lr * self.lr_scale, t.warmup_steps, total, t.lr_schedule, t.min_lr_ratio)
            return scheduler(opt, fn, start=start)

        self.scheduler = build(self.opt, t.lr, self.opt_steps)
        self.critic_scheduler = None if self.critic_opt is None else build(self.critic_opt, t.critic.lr, self.critic_opt_steps)

    def _clip(self, module) -> float:
        max_norm = self.tcfg.grad_clip if self.tcfg.grad_clip > 0 else float("inf")
        if hasattr(module, "clip_grad_norm_"):  # FSDP: norm over the shards
            return float(module.clip_grad_norm_(max_norm))
        return float(torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm))

    def _denom(self, mask: torch.Tensor) -> float:
        m = as_bool(mask)
        return float(m.sum()) if self.tcfg.agg_mode == "token-mean" else float(m.any(-1).sum())

    def update(self, batch: dict[str, Any], step: int) -> dict[str, float]:
        """``ppo_epochs`` x ``mini_batches`` optimizer steps on a prepared batch; raises
        :class:`~agentr1.rl.collapse.Collapse` on a non-finite loss or gradient (no optimizer step
        is taken then)."""
        update_policy = step > self.tcfg.critic.warmup_steps or self.critic is None
        acc = StepStats()
        n_steps = 0
        self.actor.train()
        if self.critic is not None:
            self.critic.train()
        for epoch, k, rows in self._mini_batches(batch["input_ids"].shape[0], step):
            lr = self.opt.param_groups[0]["lr"]
            finite = self._accumulate(batch, rows, update_policy, acc)
            self._optimizer_step(finite, update_policy, acc, (step, epoch, k))
            acc.mean("lr", lr, 1.0 / self.dist.world_size)
            n_steps += 1
        self.actor.eval()
        out = {f"train/{k}": v for k, v in acc.result(self.dist, n_steps).items()}
        out["train/policy_updated"] = float(update_policy)
        return out

    def _mini_batches(self, batch_size: int, step: int) -> Iterator[tuple[int, int, list[int]]]:
        """``(epoch, k, rows)`` of every optimizer step: each epoch a permutation of the rows keyed
        by ``(seed, step, 3, epoch)``, cut into ``mini_batches`` consecutive slices."""
        t = self.tcfg
        M = batch_size // t.mini_batches
        for epoch in range(t.ppo_epochs):
            gen = torch.Generator().manual_seed(_key(self.seed, step, 3, epoch))
            perm = torch.randperm(batch_size, generator=gen).tolist()
            for k in range(t.mini_batches):
                yield epoch, k, perm[k * M : (k + 1) * M]

    def _micro_batches(self, batch: dict[str, Any], rows: list[int]) -> Iterator[tuple[bool, dict[str, torch.Tensor]]]:
        """``(last, mb)`` for this rank's share of ``rows`` in micro-batches of
        ``micro_batch_size``: the tensors a loss needs, cut to the longest row, on the device."""
        mbs = self.tcfg.micro_batch_size
        local = self.dist.shard(rows)
        micro = [local[i : i + mbs] for i in range(0, len(local), mbs)]
        keys = (("input_ids", "attention_mask", "loss_mask", "adv_mask", "old_logp", "advantages", "returns")
                + (("ref_logp",) if "ref_logp" in batch else ()) + (("values",) if "values" in batch else ()))
        for mi, idx in enumerate(micro):
            width = int(batch["attention_mask"][idx].sum(-1).max())
            yield mi == len(micro) - 1, {key: batch[key][idx, :width].to(self.dist.device) for key in keys}

    def _accumulate(self, batch: dict[str, Any], rows: list[int], update_policy: bool, acc: StepStats) -> torch.Tensor:
        """Backward passes of the policy loss (when ``update_policy``) and the value loss over the
        mini-batch ``rows``, each scaled by the world size (DDP averages the gradients over ranks,
        the losses are already normalised by the global mini-batch denominator); gradients are
        synced on the last micro-batch only. Returns this rank's 0/1 flag "every loss finite"."""
        d = self.dist
        pol_denom, val_denom = self._denom(batch["loss_mask"][rows]), self._denom(batch["adv_mask"][rows])
        norm_const = float(self.rollout_cfg.max_total_tokens)
        finite = torch.ones(1)
        for last, mb in self._micro_batches(batch, rows):
            n_tok = float(as_bool(mb["loss_mask"]).sum())
            if update_policy:
                with no_sync(self.actor, not last):
                    loss, st = self._policy_loss(mb, pol_denom, norm_const)
                    finite *= float(torch.isfinite(loss.detach()))
                    (loss * d.world_size).backward()
                for name, v in st.items():
                    if name in ADDITIVE_STATS:  # pieces of the global mini-batch loss: they add up
                        acc.add(name, v)
                    else:  # per-micro-batch means: weight by its loss-mask tokens
                        acc.mean(name, v, n_tok)
            if self.critic is not None:
                with no_sync(self.critic, not last):
                    vloss, vst = self._value_loss(mb, val_denom, norm_const)
                    finite *= float(torch.isfinite(vloss.detach()))
                    (vloss * d.world_size).backward()
                acc.add("vf_loss", float(vloss.detach()))
                n_adv = float(as_bool(mb["adv_mask"]).sum())
                for name in ("vf_clipfrac", "vpred_mean", "vf_explained_var"):
                    acc.mean(name, float(vst[name]), n_adv)
        return finite

    def _optimizer_step(self, finite: torch.Tensor, update_policy: bool, acc: StepStats, at: tuple[int, int, int]) -> None:
        """Clip the gradients and step the optimizers and their lr schedulers (the actor's only
        when ``update_policy``); :class:`Collapse` (gradients dropped, nothing stepped) when a
        rank's loss or a gradient norm is not finite. ``at`` = ``(step, epoch, mini_batch)``."""
        d = self.dist
        finite = d.all_reduce_sum(finite)
        norms = {}
        if update_policy:
            norms["grad_norm"] = self._clip(self.actor)
        if self.critic is not None:
            norms["critic_grad_norm"] = self._clip(self.critic)
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

    def _policy_loss(self, mb: dict, denom: float, norm_const: float) -> tuple[torch.Tensor, dict[str, float]]:
        t = self.tcfg
        lm = mb["loss_mask"]
        logp, ent = self.actor(mb["input_ids"], mb["attention_mask"], lm, with_entropy=True)
        agg = dict(agg_mode=t.agg_mode, denom=denom, norm_const=norm_const)
        pg, st = compute_policy_loss(t.policy_loss, logp, mb["old_logp"], mb["advantages"], lm, clip_low=t.clip_low,
                                     clip_high=t.clip_high, dual_clip=t.dual_clip, **agg)
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

    def _value_loss(self, mb: dict, denom: float, norm_const: float):
        t = self.tcfg
        v = self.critic(mb["input_ids"], mb["attention_mask"], mb["adv_mask"])
        return value_loss(v, mb["values"], mb["returns"], mb["adv_mask"], clip_range=t.critic.value_clip,
                          agg_mode=t.agg_mode, denom=denom, norm_const=norm_const)

    # ------------------------------------------------------------------ 7: dev evaluation
    @torch.no_grad()
    def evaluate_dev(self, step: int) -> dict[str, float]:
        """Greedy episodes on the first ``dev.examples`` dev questions (rank 0; broadcast)."""
        out: dict[str, float] = {}
        if self.dist.is_main and self.dev_questions:
            qs = self.dev_questions[: self.tcfg.dev.examples]
            greedy = self.rollout_cfg.model_copy(update={"temperature": 0.0, "top_p": 1.0})
            self.policy.eval()
            trajs = self._engine(greedy).rollout(qs, 1, seed=_key(self.seed, 7))
            scores = [score_episode(t, self.reward_cfg) for t in trajs]
            m = rollout_metrics(trajs, scores)
            out = {"dev/em": m["rollout/em"], "dev/reward": m["rollout/reward"],
                   "dev/format_rate": m["rollout/format_rate"], "dev/tool_calls": m["rollout/tool_calls"]}
        return self.dist.broadcast_object(out)

    # ------------------------------------------------------------------ 8: collapse guard
    def _on_collapse(self, step: int, reason: str) -> None:
        """Record the collapse and respond (:func:`agentr1.rl.collapse.respond`); a roll-back
        restores the last checkpoint but keeps the events and the roll-back count, and scales the lr."""
        c = self.tcfg.collapse
        self.events.append({"step": step, "reason": reason, "action": c.action})
        if collapse.respond(c, step, reason, self.rollbacks) == "skip":
            return
        rollbacks, scale, events = self.rollbacks + 1, self.lr_scale * c.lr_factor, list(self.events)
        self.restore()
        self.rollbacks, self.lr_scale, self.events = rollbacks, scale, events
        self._build_schedulers()
        log.warning("collapse guard: %s at step %d -> rolled back to step %d, lr x%.3g", reason, step, self.step, scale)

    # ------------------------------------------------------------------ 9: checkpoints
    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tensors: dict[str, Any] = {
            "policy": {k: v.detach().cpu().clone() for k, v in unwrap(self.actor).model.state_dict().items()},
            "optimizer": self.opt.state_dict(),
            "rng": {"torch": torch.get_rng_state()},
        }
        if self.critic is not None:
            tensors["critic"] = {k: v.detach().cpu().clone() for k, v in unwrap(self.critic).state_dict().items()}
            tensors["critic_optimizer"] = self.critic_opt.state_dict()
        meta = {
            "step": self.step, "opt_steps": self.opt_steps, "critic_opt_steps": self.critic_opt_steps,
            "lr_scale": self.lr_scale, "rollbacks": self.rollbacks, "history": self.history,
            "guard_rewards": self.guard_rewards, "events": self.events,
            "python_random": _jsonable(random.getstate()),
            "params": self.params,
        }
        return tensors, meta

    def load_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        missing = {"policy", "optimizer"} | ({"critic", "critic_optimizer"} if self.critic is not None else set())
        if missing - set(tensors):
            raise StageError(f"checkpoint lacks {sorted(missing - set(tensors))} (a different estimator/run?)")
        unwrap(self.actor).model.load_state_dict(tensors["policy"])
        self.opt.load_state_dict(tensors["optimizer"])
        if self.critic is not None:
            unwrap(self.critic).load_state_dict(tensors["critic"])
            self.critic_opt.load_state_dict(tensors["critic_optimizer"])
        torch.set_rng_state(tensors["rng"]["torch"])
        random.setstate(_tupled(meta["python_random"]))
        self.step, self.opt_steps, self.critic_opt_steps = meta["step"], meta["opt_steps"], meta["critic_opt_steps"]
        self.lr_scale, self.rollbacks = meta["lr_scale"], meta["rollbacks"]
        self._build_schedulers()
        self.history = [dict(h) for h in meta["history"]]
        self.guard_rewards, self.events = list(meta["guard_rewards"]), list(meta["events"])

    def save(self) -> None:
        """Checkpoint the current state (rank 0 writes ``state_dir``; in memory without one)."""
        if self.dist.active and self.dist.strategy == "fsdp":
            raise StageError("resumable checkpoints and roll-backs are not implemented under FSDP (sharded optimizer "
                             "state): set train.checkpoint.every: 0 and train.collapse.action: skip or stop, or use ddp")
        tensors, meta = self.state()
        if self.state_dir is None:
            self._memory_state = (copy.deepcopy(tensors), copy.deepcopy(meta))
        elif self.dist.is_main:
            ckpt.save_state(self.state_dir, tensors, meta)
        self.dist.barrier()

    def restore(self) -> None:
        """Load the last checkpoint (from ``state_dir``, or the in-memory one)."""
        if self.state_dir is None:
            if self._memory_state is None:
                raise StageError("no checkpoint to roll back to")
            tensors, meta = copy.deepcopy(self._memory_state)
        else:
            tensors, meta = ckpt.load_state(self.state_dir)
        self.load_state(tensors, meta)

    def resume(self) -> None:
        """Continue the state in ``state_dir`` (``agentr1 train --resume``): like :meth:`restore`,
        but first :class:`StageError` when it was trained with other params (each key named) or is
        already past ``train.steps`` (:func:`agentr1.rl.checkpoint.check_resume`)."""
        if self.state_dir is None:
            raise StageError("resume needs a state_dir")
        tensors, meta = ckpt.load_state(self.state_dir)
        ckpt.check_resume(self.state_dir, meta, self.params, self.tcfg.steps)
        self.load_state(tensors, meta)

    # ------------------------------------------------------------------ the loop
    def train_step(self, step: int) -> dict[str, float] | None:
        """Steps 1-8 of the module docstring for step ``step``; returns its metrics, or ``None``
        when the collapse guard skipped it or rolled back."""
        t0 = time.perf_counter()
        trajs, scores, metrics = self.collect_batch(step)
        t1 = time.perf_counter()
        self._trace(trajs, step)
        try:
            drop = collapse.reward_drop(metrics["rollout/reward"], self.guard_rewards, self.tcfg.collapse)
            if drop is not None:
                raise Collapse(drop)
            batch = self.prepare(trajs, scores)
            t2 = time.perf_counter()
            metrics.update(batch["stats"])
            metrics.update(self.update(batch, step))
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

    def _trace(self, trajs: Sequence[Trajectory], step: int) -> None:
        """A sample of this step's episodes as traces (rank 0, every ``train.trace_every`` steps,
        when the logger also logs trajectories: ``MLflowLogger`` does)."""
        every = self.tcfg.trace_every
        log_trajs = getattr(self.logger, "log_trajectories", None)
        if every and step % every == 0 and log_trajs is not None and self.dist.is_main:
            log_trajs(trajs, step=step, split="train")

    def _record(self, step: int, metrics: dict[str, float]) -> None:
        self.history.append({"step": step, **metrics})
        if self.logger is not None and self.dist.is_main:
            self.logger.log(metrics, step=step)

    def train(self, until: int | None = None) -> list[dict[str, float]]:
        """Run steps ``self.step + 1 .. until`` (default ``train.steps``); checkpoints every
        ``checkpoint.every`` steps and, with ``collapse.action: rollback``, at the start (the
        first roll-back target). Returns the
        history of per-step metrics (including those restored from a resumed checkpoint)."""
        end = self.tcfg.steps if until is None else min(until, self.tcfg.steps)
        if self.step == 0 and not self.history:
            if self.tcfg.dev.every:
                m = self.evaluate_dev(0)
                self._record(0, m)
            if self.tcfg.collapse.action == "rollback":
                self.save()  # the first roll-back target
        every = self.tcfg.checkpoint.every
        while self.step < end:
            step = self.step + 1
            metrics = self.train_step(step)
            if metrics is not None and every and step % every == 0:
                self.save()
            if metrics is not None and self.dist.is_main:
                log.info("step %d/%d reward %.3f em %.3f | rollout %.1fs update %.1fs", step, self.tcfg.steps,
                         metrics["rollout/reward"], metrics["rollout/em"], metrics["time/rollout_s"],
                         metrics["time/update_s"])
            if self.on_step is not None and metrics is not None:
                self.on_step(step, metrics)
        return self.history


def _jsonable(x):
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x


def _tupled(x):
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x


def deterministic_metrics(history: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """The history without wall-clock entries (``time/*``): what two identical runs must share."""
    return [{k: v for k, v in h.items() if not k.startswith(TIME_PREFIX)} for h in history]
