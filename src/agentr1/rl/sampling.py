"""Steps 1-2 of a trainer step and its dev evaluation: questions, rollouts, dynamic sampling.

* questions: ``batch_questions`` train questions drawn by a generator seeded with
  ``seed_key(seed, step, 1[, round])``; each rank rolls out its contiguous share, each question
  ``group_size`` times, with rollout seed ``seed_key(seed, step, 2, rank[, round])``, and the
  trajectories are all-gathered (global, question-major, groups contiguous);
* rollout backend: ``rollout.backend: hf`` samples with the trainer's own weights;
  ``vllm`` with the rank's engine, the current weights loaded into it before every rollout
  (:class:`agentr1.rl.weight_sync.WeightSync`; under FSDP inside ``full_params``);
* dynamic sampling (DAPO, ``train.filter_groups``; by default for group-baseline estimators
  only): groups whose rewards are all equal (no learning signal for a group baseline,
  :func:`group_signal`) are replaced by informative groups
  of up to ``max_rounds`` refill rounds; ``rollout/*`` metrics are those of the first round;
* dev evaluation: greedy episodes (``temperature 0``, ``top_p 1``, seed ``seed_key(seed, 7)``) on
  the first ``dev.examples`` dev questions, on rank 0, broadcast.

:class:`Sampling` is the part of :class:`agentr1.rl.trainer.Trainer` that does this (it reads
the trainer's ``tcfg``, ``rollout_cfg``, ``reward_cfg``, ``dist``, ``seed``, ``policy``, ``actor``,
``env``, ``tokenizer``, questions and ``weight_sync``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentr1.env.rewards import EpisodeScore, score_episode
from agentr1.errors import StageError
from agentr1.rl.distributed import full_params
from agentr1.rollout import RolloutEngine, Trajectory, make_backend


@dataclass
class Episodes:
    """Where the trainer's episodes come from: the environment and the train and dev questions
    (none needed for :meth:`agentr1.rl.trainer.Trainer.update` on given trajectories)."""

    env: Any = None
    train: Sequence[dict] = ()
    dev: Sequence[dict] = ()
    fresh: Any = None  # train.questions: fresh - an agentr1.rl.sources.FreshWorlds (its at(step) replaces env/train)


def seed_key(*parts: int) -> int:
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


def rollout_metrics(
    trajs: Sequence[Trajectory], scores: Sequence[EpisodeScore], group_size: int = 1
) -> dict[str, float]:
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


class Sampling:
    """Collecting a step's batch and the dev evaluation (module docstring); a mixin of the trainer."""

    def step_pool(self, step: int) -> tuple[Any, Sequence[dict]]:
        """The environment and the questions step ``step`` draws from: the train split and the
        dataset's environment, or the step's fresh world (``train.questions: fresh``)."""
        if self.fresh is not None:
            return self.fresh.at(step)
        return self.env, self.train_questions

    def sample_questions(self, step: int, round_: int = 0) -> list[dict]:
        """``batch_questions`` questions of :meth:`step_pool` for ``step`` (round ``round_`` > 0: a
        refill of dynamic sampling, its own draw)."""
        pool = self.step_pool(step)[1]
        n = len(pool)
        if n < self.tcfg.batch_questions:
            raise StageError(f"{n} train questions < train.batch_questions ({self.tcfg.batch_questions})")
        gen = torch.Generator().manual_seed(seed_key(self.seed, step, 1, *([round_] if round_ else [])))
        return [pool[i] for i in torch.randperm(n, generator=gen)[: self.tcfg.batch_questions].tolist()]

    def _engine(self, rollout_cfg, env=None) -> RolloutEngine:
        env = self.env if env is None else env
        if env is None:
            raise ValueError("the trainer needs env= to roll out")
        if rollout_cfg.backend == "vllm":  # under FSDP inside full_params(self.actor), as collect does
            backend = self.weight_sync.synced(rollout_cfg, self.policy)
        else:
            backend = make_backend(rollout_cfg, model=self.policy, tokenizer=self.tokenizer)
        return RolloutEngine(backend, env, self.tokenizer, rollout_cfg)

    @torch.no_grad()
    def collect(self, step: int, round_: int = 0) -> list[Trajectory]:
        """This step's trajectories (global, question-major, groups contiguous); ``round_`` > 0:
        a refill round of dynamic sampling."""
        local_q = self.dist.shard(self.sample_questions(step, round_))
        self.policy.eval()
        seed = seed_key(self.seed, step, 2, self.dist.rank, *([round_] if round_ else []))
        with full_params(self.actor):
            engine = self._engine(self.rollout_cfg, self.step_pool(step)[0])
            local = engine.rollout(local_q, self.tcfg.group_size, seed=seed)
        return self.dist.all_gather_objects(local)

    def collect_batch(self, step: int) -> tuple[list[Trajectory], list[EpisodeScore], dict[str, float]]:
        """This step's training batch, its scores and the rollout metrics of its first round
        (so ``rollout/*`` means the same with or without dynamic sampling). With
        dynamic sampling on for this run (``TrainConfig.filters_groups``), groups without a learning signal (:func:`group_signal`) are
        replaced by informative groups of up to ``max_rounds`` refill rounds
        (:class:`agentr1.config.FilterGroupsConfig`); ``rollout/filter_rounds`` and
        ``rollout/batch_informative_groups`` say what that took and gave."""
        g = self.tcfg.group_size
        trajs = self.collect(step)
        scores = [score_episode(tr, self.reward_cfg) for tr in trajs]
        metrics = rollout_metrics(trajs, scores, g)
        fg = self.tcfg.filter_groups
        if not self.tcfg.filters_groups:
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

    @torch.no_grad()
    def evaluate_dev(self, step: int) -> dict[str, float]:
        """Greedy episodes on the first ``dev.examples`` dev questions (rank 0; broadcast)."""
        out: dict[str, float] = {}
        if self.dist.is_main and self.dev_questions:
            qs = self.dev_questions[: self.tcfg.dev.examples]
            greedy = self.rollout_cfg.model_copy(update={"temperature": 0.0, "top_p": 1.0})
            self.policy.eval()
            trajs = self._engine(greedy).rollout(qs, 1, seed=seed_key(self.seed, 7))
            scores = [score_episode(t, self.reward_cfg) for t in trajs]
            m = rollout_metrics(trajs, scores)
            out = {
                "dev/em": m["rollout/em"],
                "dev/reward": m["rollout/reward"],
                "dev/format_rate": m["rollout/format_rate"],
                "dev/tool_calls": m["rollout/tool_calls"],
            }
        return self.dist.broadcast_object(out)

    def _trace(self, trajs: Sequence[Trajectory], step: int) -> None:
        """A sample of this step's episodes as traces (rank 0, every ``train.trace_every`` steps,
        when the logger logs trajectories: ``MLflowLogger`` does)."""
        every, log_trajs = self.tcfg.trace_every, getattr(self.logger, "log_trajectories", None)
        if every and step % every == 0 and log_trajs is not None and self.dist.is_main:
            log_trajs(trajs, step=step, split="train")
