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

from agentr1 import registry
from agentr1.env.base import CallOutcome
from agentr1.env.rewards import episode_format, outcome_reward
from agentr1.rollout.engine import RolloutEngine
from agentr1.rollout.trajectory import Trajectory

METRICS = ("em", "subem", "f1")


def greedy(rollout_cfg):
    """A copy of ``rollout_cfg`` with greedy decoding (temperature 0, top-p 1)."""
    return rollout_cfg.model_copy(update={"temperature": 0.0, "top_p": 1.0})


def answer_scores(answer: str | None, golds: Sequence[str]) -> dict[str, float]:
    """em / subem / f1 of ``answer`` (0 for all when there is none)."""
    if answer is None:
        return {m: 0.0 for m in METRICS}
    return {m: float(registry.METRICS.get(m)(answer, list(golds))) for m in METRICS}


def outcomes_of(traj: Trajectory) -> list[list[CallOutcome]]:
    """The trajectory's per-turn call outcomes as :class:`CallOutcome` objects."""
    return [[CallOutcome(**o) if isinstance(o, Mapping) else o for o in turn] for turn in traj.outcomes]


def episode_metrics(traj: Trajectory, reward_cfg) -> dict[str, Any]:
    """The per-episode metrics of the module docstring for one trajectory."""
    outcomes = outcomes_of(traj)
    fmt = episode_format(outcomes, traj.answer is not None)
    flat = [o for turn in outcomes for o in turn]
    row = answer_scores(traj.answer, traj.golds)
    row.update(
        format_ok=float(fmt.ok),
        reward=outcome_reward(traj.answer, traj.golds, fmt.score, reward_cfg),
        tool_calls=float(len(flat)),
        searches_found_support=float(sum(o.valid and o.found_support for o in flat)),
        turns=float(traj.num_turns),
        answered=float(traj.answer is not None),
        reason=traj.reason,
    )
    return row


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
    backend,
    tokenizer,
    env,
    rollout_cfg,
    questions: Sequence[Mapping[str, Any]],
    reward_cfg,
    seed: int = 0,
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Greedy rollouts of ``backend`` (one per question) in ``env``; returns the
    :func:`summarize` of the episodes (plus ``seconds``) and the trajectories."""
    t0 = time.perf_counter()
    engine = RolloutEngine(backend, env, tokenizer, greedy(rollout_cfg))
    trajs = engine.rollout([dict(q) for q in questions], group_size=1, seed=seed)
    summary = summarize([episode_metrics(t, reward_cfg) for t in trajs])
    summary["seconds"] = time.perf_counter() - t0
    return summary, trajs
