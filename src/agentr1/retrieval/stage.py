"""Stage ``index`` (``agentr1 index``): build the retrieval index and its recall report.

Outputs:

- ``retrieval.index_dir``: the index (replaced atomically: a failed build leaves the old one);
- ``retrieval.report_dir/report.json`` (DVC metric): per split and per question type, recall@k of
  supporting passages (mean fraction of a question's ``supporting_ids`` among the top k hits when
  the question text is the query) and ``all_supporting@k`` (fraction of questions with every
  supporting passage in the top k), plus passages and index size on disk;
- ``retrieval.report_dir/timing.json`` (no DVC output, git-ignored): build seconds and queries/s.

Timings live in their own file so that ``report.json`` depends only on data and params: rebuilding
gives byte-identical metrics, ``dvc metrics diff`` shows only real changes, and the stage's outputs
stay reproducible; wall-clock figures change every run and would make every rerun look different.
Questions without supporting passages are counted (``no_supporting``) but not scored.

With ``tracking.enabled`` the stage is one MLflow run (``stage_run``, imported only then) with
metrics ``index/<split>/recall_at_<k>``, ``index/<split>/all_supporting_at_<k>`` (MLflow metric
names cannot hold ``@``), ``index/<split>/questions``, ``index/<split>/no_supporting``,
``index/passages``, ``index/index_bytes``, ``index/build_s``, ``index/queries`` and
``index/queries_per_s``, and ``report.json`` / ``timing.json`` as artifacts under ``index/``.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agentr1.config import SPLITS, Config
from agentr1.errors import StageError
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.retrieval.base import Retriever, RetrieverError
from agentr1.tracking import tracked_stage

log = logging.getLogger(__name__)

REPORT_FILE = "report.json"
TIMING_FILE = "timing.json"
BATCH = 256


def dir_bytes(path: str | Path) -> int:
    """Total size of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _scores(hit_ids: list[str], supporting: list[str], ks: list[int]) -> dict[str, float]:
    gold = set(supporting)
    out: dict[str, float] = {}
    for k in ks:
        found = len(gold.intersection(hit_ids[:k]))
        out[f"recall@{k}"] = found / len(gold)
        out[f"all_supporting@{k}"] = float(found == len(gold))
    return out


def _mean(rows: list[dict[str, float]], ks: list[int], skipped: int) -> dict[str, Any]:
    keys = [f"{m}@{k}" for m in ("recall", "all_supporting") for k in ks]
    out: dict[str, Any] = {"questions": len(rows), "no_supporting": skipped}
    for key in keys:
        out[key] = round(sum(r[key] for r in rows) / len(rows), 4) if rows else None
    return out


def recall_report(retriever: Retriever, questions: dict[str, list[dict[str, Any]]], ks: list[int],
                  max_queries_per_split: int | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """Recall of supporting passages per split and per type -> (report, {"queries", "search_s"})."""
    kmax = max(ks)
    report: dict[str, Any] = {}
    n_queries, search_s = 0, 0.0
    for split in SPLITS:
        rows = questions.get(split, [])[:max_queries_per_split]
        if not rows:
            continue
        scored = [r for r in rows if r["supporting_ids"]]
        per_q: list[dict[str, float]] = []
        for i in range(0, len(scored), BATCH):
            batch = scored[i:i + BATCH]
            t0 = time.perf_counter()
            hits = retriever.search([r["question"] for r in batch], kmax)
            search_s += time.perf_counter() - t0
            per_q.extend(_scores([h.id for h in hs], list(r["supporting_ids"]), ks) for r, hs in zip(batch, hits))
        n_queries += len(scored)
        by_type: dict[str, list[dict[str, float]]] = defaultdict(list)
        skipped_by_type: dict[str, int] = defaultdict(int)
        for r, s in zip(scored, per_q):
            by_type[r["type"]].append(s)
        for r in rows:
            if not r["supporting_ids"]:
                skipped_by_type[r["type"]] += 1
        entry = _mean(per_q, ks, len(rows) - len(scored))
        entry["types"] = {t: _mean(by_type.get(t, []), ks, skipped_by_type.get(t, 0))
                          for t in sorted(set(by_type) | set(skipped_by_type))}
        report[split] = entry
        log.info("index: %s: %d questions, %s", split, len(rows),
                 ", ".join(f"recall@{k}={entry[f'recall@{k}']}" for k in ks))
    return report, {"queries": n_queries, "search_s": search_s}


def report_metrics(report: dict[str, Any], timing: dict[str, Any]) -> dict[str, float]:
    """The key numbers of ``report.json`` and ``timing.json`` as flat MLflow metrics (per split;
    ``recall@k`` -> ``recall_at_k``; ``None`` values are left out)."""
    metrics: dict[str, Any] = {"index/passages": report["passages"], "index/index_bytes": report["index_bytes"]}
    for split, entry in report["splits"].items():
        for key, value in entry.items():
            if key != "types":
                metrics[f"index/{split}/{key.replace('@', '_at_')}"] = value
    metrics.update({f"index/{k}": timing[k] for k in ("build_s", "queries", "queries_per_s")})
    return {k: v for k, v in metrics.items() if v is not None}



def run_index(cfg: Config, args: Any = None) -> None:
    """Build ``retrieval.index_dir`` from the processed corpus and write the retrieval report."""
    from agentr1.data.schema import read_dataset
    from agentr1.data.validation import require_validated
    from agentr1.retrieval.factory import build_retriever

    with tracked_stage(cfg, "index") as run:
        require_validated(cfg)
        rcfg = cfg.retrieval
        try:
            ds = read_dataset(cfg.data.processed_dir)
        except FileNotFoundError as exc:
            raise StageError(str(exc)) from None
        log.info("index: building a %s index over %d passages -> %s", rcfg.backend, len(ds.corpus), rcfg.index_dir)
        try:
            t0 = time.perf_counter()
            retriever = build_retriever(rcfg, ds.corpus, seed=cfg.seed)
            build_s = time.perf_counter() - t0
            with atomic_dir(rcfg.index_dir) as tmp:
                retriever.save(tmp)
            log.info("index: built in %.1fs, %.1f MB on disk", build_s, dir_bytes(rcfg.index_dir) / 1e6)
            splits, timing = recall_report(retriever, ds.questions, rcfg.report.ks, rcfg.report.max_queries_per_split)
        except RetrieverError as exc:
            raise StageError(str(exc)) from None
        report = {
            "backend": rcfg.backend,
            "passages": len(ds.corpus),
            "index_bytes": dir_bytes(rcfg.index_dir),
            "ks": rcfg.report.ks,
            "splits": splits,
        }
        qps = timing["queries"] / timing["search_s"] if timing["search_s"] > 0 else None
        timing_out = {"backend": rcfg.backend, "build_s": round(build_s, 3), "queries": timing["queries"],
                      "queries_per_s": round(qps, 1) if qps else None}
        out = Path(rcfg.report_dir)
        write_json_atomic(out / REPORT_FILE, report)
        write_json_atomic(out / TIMING_FILE, timing_out)
        log.info("index: report -> %s (%s queries/s over %d questions)", out / REPORT_FILE,
                 timing_out["queries_per_s"], timing["queries"])
        if run is not None and run.enabled:
            import mlflow

            run.logger.log(report_metrics(report, timing_out), step=0)
            for name in (REPORT_FILE, TIMING_FILE):
                mlflow.log_artifact(str(out / name), artifact_path="index", run_id=run.run_id)
