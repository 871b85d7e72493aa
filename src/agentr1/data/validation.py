"""Stage ``validate``: check the processed dataset with Great Expectations before anything uses it.

What is checked (each is one GX expectation, named in ``summary.json`` and in error messages):

* questions: ``id`` non-null and unique over all splits; ``question`` non-null and not blank; at
  least one answer and no blank answer; ``hops`` non-null and within ``data.hops`` [min, max];
  ``type`` and ``source`` non-null; ``split`` in :data:`~agentr1.config.SPLITS` and equal to the
  file the row was read from; every ``supporting_ids`` entry exists in the corpus; splits are
  disjoint (no id and no normalized question text in two splits); no answer leak (an answer
  appearing verbatim in its own question) unless the question's type is listed in
  ``validate.leak_allowed_types``.
* corpus: ``id`` non-null and unique; ``title`` non-null; ``text`` not blank; not empty.

Checks that relate several rows or tables (missing passages, split overlap, leaks) are computed as
derived columns with pandas and then asserted with GX, so that every verdict and every offending
row comes out of one GX validation result.

Outputs in ``validate.report_dir``: ``summary.json`` (DVC metric; deterministic),
``gx_result.json`` (the GX validation results, with run ids and times removed) and, on success
only, ``passed.json``: the marker that later stages check with :func:`require_validated`. It
holds hashes of the processed parquet files and of the params the verdict depends on, so data
that changed after validation is refused.

With ``tracking.enabled`` the stage is one MLflow run (``stage_run``, imported only then) with
metrics ``validate/expectations`` (evaluated), ``validate/passed``, ``validate/failed``,
``validate/success`` (1/0), ``validate/rows/<table or split>`` and
``validate/unexpected/<expectation>``, and ``summary.json`` / ``gx_result.json`` as artifacts
under ``validate/``. They are logged before the verdict, so a failed validation leaves a FAILED
run that shows which expectations failed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from agentr1.config import SPLITS, Config
from agentr1.data.gx_suite import Check, CheckResult, run_checks
from agentr1.data.schema import CORPUS_FIELDS, CORPUS_FILE, QUESTION_FIELDS, Dataset, read_dataset
from agentr1.errors import StageError
from agentr1.io import write_json_atomic
from agentr1.tracking import tracked_stage

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
GX_RESULT_FILE = "gx_result.json"
MARKER_FILE = "passed.json"

_NON_WORD = re.compile(r"[^\w\s]+", re.UNICODE)
_NOT_BLANK = r"\S"  # a value with at least one non-space character


# ----------------------------------------------------------------------------- derived columns
def normalize_text(text: str) -> str:
    """Lowercase, punctuation -> space, whitespace collapsed (used for leak and overlap checks)."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def leaked_answer(question: Any, answers: Any) -> str | None:
    """The first answer found verbatim in the question, or None.

    Both sides are normalized with :func:`normalize_text` and matched on whole words, so the
    answer "Paris" leaks in "Is paris in France?" but "1" does not leak in "born in 1990".
    """
    if not isinstance(question, str):
        return None
    padded = f" {normalize_text(question)} "
    for answer in answers if answers is not None else []:
        norm = normalize_text(answer) if isinstance(answer, str) else ""
        if norm and f" {norm} " in padded:
            return str(answer)
    return None


def _min_answer_chars(answers: Any) -> int:
    """Length of the shortest answer after stripping (0 for a null/blank answer or no answers)."""
    items = list(answers) if answers is not None else []
    if not items:
        return 0
    return min(len(a.strip()) if isinstance(a, str) else 0 for a in items)


def _splits_sharing(frame: pd.DataFrame, key: pd.Series) -> pd.Series:
    """Per row: the sorted splits (comma-joined) sharing its ``key`` when more than one, else None."""
    if frame.empty:
        return pd.Series([], index=frame.index, dtype=object)
    split_sets = (
        pd.DataFrame({"key": key, "split": frame["file_split"]})
        .dropna(subset=["key"])
        .groupby("key", sort=False)["split"]
        .agg(lambda s: ",".join(sorted(set(s))))
    )
    joined = key.map(split_sets)
    shared = joined.where(joined.str.contains(",", na=False))
    return shared.astype(object).where(shared.notna(), None)


def build_question_frame(ds: Dataset, corpus_ids: set[str], leak_allowed_types: list[str]) -> pd.DataFrame:
    """All splits concatenated, plus the derived columns the GX checks assert on.

    Derived columns: ``file_split`` (the file the row came from), ``n_answers``,
    ``min_answer_chars``, ``missing_supporting_ids`` (comma-joined ids absent from the corpus, or
    None), ``leaked_answer`` (None unless an answer leaks and the type does not allow it),
    ``id_in_splits`` / ``question_in_splits`` (the splits sharing the id / normalized question
    text when more than one, else None). The list columns are dropped from the returned frame:
    GX fingerprints a batch with ``pd.util.hash_pandas_object`` and falls back to pickling the
    frame for unhashable cells such as lists, which would make ``gx_result.json`` unstable.
    """
    parts = []
    for split in SPLITS:
        part = pd.DataFrame(ds.split(split)).reindex(columns=list(QUESTION_FIELDS))
        part["file_split"] = split
        parts.append(part)
    q = pd.concat(parts, ignore_index=True)
    q["hops"] = pd.to_numeric(q["hops"], errors="coerce").astype("Int64")
    q["n_answers"] = [len(a) if a is not None else 0 for a in q["answers"]]
    q["min_answer_chars"] = [_min_answer_chars(a) for a in q["answers"]]
    q["missing_supporting_ids"] = [
        (",".join(sorted({str(s) for s in ids if s not in corpus_ids})) or None) if ids is not None else None
        for ids in q["supporting_ids"]
    ]
    allowed = set(leak_allowed_types)
    q["leaked_answer"] = [
        None if t in allowed else leaked_answer(qt, a) for qt, a, t in zip(q["question"], q["answers"], q["type"])
    ]
    q["id_in_splits"] = _splits_sharing(q, q["id"])
    norm_q = q["question"].map(lambda s: (normalize_text(s) or None) if isinstance(s, str) else None)
    q["question_in_splits"] = _splits_sharing(q, norm_q)
    return q.drop(columns=["answers", "supporting_ids"])


def build_corpus_frame(ds: Dataset) -> pd.DataFrame:
    """The corpus as a frame with the schema's columns (missing ones all-null, so checks fail)."""
    return pd.DataFrame(ds.corpus).reindex(columns=list(CORPUS_FIELDS))


# ------------------------------------------------------------------------------------ checks
def build_checks(cfg: Config) -> list[Check]:
    """The expectation list for the configured hop range and leak policy (order = report order)."""
    hop_min, hop_max = cfg.data.hops.min, cfg.data.hops.max
    allowed = sorted(cfg.validate_.leak_allowed_types)

    def q(name: str, expectation: str, description: str, **kwargs: Any) -> Check:
        return Check(f"questions.{name}", "questions", expectation, kwargs, description)

    def c(name: str, expectation: str, description: str, **kwargs: Any) -> Check:
        return Check(f"corpus.{name}", "corpus", expectation, kwargs, description)

    return [
        q("not_empty", "ExpectTableRowCountToBeBetween", "the dataset has at least one question", min_value=1),
        q("id_not_null", "ExpectColumnValuesToNotBeNull", "every question has an id", column="id"),
        q("id_unique", "ExpectColumnValuesToBeUnique", "question ids are unique over all splits", column="id"),
        q("question_not_null", "ExpectColumnValuesToNotBeNull", "every question has a text", column="question"),
        q("question_not_blank", "ExpectColumnValuesToMatchRegex", "question texts are not blank",
          column="question", regex=_NOT_BLANK),
        q("answers_not_empty", "ExpectColumnValuesToBeBetween", "every question has at least one answer",
          column="n_answers", min_value=1),
        q("answers_not_blank", "ExpectColumnValuesToBeBetween", "no answer is empty or blank",
          column="min_answer_chars", min_value=1),
        q("hops_not_null", "ExpectColumnValuesToNotBeNull", "every question has a hop count", column="hops"),
        q("hops_in_range", "ExpectColumnValuesToBeBetween", f"hops within data.hops [{hop_min}, {hop_max}]",
          column="hops", min_value=hop_min, max_value=hop_max),
        q("type_not_null", "ExpectColumnValuesToNotBeNull", "every question has a type", column="type"),
        q("source_not_null", "ExpectColumnValuesToNotBeNull", "every question has a source", column="source"),
        q("split_known", "ExpectColumnValuesToBeInSet", f"split is one of {list(SPLITS)}",
          column="split", value_set=list(SPLITS)),
        q("split_matches_file", "ExpectColumnPairValuesToBeEqual", "the split column equals the file's split",
          column_A="split", column_B="file_split"),
        q("supporting_ids_in_corpus", "ExpectColumnValuesToBeNull",
          "every supporting id exists in the corpus (value = the missing ids)", column="missing_supporting_ids"),
        q("splits_disjoint_ids", "ExpectColumnValuesToBeNull",
          "no id appears in two splits (value = the splits sharing it)", column="id_in_splits"),
        q("splits_disjoint_questions", "ExpectColumnValuesToBeNull",
          "no question text appears in two splits (value = the splits sharing it)", column="question_in_splits"),
        q("no_answer_leak", "ExpectColumnValuesToBeNull",
          f"no answer appears verbatim in its question unless type in {allowed} (value = the leaked answer)",
          column="leaked_answer"),
        c("not_empty", "ExpectTableRowCountToBeBetween", "the corpus has at least one passage", min_value=1),
        c("id_not_null", "ExpectColumnValuesToNotBeNull", "every passage has an id", column="id"),
        c("id_unique", "ExpectColumnValuesToBeUnique", "passage ids are unique", column="id"),
        c("title_not_null", "ExpectColumnValuesToNotBeNull", "every passage has a title", column="title"),
        c("text_not_blank", "ExpectColumnValuesToMatchRegex", "passage texts are not blank",
          column="text", regex=_NOT_BLANK),
        c("text_not_null", "ExpectColumnValuesToNotBeNull", "every passage has a text", column="text"),
    ]


# ----------------------------------------------------------------------------------- running
@dataclass
class ValidationReport:
    """Everything one validation produced: per-check results, the summary and the GX JSON."""

    results: list[CheckResult]
    summary: dict[str, Any]
    gx_result: dict[str, Any]

    @property
    def success(self) -> bool:
        """True when every expectation passed."""
        return bool(self.summary["success"])

    @property
    def failed(self) -> list[CheckResult]:
        """The results of the expectations that failed, in report order."""
        return [r for r in self.results if not r.success]


def validate_dataset(ds: Dataset, cfg: Config) -> ValidationReport:
    """Run every check of :func:`build_checks` on an in-memory dataset (writes nothing)."""
    corpus = build_corpus_frame(ds)
    corpus_ids = {i for i in corpus["id"] if isinstance(i, str)}
    questions = build_question_frame(ds, corpus_ids, cfg.validate_.leak_allowed_types)
    results, gx_json = run_checks(
        {"questions": questions, "corpus": corpus}, build_checks(cfg), cfg.validate_.max_examples
    )
    summary = {
        "success": all(r.success for r in results),
        "expectations": {
            r.check.name: {
                "column": r.check.column,
                "expectation": r.gx_type,
                "success": r.success,
                "unexpected_count": r.unexpected_count,
            }
            for r in results
        },
        "n_expectations": len(results),
        "n_failed": sum(not r.success for r in results),
        "rows": {
            "corpus": len(corpus),
            "questions": len(questions),
            **{split: int((questions["file_split"] == split).sum()) for split in SPLITS},
        },
    }
    return ValidationReport(results=results, summary=summary, gx_result=gx_json)


def _short(value: Any, limit: int = 80) -> str:
    """repr() of an offending value, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_message(report: ValidationReport, report_dir: Path) -> str:
    """The StageError text: each failed expectation (name, column, unexpected count) and examples."""
    failed = report.failed
    lines = [
        f"dataset validation failed: {len(failed)} of {len(report.results)} expectations "
        f"(details: {report_dir / SUMMARY_FILE}, {report_dir / GX_RESULT_FILE})"
    ]
    for r in failed:
        status = "failed" if r.unexpected_count is None else f"{r.unexpected_count} unexpected"
        col = f" column {r.check.column!r}" if r.check.column else ""
        lines.append(f"  - {r.check.name} [{r.gx_type}{col}]: {status} — {r.check.description}")
        if r.error:
            lines.append(f"      error: {r.error}")
        for ex in r.examples:
            rid = f"id={ex['id']!r} " if "id" in ex else "observed "
            lines.append(f"      {rid}value={_short(ex['value'])}")
    lines.append("Fix the data (or data.hops / validate.leak_allowed_types in params), then rerun `agentr1 validate`.")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ marker
def _processed_files(processed_dir: Path) -> list[Path]:
    """The parquet files ``read_dataset`` reads, in a fixed order."""
    names = [f"{s}.parquet" for s in SPLITS] + [CORPUS_FILE]
    return [processed_dir / n for n in names if (processed_dir / n).exists()]


def processed_fingerprint(processed_dir: str | Path) -> dict[str, Any]:
    """sha256 of each processed parquet file and of them all (names + contents)."""
    processed_dir = Path(processed_dir)
    files: dict[str, str] = {}
    total = hashlib.sha256()
    for path in _processed_files(processed_dir):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files[path.name] = digest
        total.update(f"{path.name}\0{digest}\n".encode())
    return {"files": files, "sha256": total.hexdigest()}


def _params_hash(cfg: Config) -> str:
    """Hash of the params the verdict depends on (hop range, leak policy, split names)."""
    relevant = {
        "hops": [cfg.data.hops.min, cfg.data.hops.max],
        "leak_allowed_types": sorted(cfg.validate_.leak_allowed_types),
        "splits": list(SPLITS),
    }
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def require_validated(cfg: Config) -> None:
    """Raise :class:`StageError` unless the processed data passed ``agentr1 validate`` as it is now.

    Later stages (index, sft, train) call this before doing any work.
    """
    processed = Path(cfg.data.processed_dir)
    marker = Path(cfg.validate_.report_dir) / MARKER_FILE
    if not marker.exists():
        raise StageError(
            f"the dataset in {processed} has not passed validation (no {marker}): "
            "run `agentr1 validate` (or `dvc repro validate`) first"
        )
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StageError(f"unreadable validation marker {marker} ({exc}): run `agentr1 validate` again") from None
    current = processed_fingerprint(processed)
    if not current["files"]:
        raise StageError(f"no processed dataset in {processed}: run `agentr1 prepare`, then `agentr1 validate`")
    if recorded.get("data_sha256") != current["sha256"]:
        changed = sorted(
            set(current["files"]) ^ set(recorded.get("files", {}))
            | {n for n, h in current["files"].items() if recorded.get("files", {}).get(n) not in (None, h)}
        )
        raise StageError(
            f"the dataset in {processed} changed since it was validated (changed: {', '.join(changed) or '?'}): "
            "run `agentr1 validate` again"
        )
    if recorded.get("params_sha256") != _params_hash(cfg):
        raise StageError(
            "the dataset was validated under different data.hops / validate.leak_allowed_types params: "
            "run `agentr1 validate` again"
        )


# ------------------------------------------------------------------------------------- stage
def summary_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's key numbers as flat MLflow metrics (see the module docstring)."""
    n, failed = summary["n_expectations"], summary["n_failed"]
    metrics: dict[str, float] = {
        "validate/expectations": n,
        "validate/passed": n - failed,
        "validate/failed": failed,
        "validate/success": float(bool(summary["success"])),
    }
    metrics.update({f"validate/rows/{k}": v for k, v in summary["rows"].items()})
    for name, exp in summary["expectations"].items():
        if exp.get("unexpected_count") is not None:
            metrics[f"validate/unexpected/{name}"] = exp["unexpected_count"]
    return metrics



def run_validate(cfg: Config, args: Any = None) -> ValidationReport:
    """Stage entry point (``agentr1 validate``).

    Removes any old success marker first, validates ``data.processed_dir``, writes
    ``summary.json`` and ``gx_result.json`` atomically, and then either writes ``passed.json``
    (success) or raises :class:`StageError` listing the failed expectations and offending rows.
    """
    with tracked_stage(cfg, "validate") as run:
        started = time.perf_counter()
        processed = Path(cfg.data.processed_dir)
        report_dir = Path(cfg.validate_.report_dir)
        (report_dir / MARKER_FILE).unlink(missing_ok=True)
        before = processed_fingerprint(processed)
        try:
            ds = read_dataset(processed)
        except FileNotFoundError as exc:
            raise StageError(str(exc)) from None
        report = validate_dataset(ds, cfg)
        write_json_atomic(report_dir / SUMMARY_FILE, report.summary)
        write_json_atomic(report_dir / GX_RESULT_FILE, report.gx_result)
        elapsed = time.perf_counter() - started
        if run is not None and run.enabled:
            import mlflow

            run.logger.log({**summary_metrics(report.summary), "validate/seconds": elapsed}, step=0)
            for name in (SUMMARY_FILE, GX_RESULT_FILE):
                mlflow.log_artifact(str(report_dir / name), artifact_path="validate", run_id=run.run_id)
        rows = report.summary["rows"]
        if not report.success:
            log.error("validation failed on %d questions / %d passages (%.1fs)", rows["questions"], rows["corpus"],
                      elapsed)
            raise StageError(failure_message(report, report_dir))
        if processed_fingerprint(processed) != before:
            raise StageError(f"{processed} changed while it was being validated: run `agentr1 validate` again")
        write_json_atomic(
            report_dir / MARKER_FILE,
            {"data_sha256": before["sha256"], "files": before["files"], "params_sha256": _params_hash(cfg)},
        )
        log.info(
            "validation passed: %d expectations on %d questions / %d passages (%.1fs); marker %s",
            len(report.results), rows["questions"], rows["corpus"], elapsed, report_dir / MARKER_FILE,
        )
    return report
