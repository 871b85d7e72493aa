"""Great Expectations (GX Core 1.x) plumbing for the ``validate`` stage.

The data checks themselves are declared as plain :class:`Check` records (a name, the table it
applies to, a GX expectation class name and its keyword arguments) in
:mod:`agentr1.data.validation`; this module turns them into GX expectation suites, runs them on
pandas frames through an *ephemeral* data context (nothing is written to disk by GX), and reduces
the results to:

* one :class:`CheckResult` per check (success, unexpected count, a few offending rows identified
  by their ``id`` column), and
* the raw GX validation results as JSON, made deterministic by dropping run ids, timestamps and
  random expectation ids, so that the stage's output is byte-identical on identical input.

``great_expectations`` takes seconds to import, so it is imported only inside :func:`run_checks`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

INDEX_COLUMN = "id"

# Keys of a GX result that change from run to run (ids, times) and are dropped from the report.
_VOLATILE_KEYS = frozenset({"validation_id", "run_id", "validation_time", "ge_load_time", "checkpoint_id"})


@dataclass(frozen=True)
class Check:
    """One named data check, expressed as a GX expectation.

    ``name`` is the stable key used in ``summary.json`` and in error messages
    (``questions.id_unique``); ``expectation`` is a class name in ``gx.expectations``
    (``ExpectColumnValuesToBeUnique``) and ``kwargs`` its arguments (``column=...``);
    ``description`` says what the check guards and ``fix`` what to do when it fails (both are
    printed in the stage's error message; only ``description`` goes to GX).
    """

    name: str
    table: str
    expectation: str
    kwargs: Mapping[str, Any]
    description: str
    fix: str = ""

    @property
    def column(self) -> str | None:
        """The column the check looks at (``column_A,column_B`` for pair checks; None for table checks)."""
        if "column" in self.kwargs:
            return str(self.kwargs["column"])
        if "column_A" in self.kwargs:
            return f"{self.kwargs['column_A']},{self.kwargs['column_B']}"
        return None


@dataclass
class CheckResult:
    """The outcome of one :class:`Check`.

    ``examples`` holds up to ``max_examples`` offending rows as ``{"id": ..., "value": ...}``
    (``value`` = the offending value of the checked column); a failed table-level check has one
    example ``{"value": observed value}`` without ``id``. ``error`` is set when GX raised while
    evaluating the expectation.
    """

    check: Check
    gx_type: str
    success: bool
    unexpected_count: int | None
    element_count: int | None
    examples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def _clean(value: Any) -> Any:
    """JSON-safe and deterministic: NaN -> None, numpy scalars -> Python, volatile keys dropped."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items() if k not in _VOLATILE_KEYS}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
    if value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def deterministic_result_json(result: Any) -> dict[str, Any]:
    """A GX ``ExpectationSuiteValidationResult`` as JSON without run ids, times or random ids."""
    doc = _clean(result.to_json_dict())
    for res in doc.get("results", []):
        cfg = res.get("expectation_config") or {}
        cfg.pop("id", None)
    doc.pop("id", None)
    return doc


def _error_message(exception_info: Any) -> str | None:
    """The exception message GX recorded for an expectation, if it raised."""
    if not isinstance(exception_info, Mapping):
        return None
    if exception_info.get("raised_exception"):
        return str(exception_info.get("exception_message") or "expectation raised an exception")
    for nested in exception_info.values():  # GX may key the info by metric id
        msg = _error_message(nested)
        if msg:
            return msg
    return None


def _examples(check: Check, result: Mapping[str, Any], max_examples: int) -> list[dict[str, Any]]:
    """Offending rows (id + offending value) from a GX result in SUMMARY format."""
    rows = result.get("partial_unexpected_index_list") or []
    if not rows and "observed_value" in result:  # table-level expectation: no row to point at
        return [{"value": _clean(result["observed_value"])}]
    out: list[dict[str, Any]] = []
    for row in rows[:max_examples]:
        row = _clean(dict(row))
        rid = row.get(INDEX_COLUMN)
        others = {k: v for k, v in row.items() if k != INDEX_COLUMN}
        if not others:  # the checked column is the id column itself
            value: Any = rid
        elif len(others) == 1:
            value = next(iter(others.values()))
        else:
            value = others
        out.append({"id": rid, "value": value})
    return out


def _import_gx() -> Any:
    """``great_expectations``, imported with its INFO logs muted (its warnings kept) unless the user
    set its logger's level, and its usage analytics off unless asked for (the Makefile exports
    this too; `dvc repro` in the venv does not): an offline machine would wait on the network, and
    a user never opted in."""
    gx_logger = logging.getLogger("great_expectations")
    quiet = gx_logger.level == logging.NOTSET  # GX logs hundreds of INFO lines
    if quiet:
        gx_logger.setLevel(logging.WARNING)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.data_context.types.base  # noqa: F401  (pins its own logger to INFO at import)

    if quiet:
        logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
    return gx


def _check_results(outcome: Any, table_checks: Sequence[Check], max_examples: int) -> dict[str, CheckResult]:
    """``{check name: CheckResult}`` of one table's GX validation ``outcome``."""
    checks_by_name = {c.name: c for c in table_checks}
    out = {}
    for res in outcome.results:
        check = checks_by_name[res.expectation_config.meta["check"]]
        result = dict(res.result or {})
        out[check.name] = CheckResult(
            check=check,
            gx_type=res.expectation_config.type,
            success=bool(res.success),
            unexpected_count=result.get("unexpected_count"),
            element_count=result.get("element_count"),
            examples=[] if res.success else _examples(check, result, max_examples),
            error=_error_message(res.exception_info),
        )
    return out


def run_checks(
    frames: Mapping[str, pd.DataFrame], checks: Sequence[Check], max_examples: int
) -> tuple[list[CheckResult], dict[str, Any]]:
    """Validate each table in ``frames`` against the checks for it, with GX.

    One expectation suite, pandas dataframe asset, batch definition and validation definition per
    table, all in an ephemeral data context. Every frame must have an ``id`` column, used to
    identify offending rows. Returns the per-check results (in ``checks`` order) and the
    deterministic GX results keyed by table name.
    """
    gx = _import_gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    names = [c.name for c in checks]
    if len(set(names)) != len(names):
        raise ValueError(f"check names must be unique: {sorted(n for n in names if names.count(n) > 1)}")

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("agentr1")
    result_format = {
        "result_format": "SUMMARY",
        "partial_unexpected_count": max_examples,
        "unexpected_index_column_names": [INDEX_COLUMN],
    }

    by_name: dict[str, CheckResult] = {}
    gx_json: dict[str, Any] = {}
    for table in sorted({c.table for c in checks}):
        if table not in frames:
            raise KeyError(f"no frame for table {table!r} (have {sorted(frames)})")
        table_checks = [c for c in checks if c.table == table]
        suite = context.suites.add(gx.ExpectationSuite(name=f"agentr1_{table}"))
        for check in table_checks:
            cls = getattr(gx.expectations, check.expectation)
            suite.add_expectation(cls(**dict(check.kwargs), description=check.description, meta={"check": check.name}))
        batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe(f"{table}_all")
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"agentr1_{table}", data=batch, suite=suite)
        )
        outcome = definition.run(batch_parameters={"dataframe": frames[table]}, result_format=result_format)
        gx_json[table] = deterministic_result_json(outcome)
        by_name.update(_check_results(outcome, table_checks, max_examples))
    missing = [n for n in names if n not in by_name]
    if missing:
        raise RuntimeError(f"GX returned no result for checks {missing}")
    return [by_name[n] for n in names], gx_json
