"""Trajectories as MLflow traces and as a logged table.

One trace per sampled episode::

    episode <qid>            AGENT      inputs {question, qid}  outputs {answer, golds, em, f1, reason}
    ├── policy turn 0        LLM        inputs {context}        outputs {text}
    ├── search               RETRIEVER  inputs {calls}          outputs {observation}
    ├── policy turn 1        LLM        ...
    └── ...

``context`` of turn k is exactly the text the policy continued: the prompt, then every earlier
turn followed by its observation. A turn's tool step is a RETRIEVER span when every call in it
is a valid ``search`` call, else a TOOL span (named after the tool(s), ``invalid`` when none
parsed). The AGENT span's outputs hold the answer next to the gold answers, its EM and F1; its
attributes (and the trace's tags, searchable with ``filter_string="tags.\\`agentr1.qid\\` =
'q1'"``) carry the question id, outcome reward, EM, F1, split, step and the caller's ``tags``
(the stage run's name ``agentr1.run_name`` and its policy ``agentr1.policy``, so the
experiment's Traces view filters by policy). Traces are attached to the run given
(``mlflow.sourceRun``).

Timings: the episodes are *replayed* from finished trajectories (a rollout records no times), so
span times are the logging time, not the generation's; every span says so with the attribute
``agentr1.replayed = True``.

Reconstructed runs (``agentr1 track``): an evaluation's ``episodes.jsonl`` keeps each episode's
scores, not its turns, so :func:`log_episode_traces` writes the same sample of episodes with the
same root span, attributes and tags, without the LLM/tool children.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import mlflow
from mlflow.entities import SpanType

from agentr1.env.base import CallOutcome
from agentr1.env.rewards import answer_scores
from agentr1.rollout.trajectory import Trajectory

REPLAYED = "agentr1.replayed"  # on every span: its times are the logging time (module docstring)


def sample_indices(n_total: int, sample_n: int, seed: int = 0) -> list[int]:
    """``sample_n`` distinct indices of ``range(n_total)`` (all when fewer), sorted; the same
    for the same seed, so the same episodes are traced in every run of an evaluation."""
    if sample_n >= n_total:
        return list(range(n_total))
    return sorted(random.Random(seed).sample(range(n_total), max(sample_n, 0)))


def episode_em(t: Trajectory) -> float:
    """Exact match of the trajectory's final answer (0 when it gave none; the ``em`` of
    :func:`agentr1.env.rewards.score_episode`, which needs no reward config)."""
    return answer_scores(t.answer, t.golds)["em"]


def _call_segments(text: str, outcomes: Sequence[CallOutcome]) -> list[str]:
    """The turn text cut at each call's end (``CallOutcome.end``): the text of every call."""
    segments, start = [], 0
    for o in outcomes:
        end = int(o.end)
        segments.append(text[start:end].strip())
        start = end
    return segments


def _tool_span_kind(outcomes: Sequence[CallOutcome]) -> tuple[str, str]:
    names = sorted({o.name or "invalid" for o in outcomes})
    all_search = all(o.valid and o.name == "search" for o in outcomes)
    return ("+".join(names), SpanType.RETRIEVER if all_search else SpanType.TOOL)


def _episode_meta(
    qid: str,
    golds: Sequence[str],
    em: float,
    f1: float,
    turns: int,
    reason: str,
    sample_index: int,
    reward: float | None,
    tags: dict[str, str] | None,
    split: str | None,
    step: int | None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The root span's attributes and the trace's tags of one episode (module docstring)."""
    attrs: dict[str, Any] = {
        "agentr1.qid": qid,
        "agentr1.em": em,
        "agentr1.turns": turns,
        "agentr1.reason": reason,
        "agentr1.sample_index": sample_index,
        "agentr1.f1": f1,
        "agentr1.golds": list(golds),
        **(tags or {}),
    }
    if reward is not None:
        attrs["agentr1.reward"] = float(reward)
    trace_tags = {**(tags or {}), "agentr1.qid": qid, "agentr1.em": str(em)}
    if split is not None:
        attrs["agentr1.split"] = trace_tags["agentr1.split"] = split
    if step is not None:
        attrs["agentr1.step"] = step
        trace_tags["agentr1.step"] = str(step)
    return attrs, trace_tags


@contextlib.contextmanager
def _episode_span(
    qid: str,
    question: str,
    answer: str | None,
    golds: Sequence[str],
    reason: str,
    run_id: str | None,
    attrs: dict[str, Any],
    tags: dict[str, str],
) -> Iterator[Any]:
    """The AGENT root span of one episode's trace (the turns go inside the block); its outputs
    and the trace's tags are set when the block ends."""
    with mlflow.start_span(f"episode {qid}", span_type=SpanType.AGENT, run_id=run_id) as root:
        root.set_inputs({"qid": qid, "question": question})
        root.set_attributes({**attrs, REPLAYED: True})
        yield root
        root.set_outputs(
            {
                "answer": answer,
                "golds": list(golds),
                "em": attrs["agentr1.em"],
                "f1": attrs["agentr1.f1"],
                "reason": reason,
            }
        )
        mlflow.update_current_trace(tags=tags)


def _trace_episode(t: Trajectory, run_id: str | None, tags: dict[str, str], attrs: dict[str, Any]) -> str:
    """Write one episode as a trace; returns its trace id."""
    with _episode_span(t.qid, t.question, t.answer, t.golds, t.reason, run_id, attrs, tags) as root:
        context = t.prompt_text
        for k, turn in enumerate(t.turn_texts):
            with mlflow.start_span(f"policy turn {k}", span_type=SpanType.LLM) as llm:
                s, e = t.turn_spans[k] if k < len(t.turn_spans) else (0, 0)
                llm.set_inputs({"context": context})
                llm.set_outputs({"text": turn})
                llm.set_attributes({"turn": k, "tokens": e - s, REPLAYED: True})
            outcomes = t.outcomes[k] if k < len(t.outcomes) else []
            observation = t.observations[k] if k < len(t.observations) else ""
            if outcomes:
                name, kind = _tool_span_kind(outcomes)
                with mlflow.start_span(name, span_type=kind) as tool:
                    tool.set_inputs({"calls": _call_segments(turn, outcomes)})
                    tool.set_outputs({"observation": observation})
                    tool.set_attributes(
                        {
                            "turn": k,
                            "valid": [bool(o.valid) for o in outcomes],
                            "success": [bool(o.success) for o in outcomes],
                            "found_support": [bool(o.found_support) for o in outcomes],
                            REPLAYED: True,
                        }
                    )
            context += turn + observation
    return root.trace_id


def log_trajectory_traces(
    trajectories: Sequence[Trajectory],
    sample_n: int,
    *,
    run_id: str | None = None,
    seed: int = 0,
    split: str | None = None,
    step: int | None = None,
    tags: dict[str, str] | None = None,
) -> list[str]:
    """Log a seeded sample of ``sample_n`` episodes as traces (see the module docstring) into
    ``run_id`` (default: the active run). ``split``/``step`` go into attributes and tags so the
    traces of one evaluation (or training step) are found together; ``tags`` (e.g.
    ``agentr1.policy``) go on every trace and its root span. Returns the trace ids, after
    flushing MLflow's asynchronous trace export."""
    ids = []
    for i in sample_indices(len(trajectories), sample_n, seed):
        t = trajectories[i]
        scores = answer_scores(t.answer, t.golds)
        attrs, trace_tags = _episode_meta(
            t.qid,
            t.golds,
            scores["em"],
            scores["f1"],
            t.num_turns,
            t.reason,
            t.sample_index,
            t.outcome_reward,
            tags,
            split,
            step,
        )
        ids.append(_trace_episode(t, run_id, trace_tags, attrs))
    mlflow.flush_trace_async_logging()
    return ids


def log_episode_traces(
    rows: Sequence[Mapping[str, Any]],
    sample_n: int,
    *,
    run_id: str | None = None,
    seed: int = 0,
    split: str | None = None,
    tags: dict[str, str] | None = None,
) -> list[str]:
    """The traces :func:`log_trajectory_traces` writes for the same episodes (same seeded sample,
    attributes, tags and root span), from scored episode rows (an evaluation's
    ``episodes.jsonl``: ``id``, ``question``, ``golds``, ``answer``, ``em``, ``f1``, ``turns``,
    ``reason``, ``reward``) in the order the episodes were played. A row keeps the scores, not
    the turns, so each trace is the episode's AGENT span alone (no LLM/tool children): what a
    run reconstructed from the outputs (``agentr1 track``) can show. Returns the trace ids."""
    ids = []
    for i in sample_indices(len(rows), sample_n, seed):
        r = rows[i]
        qid, golds = str(r["id"]), [str(g) for g in r["golds"]]
        attrs, trace_tags = _episode_meta(
            qid,
            golds,
            float(r["em"]),
            float(r["f1"]),
            int(r["turns"]),
            str(r["reason"]),
            0,
            r.get("reward"),
            tags,
            split,
            None,
        )
        with _episode_span(
            qid, str(r["question"]), r.get("answer"), golds, str(r["reason"]), run_id, attrs, trace_tags
        ) as root:
            pass
        ids.append(root.trace_id)
    mlflow.flush_trace_async_logging()
    return ids


def trajectory_rows(trajectories: Sequence[Trajectory]) -> dict[str, list[Any]]:
    """Column-wise summary of every trajectory (the logged table's content)."""
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "qid",
            "sample_index",
            "question",
            "golds",
            "answer",
            "em",
            "reward",
            "reason",
            "turns",
            "tool_calls",
            "action_tokens",
            "response_tokens",
            "response_text",
        )
    }
    for t in trajectories:
        cols["qid"].append(t.qid)
        cols["sample_index"].append(t.sample_index)
        cols["question"].append(t.question)
        cols["golds"].append(" | ".join(t.golds))
        cols["answer"].append(t.answer)
        cols["em"].append(episode_em(t))
        cols["reward"].append(t.outcome_reward)
        cols["reason"].append(t.reason)
        cols["turns"].append(t.num_turns)
        cols["tool_calls"].append(sum(len(o) for o in t.outcomes))
        cols["action_tokens"].append(t.num_action_tokens)
        cols["response_tokens"].append(len(t.response_ids))
        cols["response_text"].append(t.response_text)
    return cols


def log_trajectory_table(trajectories: Sequence[Trajectory], artifact_file: str, *, run_id: str | None = None) -> None:
    """Every trajectory as one row of an MLflow table (``mlflow.log_table``; shown in the run's
    artifacts and the evaluation view). ``artifact_file`` ends in ``.json``, e.g.
    ``eval/dev_trajectories.json``."""
    if not artifact_file.endswith(".json"):
        raise ValueError(f"artifact_file must end with .json, got {artifact_file!r}")
    mlflow.log_table(trajectory_rows(trajectories), artifact_file, run_id=run_id)


def log_episode_table(rows: Sequence[Mapping[str, Any]], artifact_file: str, *, run_id: str | None = None) -> None:
    """Scored episode rows (``episodes.jsonl``) as one MLflow table (:func:`log_rows`; gold answers
    joined with `` | `` as in :func:`trajectory_rows`)."""
    log_rows(
        [{**r, "golds": " | ".join(map(str, r.get("golds") or []))} if "golds" in r else r for r in rows],
        artifact_file,
        run_id=run_id,
    )


def log_rows(rows: Sequence[Mapping[str, Any]], artifact_file: str, *, run_id: str | None = None) -> None:
    """Rows (scored episodes, a report's table) as one MLflow table, one column per field in the
    order they first appear (a nested field as JSON text); ``artifact_file`` ends in ``.json``.
    The run page's artifact view renders it as a table."""
    if not artifact_file.endswith(".json"):
        raise ValueError(f"artifact_file must end with .json, got {artifact_file!r}")
    columns: dict[str, list[Any]] = {}
    for key in dict.fromkeys(k for r in rows for k in r):
        values = [r.get(key) for r in rows]
        if any(isinstance(v, (dict, list)) for v in values):
            values = [json.dumps(v, sort_keys=True) for v in values]
        columns[key] = values
    mlflow.log_table(columns, artifact_file, run_id=run_id)
