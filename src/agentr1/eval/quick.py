"""A small, reusable evaluation: greedy rollouts of a policy in the ToolEnv -> answer metrics.

Per episode (answers compared with ``agentr1.env.rewards`` metrics; a missing answer scores 0):

* ``em`` / ``subem`` / ``f1``  - exact match, substring EM, token F1 against the gold answers;
* ``format_ok``               - every call attempt valid and a well-formed final answer
                                (``episode_format``: format score f == 1);
* ``reward``                  - the outcome reward of ``cfg.reward`` (paper Eq. 6 reading);
* ``tool_calls``              - call attempts (valid or not); ``searches_found_support`` - valid
                                searches that returned a supporting passage;
* ``turns``                   - policy turns.

:func:`summarize` averages them over episodes (plus ``answered``: share of episodes with an
answer, and the count of each end reason). The full evaluation stage (all splits, baselines,
reports) builds on these functions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agentr1.env.rewards import EpisodeScore, score_episode
from agentr1.eval.setup import EvalSetup
from agentr1.rollout.engine import RolloutEngine
from agentr1.rollout.trajectory import Trajectory


def greedy(rollout_cfg):
    """A copy of ``rollout_cfg`` with greedy decoding (temperature 0, top-p 1)."""
    return rollout_cfg.model_copy(update={"temperature": 0.0, "top_p": 1.0})


def score_row(score: EpisodeScore) -> dict[str, float]:
    """em / subem / f1, ``format_ok``, ``reward`` and ``tool_calls`` of a scored episode, as floats
    (the leading columns of every per-episode row: these and the naive-RAG baseline's)."""
    return {
        "em": score.em,
        "subem": score.subem,
        "f1": score.f1,
        "format_ok": float(score.format_ok),
        "reward": score.reward,
        "tool_calls": float(score.tool_calls),
    }


def episode_metrics(traj: Trajectory, reward_cfg) -> dict[str, Any]:
    """The per-episode metrics of the module docstring for one trajectory."""
    score = score_episode(traj, reward_cfg)
    return {
        **score_row(score),
        "searches_found_support": float(score.searches_found_support),
        "turns": float(traj.num_turns),
        "answered": float(score.answered),
        "reason": traj.reason,
    }


def calls_by_tool(traj: Trajectory, tools: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per tool in ``tools``: ``calls`` = the episode's call attempts naming it (valid or not) and
    ``ok`` = those that executed successfully (``CallOutcome.success``). Attempts naming no
    known tool count in ``tool_calls`` only."""
    out = {t: {"calls": 0, "ok": 0} for t in tools}
    for turn in traj.outcomes:
        for o in turn:
            if o.name in out:
                out[o.name]["calls"] += 1
                out[o.name]["ok"] += int(bool(o.success))
    return out


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Means of the numeric per-episode metrics, ``n`` and ``reasons`` (count per end reason)."""
    out: dict[str, Any] = {"n": len(rows)}
    if not rows:
        return out
    for key in rows[0]:
        if key != "reason":
            out[key] = sum(float(r[key]) for r in rows) / len(rows)
    out["reasons"] = dict(sorted(Counter(str(r.get("reason", "")) for r in rows).items()))
    return out


def evaluate_tool_policy(
    setup: EvalSetup, questions: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Greedy rollouts of ``setup.backend`` (one per question, seeded from ``setup.seed``) in
    ``setup.env``; returns the :func:`summarize` of the episodes (plus ``seconds``) and the
    trajectories."""
    t0 = time.perf_counter()
    engine = RolloutEngine(setup.backend, setup.env, setup.tokenizer, greedy(setup.rollout))
    trajs = engine.rollout([dict(q) for q in questions], group_size=1, seed=setup.seed)
    summary = summarize([episode_metrics(t, setup.reward) for t in trajs])
    summary["seconds"] = time.perf_counter() - t0
    return summary, trajs


def sample_policy(setup: EvalSetup, questions: Sequence[Mapping[str, Any]], k: int) -> list[list[float]]:
    """``k`` rollouts per question at ``setup.rollout``'s temperature and top-p (the RL sampling
    setting), seeded from ``setup.seed``; per question the EM of each sample. ``pass@k`` of a
    question is whether any sample is right (with ``n = k`` samples the unbiased estimator is
    exactly that)."""
    engine = RolloutEngine(setup.backend, setup.env, setup.tokenizer, setup.rollout)
    trajs = engine.rollout([dict(q) for q in questions], group_size=k, seed=setup.seed)
    ems = [score_episode(t, setup.reward).em for t in trajs]
    return [ems[i : i + k] for i in range(0, len(ems), k)]


def sampling_summary(questions: Sequence[Mapping[str, Any]], ems: Sequence[Sequence[float]]) -> dict[str, Any]:
    """``sampled_em`` (mean EM over all samples), ``pass_at_k`` (share of questions with a right
    sample) and ``n``, overall and per question ``type``."""

    def stats(rows: list[Sequence[float]]) -> dict[str, Any]:
        return {
            "n": len(rows),
            "sampled_em": sum(sum(r) / len(r) for r in rows) / len(rows),
            "pass_at_k": sum(max(r) >= 1 for r in rows) / len(rows),
        }

    by_type: dict[str, list[Sequence[float]]] = {}
    for q, r in zip(questions, ems):
        by_type.setdefault(str(q.get("type", "")), []).append(r)
    return {**stats(list(ems)), "types": {t: stats(rows) for t, rows in sorted(by_type.items())}}
