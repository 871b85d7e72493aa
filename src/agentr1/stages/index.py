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

With ``tracking.enabled`` the stage's MLflow run has
metrics ``index/<split>/recall_at_<k>``, ``index/<split>/all_supporting_at_<k>`` (MLflow metric
names cannot hold ``@``), ``index/<split>/questions``, ``index/<split>/no_supporting``,
``index/passages``, ``index/index_bytes``, ``index/build_s``, ``index/queries`` and
``index/queries_per_s``, and ``report.json`` / ``timing.json`` as artifacts under ``index/``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from agentr1.errors import StageError
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.retrieval.base import RetrieverError
from agentr1.retrieval.factory import build_retriever
from agentr1.retrieval.recall import dir_bytes, recall_report
from agentr1.stages.context import StageContext
from agentr1.stages.spec import StageSpec

SPEC = StageSpec("index", "build the retrieval index and its recall report", order=30)

log = logging.getLogger(__name__)

REPORT_FILE = "report.json"
TIMING_FILE = "timing.json"


def report_metrics(report: dict[str, Any], timing: dict[str, Any]) -> dict[str, float]:
    """The key numbers of ``report.json`` and ``timing.json`` as flat MLflow metrics (per split;
    ``recall@k`` -> ``recall_at_k``; ``None`` values and timings ``timing`` lacks are left out)."""
    metrics: dict[str, Any] = {"index/passages": report["passages"], "index/index_bytes": report["index_bytes"]}
    for split, entry in report["splits"].items():
        for key, value in entry.items():
            if key != "types":
                metrics[f"index/{split}.{key.replace('@', '_at_')}"] = value
    metrics.update({f"index/{k}": timing.get(k) for k in ("build_s", "queries", "queries_per_s")})
    return {k: v for k, v in metrics.items() if v is not None}


def run(ctx: StageContext, args: Any = None) -> None:
    """Build ``retrieval.index_dir`` from the processed corpus and write the retrieval report."""
    cfg, rcfg = ctx.cfg, ctx.cfg.retrieval
    ds = ctx.dataset()
    log.info("index: building a %s index over %d passages -> %s", rcfg.backend, len(ds.corpus), rcfg.index_dir)
    try:
        with ctx.phase("build", digits=3, quiet=True):
            retriever = build_retriever(rcfg, ds.corpus, seed=cfg.seed)
        with atomic_dir(rcfg.index_dir) as tmp:
            retriever.save(tmp)
        log.info("index: built in %.1fs, %.1f MB on disk", ctx.times["build"], dir_bytes(rcfg.index_dir) / 1e6)
        splits, timing = recall_report(
            retriever, ds.questions, rcfg.report.ks, rcfg.report.max_queries_per_split, ds.corpus
        )
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
    timing_out = {
        "backend": rcfg.backend,
        "build_s": ctx.times["build"],
        "queries": timing["queries"],
        "queries_per_s": round(qps, 1) if qps else None,
    }
    out = Path(rcfg.report_dir)
    write_json_atomic(out / REPORT_FILE, report)
    write_json_atomic(out / TIMING_FILE, timing_out)
    log.info(
        "index: report -> %s (%s queries/s over %d questions)",
        out / REPORT_FILE,
        timing_out["queries_per_s"],
        timing["queries"],
    )
    log_outputs(ctx)


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False) -> None:
    """The stage's MLflow run from ``report.json`` and ``timing.json`` (not a DVC output: a run
    reconstructed by ``agentr1 track`` where it is missing, e.g. after ``dvc pull``, has no
    timings)."""
    out = Path(ctx.cfg.retrieval.report_dir)
    files = [f for f in (out / REPORT_FILE, out / TIMING_FILE) if f.is_file()]
    report = json.loads((out / REPORT_FILE).read_text())
    timing = json.loads((out / TIMING_FILE).read_text()) if out / TIMING_FILE in files else {}
    ctx.run.log_metrics(report_metrics(report, timing))
    ctx.run.log_artifacts(files, artifact_path="index")
