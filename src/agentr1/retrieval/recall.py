"""Recall of the retriever on the dataset's questions: the ``index`` stage's report.

Per split and per question type: ``recall@k`` (mean fraction of a question's ``supporting_ids``
among the top ``k`` hits when the question text is the query) and ``all_supporting@k`` (fraction
of questions with every supporting passage in the top ``k``). Questions without supporting
passages (their gold passages are not in the corpus: :func:`~agentr1.data.schema.gold_unknown`,
or they need none) are counted (``no_supporting``) but not scored. A hit whose passage equals a
gold passage (same title and text, :func:`~agentr1.data.schema.canonical_ids`) counts as that
passage: a corpus holding a passage twice under two ids does not turn the twin into a miss.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentr1.config import SPLITS
from agentr1.data.schema import canonical_ids
from agentr1.retrieval.base import Retriever

log = logging.getLogger(__name__)

BATCH = 256  # queries per retriever call


def dir_bytes(path: str | Path) -> int:
    """Total size of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _scores(
    hit_ids: list[str], supporting: list[str], ks: list[int], same: Mapping[str, str] | None = None
) -> dict[str, float]:
    """recall@k and all_supporting@k of one question; ``same`` maps a passage id to the id of its
    first equal passage (ids it lacks map to themselves)."""
    same = same or {}
    gold = {same.get(i, i) for i in supporting}
    hits = [same.get(i, i) for i in hit_ids]
    out: dict[str, float] = {}
    for k in ks:
        found = len(gold.intersection(hits[:k]))
        out[f"recall@{k}"] = found / len(gold)
        out[f"all_supporting@{k}"] = float(found == len(gold))
    return out


def _mean(rows: list[dict[str, float]], ks: list[int], skipped: int) -> dict[str, Any]:
    keys = [f"{m}@{k}" for m in ("recall", "all_supporting") for k in ks]
    out: dict[str, Any] = {"questions": len(rows), "no_supporting": skipped}
    for key in keys:
        out[key] = round(sum(r[key] for r in rows) / len(rows), 4) if rows else None
    return out


def recall_report(
    retriever: Retriever,
    questions: dict[str, list[dict[str, Any]]],
    ks: list[int],
    max_queries_per_split: int | None = None,
    corpus: Iterable[Mapping[str, Any]] = (),
) -> tuple[dict[str, Any], dict[str, float]]:
    """Recall of supporting passages per split and per type -> (report, {"queries", "search_s"});
    ``corpus`` (the indexed passages) tells which passages are equal."""
    kmax = max(ks)
    same = canonical_ids(corpus)
    report: dict[str, Any] = {}
    n_queries, search_s = 0, 0.0
    for split in SPLITS:
        rows = questions.get(split, [])[:max_queries_per_split]
        if not rows:
            continue
        scored = [r for r in rows if r["supporting_ids"]]
        per_q: list[dict[str, float]] = []
        for i in range(0, len(scored), BATCH):
            batch = scored[i : i + BATCH]
            t0 = time.perf_counter()
            hits = retriever.search([r["question"] for r in batch], kmax)
            search_s += time.perf_counter() - t0
            per_q.extend(_scores([h.id for h in hs], list(r["supporting_ids"]), ks, same) for r, hs in zip(batch, hits))
        n_queries += len(scored)
        by_type: dict[str, list[dict[str, float]]] = defaultdict(list)
        skipped_by_type: dict[str, int] = defaultdict(int)
        for r, s in zip(scored, per_q):
            by_type[r["type"]].append(s)
        for r in rows:
            if not r["supporting_ids"]:
                skipped_by_type[r["type"]] += 1
        entry = _mean(per_q, ks, len(rows) - len(scored))
        entry["types"] = {
            t: _mean(by_type.get(t, []), ks, skipped_by_type.get(t, 0))
            for t in sorted(set(by_type) | set(skipped_by_type))
        }
        report[split] = entry
        log.info(
            "index: %s: %d questions, %s", split, len(rows), ", ".join(f"recall@{k}={entry[f'recall@{k}']}" for k in ks)
        )
    return report, {"queries": n_queries, "search_s": search_s}
