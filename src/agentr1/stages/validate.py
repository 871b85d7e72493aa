"""Stage ``validate``: check the processed dataset (:mod:`agentr1.data.validation`: what is
checked, the outputs and the ``passed.json`` marker later stages require).

Any old marker is deleted before anything else (before the MLflow run opens), so a run that fails
for whatever reason never leaves one. Tracking: metrics ``validate/expectations`` (evaluated),
``validate/passed``, ``validate/failed``, ``validate/success`` (1/0),
``validate/rows.<table or split>``, ``validate/unexpected.<expectation>`` and
``validate/leaks.<source>.count|share``, with real data ``validate/records.without_gold.<source>``
and the manifest's records report (``validate/records.<source>...``:
:func:`~agentr1.stages.records.records_metrics`), and ``summary.json`` / ``gx_result.json`` as artifacts
under ``validate/``. They are logged before the verdict, so a failed validation leaves a FAILED
run that shows which expectations failed.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from agentr1.config import Config
from agentr1.data.validation import (
    GX_RESULT_FILE,
    MARKER_FILE,
    SUMMARY_FILE,
    ValidationReport,
    failure_message,
    params_hash,
    processed_fingerprint,
    validate_processed,
)
from agentr1.errors import StageError
from agentr1.io import write_json_atomic
from agentr1.stages.context import StageContext
from agentr1.stages.records import metric_key, records_metrics
from agentr1.stages.spec import StageSpec

SPEC = StageSpec("validate", "validate the dataset with Great Expectations", order=20)

log = logging.getLogger(__name__)

_METRIC_UNSAFE = re.compile(r"[^\w\-./ ]")  # characters MLflow refuses in a metric name


def summary_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's key numbers as flat MLflow metrics (see the module docstring)."""
    n, failed = summary["n_expectations"], summary["n_failed"]
    metrics: dict[str, float] = {
        "validate/expectations": n,
        "validate/passed": n - failed,
        "validate/failed": failed,
        "validate/success": float(bool(summary["success"])),
    }
    metrics.update({f"validate/rows.{k}": v for k, v in summary["rows"].items()})
    for name, exp in summary["expectations"].items():
        if exp.get("unexpected_count") is not None:
            metrics[f"validate/unexpected.{name}"] = exp["unexpected_count"]
    for source, r in ((summary.get("leaks") or {}).get("sources") or {}).items():
        key = _METRIC_UNSAFE.sub("_", source)
        metrics[f"validate/leaks.{key}.count"] = r["leaking"]
        metrics[f"validate/leaks.{key}.share"] = r["share"]
    records = summary.get("records") or {}
    for source, c in (records.get("without_gold") or {}).items():
        metrics[f"validate/records.without_gold.{metric_key(source)}"] = c["without_gold"]
    metrics.update(records_metrics(records.get("prepared"), "validate/records"))
    return metrics


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False) -> None:
    """The stage's MLflow run from ``summary.json`` and ``gx_result.json`` (and, in a live run,
    ``validate/seconds``); the same for a run reconstructed by ``agentr1 track`` (``replay``)."""
    report_dir = Path(ctx.cfg.validate_.report_dir)
    summary = json.loads((report_dir / SUMMARY_FILE).read_text())
    seconds = {"validate/seconds": ctx.times["validate"]} if "validate" in ctx.times else {}
    ctx.run.log_metrics({**summary_metrics(summary), **seconds})
    ctx.run.log_artifacts([report_dir / SUMMARY_FILE, report_dir / GX_RESULT_FILE], artifact_path="validate")


def before(cfg: Config, args: Any = None) -> None:
    """Delete any old success marker, before the run opens (module docstring)."""
    (Path(cfg.validate_.report_dir) / MARKER_FILE).unlink(missing_ok=True)


def run(ctx: StageContext, args: Any = None) -> ValidationReport:
    """Validate ``data.processed_dir``, write ``summary.json`` and ``gx_result.json``
    atomically, then either write ``passed.json`` (success) or raise :class:`StageError` listing
    the failed expectations, offending rows and fixes."""
    cfg = ctx.cfg
    processed = Path(cfg.data.processed_dir)
    report_dir = Path(cfg.validate_.report_dir)
    with ctx.phase("validate", digits=3, quiet=True):
        before_fp = processed_fingerprint(processed)
        report = validate_processed(processed, cfg)
        write_json_atomic(report_dir / SUMMARY_FILE, report.summary)
        write_json_atomic(report_dir / GX_RESULT_FILE, report.gx_result)
    elapsed = ctx.times["validate"]
    log_outputs(ctx)
    rows = report.summary["rows"]
    if not report.success:
        log.error("validation failed on %d questions / %d passages (%.1fs)", rows["questions"], rows["corpus"], elapsed)
        raise StageError(failure_message(report, report_dir))
    if processed_fingerprint(processed) != before_fp:
        raise StageError(f"{processed} changed while it was being validated: run `agentr1 validate` again")
    write_json_atomic(
        report_dir / MARKER_FILE,
        {"data_sha256": before_fp["sha256"], "files": before_fp["files"], "params_sha256": params_hash(cfg)},
    )
    log.info(
        "validation passed: %d expectations on %d questions / %d passages (%.1fs); marker %s",
        len(report.results),
        rows["questions"],
        rows["corpus"],
        elapsed,
        report_dir / MARKER_FILE,
    )
    return report
