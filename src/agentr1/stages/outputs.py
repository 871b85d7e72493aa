"""What stages write besides checkpoints: curves as CSV and their one-off numbers as metrics."""

from __future__ import annotations

import csv
import io


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
