"""One evaluated episode per question: greedy batches of a policy and their ``episodes.jsonl`` rows.

A batch of questions of one split is rolled out greedily (:func:`tool_policy_batch`: an agent in
the ToolEnv; :func:`naive_rag_batch`: the naive-RAG baseline) and scored per question
(:func:`agentr1.eval.quick.episode_metrics`, plus ``early_answer``: a multi-hop question answered
before the episode's retrievals had returned all its supporting passages, :mod:`agentr1.eval.support`,
whose log records the ids every call returned while the policy runs). Each episode becomes one
row (:func:`episode_row`, fields :data:`EPISODE_FIELDS`, plus ``calls_by_tool`` when the env has
several tools) and keeps its trajectory, with the outcome reward, for the traces. :func:`play`
runs every split batch by batch; :func:`write_episodes` / :func:`read_episodes` are the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentr1.errors import StageError
from agentr1.eval.baselines import naive_rag
from agentr1.eval.metrics import MEANS
from agentr1.eval.quick import calls_by_tool, episode_metrics, evaluate_tool_policy
from agentr1.eval.setup import EvalSetup
from agentr1.eval.splits import select_questions
from agentr1.eval.support import early_answer, recording, support_found
from agentr1.rollout.engine import decode
from agentr1.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)

# early_answer: 1.0 for a multi-hop question answered before its supporting passages were all retrieved,
# 0.0 otherwise (single-hop or unanswered: 0.0); support_found (last): the share of its supporting passages
# the episode retrieved (None without any); agentr1.eval.support
EPISODE_FIELDS = (
    "id",
    "split",
    "question",
    "type",
    "hops",
    "em",
    "f1",
    "subem",
    "format_ok",
    "answered",
    "tool_calls",
    "turns",
    "reward",
    "answer",
    "golds",
    "reason",
    "early_answer",
    "support_found",
)


def episode_row(q: Mapping[str, Any], split: str, scores: Mapping[str, Any], answer: str | None) -> dict[str, Any]:
    """One line of ``episodes.jsonl`` (:data:`EPISODE_FIELDS`)."""
    row = {
        "id": str(q["id"]),
        "split": split,
        "question": q["question"],
        "type": q.get("type"),
        "hops": None if q.get("hops") is None else int(q["hops"]),
    }
    row.update({k: float(scores[k]) for k in MEANS})
    row.update(
        answer=answer,
        golds=[str(g) for g in q.get("answers", [])],
        reason=str(scores.get("reason", "")),
        support_found=scores.get("support_found"),
    )
    return {k: row[k] for k in EPISODE_FIELDS}


class RecordingBackend:
    """A backend wrapper keeping each (prompt ids, generation) pair, in call order."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.calls: list[tuple[list[int], Any]] = []

    def generate(self, prompts, max_new_tokens, stop_strings, temperature, top_p, seed):
        gens = self.backend.generate(prompts, max_new_tokens, stop_strings, temperature, top_p, seed)
        self.calls += [(list(p), g) for p, g in zip(prompts, gens)]
        return gens


def per_tool_names(env) -> list[str]:
    """The env's tools when it has several (rows then get ``calls_by_tool``), else ``[]`` (one
    tool: ``tool_calls`` is its count, and the rows keep their fields)."""
    return list(env.tools) if len(env.tools) > 1 else []


def tool_policy_batch(
    setup: EvalSetup, questions: Sequence[Mapping[str, Any]], split: str
) -> tuple[list[dict[str, Any]], list[Trajectory]]:
    """Greedy agent rollouts in the ToolEnv -> (rows, trajectories with their outcome reward); the
    passage ids the calls returned are recorded for ``early_answer`` (:mod:`agentr1.eval.support`)."""
    env = setup.env
    with recording(env) as log:
        _, trajs = evaluate_tool_policy(replace(setup, env=log.env), questions)
    rows, tools = [], per_tool_names(env)
    for q, t in zip(questions, trajs):
        scores = episode_metrics(t, setup.reward)
        retrieved = log.retrieved(t)
        scores["early_answer"] = early_answer(q, bool(scores["answered"]), retrieved)
        scores["support_found"] = support_found(q, retrieved)
        t.outcome_reward = float(scores["reward"])
        rows.append(episode_row(q, split, scores, t.answer))
        if tools:
            rows[-1]["calls_by_tool"] = calls_by_tool(t, tools)
    return rows, trajs


def naive_rag_batch(
    setup: EvalSetup, questions: Sequence[Mapping[str, Any]], split: str
) -> tuple[list[dict[str, Any]], list[Trajectory]]:
    """Naive RAG -> (rows, one-turn trajectories: the prompt holds the retrieved passages and the
    ``<answer>`` tag, the response is exactly the generated tokens). It makes no call: for
    ``early_answer`` its retrieved passages are those of its one retrieval, in the prompt."""
    env, tokenizer = setup.env, setup.tokenizer
    rec = RecordingBackend(setup.backend)
    with recording(env) as log:
        _, records = naive_rag(replace(setup, backend=rec), questions)
        retrieved = log.take("search")
    if len(rec.calls) != len(records) or len(retrieved) != len(records):
        raise RuntimeError(
            f"naive_rag made {len(rec.calls)} generations and {len(retrieved)} retrievals for {len(records)} questions"
        )
    rows, trajs = [], []
    for q, r, (prompt_ids, gen), passages in zip(questions, records, rec.calls, retrieved):
        r = {
            **r,
            "early_answer": early_answer(q, r["answer"] is not None, passages),
            "support_found": support_found(q, passages),
        }
        ids = list(gen.token_ids)
        text = decode(tokenizer, ids)
        t = Trajectory(
            qid=str(q["id"]),
            question=q["question"],
            golds=list(r["golds"]),
            prompt_ids=prompt_ids,
            response_ids=ids,
            action_mask=[1] * len(ids),
            logprobs=[float(x) for x in gen.logprobs][: len(ids)],
            turn_spans=[(0, len(ids))],
            turn_texts=[text],
            outcomes=[[]],
            answer=r["answer"],
            reason=r["reason"],
            outcome_reward=float(r["reward"]),
            prompt_text=r["prompt_text"],
            response_text=text,
        )
        trajs.append(t)
        rows.append(episode_row(q, split, r, r["answer"]))
        if per_tool_names(env):
            rows[-1]["calls_by_tool"] = calls_by_tool(t, per_tool_names(env))
    return rows, trajs


def read_episodes(
    path: str | Path, questions: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """The rows of an ``episodes.jsonl`` per split, in the order of ``questions`` (split ->
    questions, the order the episodes were played); :class:`StageError` when the file holds other
    questions."""
    path = Path(path)
    rows = {(r["split"], r["id"]): r for r in map(json.loads, path.read_text().splitlines())}
    order = [(split, str(q["id"])) for split, qs in questions.items() for q in qs]
    if sorted(order) != sorted(rows):
        raise StageError(
            f"{path} holds other questions than evaluate.splits/max_examples pick from the processed "
            "data: re-run the evaluation (`dvc repro`)"
        )
    return {split: [rows[(split, str(q["id"]))] for q in qs] for split, qs in questions.items()}


def episodes_of(cfg, out_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The rows of the evaluation in ``out_dir`` per split, in the order they were played:
    :func:`read_episodes` of the questions ``cfg`` picks (``evaluate.splits``,
    ``evaluate.max_examples`` of the processed data, :func:`agentr1.eval.splits.select_questions`)."""
    from agentr1.data.schema import read_dataset

    questions = select_questions(read_dataset(cfg.data.processed_dir), cfg.evaluate.splits, cfg.evaluate.max_examples)
    return read_episodes(Path(out_dir) / "episodes.jsonl", questions)


def _progress(total: int, desc: str):
    """A tqdm bar on an interactive stderr, else ``None`` (log lines instead)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="batch", dynamic_ncols=True)


def play(
    setup: EvalSetup,
    questions: Mapping[str, Sequence[Mapping[str, Any]]],
    batch_size: int,
    naive: bool = False,
    label: str = "evaluate",
    phase: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[Trajectory]]]:
    """Every split of ``questions`` (split -> questions), in order, ``batch_size`` questions per
    batch (:func:`naive_rag_batch` when ``naive``, else :func:`tool_policy_batch`, each with
    ``setup`` as is) -> (rows, trajectories) per split, in question order. ``phase(name)``, when
    given, wraps each split's rollouts (``rollout_<split>``: the stage times them); progress is a
    bar on a terminal, else a log line per batch, prefixed ``label``."""
    batch_fn = naive_rag_batch if naive else tool_policy_batch
    n_batches = sum(-(-len(qs) // batch_size) for qs in questions.values())
    rows: dict[str, list[dict[str, Any]]] = {}
    trajs: dict[str, list[Trajectory]] = {}
    bar, done = _progress(n_batches, label), 0
    try:
        for split, qs in questions.items():
            rows[split], trajs[split] = [], []
            with phase(f"rollout_{split}") if phase is not None else contextlib.nullcontext():
                for start in range(0, len(qs), batch_size):
                    r, t = batch_fn(setup, qs[start : start + batch_size], split)
                    rows[split] += r
                    trajs[split] += t
                    done += 1
                    if bar is not None:
                        bar.set_postfix_str(split)
                        bar.update(1)
                    else:
                        log.info("%s: %s batch %d/%d done", label, split, done, n_batches)
    finally:
        if bar is not None:
            bar.close()
    return rows, trajs


def write_episodes(path: str | Path, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """``episodes.jsonl``: every row of ``rows`` (split -> rows), sorted by split then id, one JSON
    object a line with sorted keys."""
    episodes = sorted((r for split in rows for r in rows[split]), key=lambda r: (r["split"], r["id"]))
    with open(path, "w", encoding="utf-8") as f:
        for r in episodes:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
