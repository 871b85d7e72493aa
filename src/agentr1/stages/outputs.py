"""What stages write besides checkpoints: curves as CSV and their one-off numbers as metrics."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

_NOT_KEY = re.compile(r"[^a-z0-9]+")


def curve_csv(rows: list[dict], fields: tuple[str, ...]) -> str:
    """``rows`` as CSV with header ``fields`` (floats rounded to 6 digits; no wall times, so a
    rerun writes the same bytes)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (round(row[k], 6) if isinstance(row[k], float) else row[k]) for k in fields})
    return buf.getvalue()


def summary_metrics(tree: dict, prefix: str = "summary/") -> dict[str, float]:
    """``{"summary/<key>.<subkey>...": value}`` for the numeric leaves of a (nested) metrics
    dict (booleans as 0/1): a stage's one-off numbers in one ``summary`` section of MLflow's
    charts, apart from the step curves."""
    out: dict[str, float] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(summary_metrics(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)):
            out[f"{prefix}{key}"] = int(value) if isinstance(value, bool) else value
    return out


def metric_key(text: str, limit: int = 60) -> str:
    """``text`` as one part of an MLflow metric name: lower case, every run of other characters
    than ``a-z0-9`` one ``_``, at most ``limit`` characters (``"no 'context' (missing or empty)"``
    -> ``no_context_missing_or_empty``)."""
    return _NOT_KEY.sub("_", text.lower()).strip("_")[:limit].rstrip("_") or "_"


def records_metrics(records: dict[str, Any] | None, prefix: str) -> dict[str, float]:
    """The records report of real data (``manifest.json`` ``records``,
    :func:`agentr1.data.multihop.load_real`) as flat metrics: per source
    ``<prefix>.<sources_i_dataset>.questions|without_gold|passages_already_in_corpus|skipped`` and
    ``...skipped.<reason>`` (:func:`metric_key`), and ``<prefix>.corpus.passages|passages_already_in_corpus``."""
    out: dict[str, float] = {}
    for entry in (records or {}).get("sources") or []:
        key = f"{prefix}.{metric_key(entry['source'].removeprefix('data.real.') + '_' + entry['dataset'])}"
        for name in ("questions", "without_gold", "passages_already_in_corpus"):
            out[f"{key}.{name}"] = entry[name]
        out[f"{key}.skipped"] = sum(entry["skipped"].values())
        out.update({f"{key}.skipped.{metric_key(reason)}": n for reason, n in entry["skipped"].items()})
    corpus = (records or {}).get("corpus")
    if corpus:
        out.update({f"{prefix}.corpus.{k}": corpus[k] for k in ("passages", "passages_already_in_corpus")})
    return out
