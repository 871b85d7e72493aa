"""``agentr1 compare`` and ``agentr1 promote``: read runs or registry versions, print a table,
draw a PNG; apply the promotion gate to the registry aliases.

Rows come from runs (``--runs ID ...``: the run's metrics) or from registry aliases
(``--aliases champion challenger``, the default: the metrics linked to each version's model) of one
registered model or several (``--model agentr1-policy agentr1-policy-smol --aliases champion``: each
profile registers under its own name, so this puts the nano and the smol champion side by side).
Each chosen metric is a column; when ``<metric>_ci_lower``/``_ci_upper`` exist the cell shows the
interval and the PNG draws it as an error bar.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from agentr1.errors import StageError
from agentr1.tracking.mlflow_adapter import connect
from agentr1.tracking.redact import redact_uri
from agentr1.tracking.registry import REGISTER_HINT, promote, version_by_alias, version_metrics
from agentr1.tracking.tags import STAGE_TAG

Row = dict[str, Any]  # {"label": str, "source": str, "metrics": {name: value}}


def rows_for_runs(client: MlflowClient, run_ids: Sequence[str]) -> list[Row]:
    """One row per run id (label = run name and stage); :class:`StageError` for an unknown id."""
    rows = []
    for rid in run_ids:
        try:
            run = client.get_run(rid)
        except MlflowException as exc:
            raise StageError(f"no MLflow run {rid!r} in this tracking store: {exc.message}") from None
        stage = run.data.tags.get(STAGE_TAG, "?")
        rows.append(
            {
                "label": f"{run.info.run_name} ({rid[:8]})",
                "source": f"run {rid} stage {stage}",
                "metrics": dict(run.data.metrics),
            }
        )
    return rows


def rows_for_aliases(client: MlflowClient, name: str, aliases: Sequence[str], named: bool = False) -> list[Row]:
    """One row per alias of registered model ``name`` (labelled with ``name`` too when ``named``: rows
    of several models side by side); :class:`StageError` for an unset alias."""
    rows = []
    for alias in aliases:
        mv = version_by_alias(client, name, alias)
        if mv is None:
            raise StageError(f"registered model {name!r} has no alias {alias!r}: {REGISTER_HINT}")
        rows.append(
            {
                "label": f"{name + ' ' if named else ''}{alias} (v{mv.version})",
                "source": f"{name} v{mv.version} run {mv.run_id}",
                "metrics": version_metrics(client, mv),
            }
        )
    return rows


def cell(metrics: dict[str, float], metric: str) -> str:
    """``0.4200 [0.3800, 0.4600]`` / ``0.4200`` / ``-`` for a missing metric."""
    if metric not in metrics:
        return "-"
    text = f"{metrics[metric]:.4f}"
    lo, hi = metrics.get(f"{metric}_ci_lower"), metrics.get(f"{metric}_ci_upper")
    return f"{text} [{lo:.4f}, {hi:.4f}]" if lo is not None and hi is not None else text


def format_table(rows: Sequence[Row], metrics: Sequence[str]) -> str:
    """A fixed-width text table: one line per row, one column per metric, plus the source."""
    header = ["", *metrics, "source"]
    body = [[r["label"], *(cell(r["metrics"], m) for m in metrics), r["source"]] for r in rows]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    fmt = lambda line: "  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, body)])


def figure(rows: Sequence[Row], metric: str):
    """The bar chart of ``metric`` per row (matplotlib, Agg): a bar with its CI error bar where
    logged; a row without the metric gets no bar, only the words "no <metric>" at its place (not
    a bar at 0, which would read as a measured 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rows) + 2), 3.5))
    present = [i for i, r in enumerate(rows) if metric in r["metrics"] and not math.isnan(r["metrics"][metric])]
    values = [rows[i]["metrics"][metric] for i in present]
    err: list[list[float]] = [[], []]
    for i, v in zip(present, values):
        lo, hi = rows[i]["metrics"].get(f"{metric}_ci_lower"), rows[i]["metrics"].get(f"{metric}_ci_upper")
        err[0].append(v - lo if lo is not None and hi is not None else 0.0)
        err[1].append(hi - v if lo is not None and hi is not None else 0.0)
    ax.bar(present, values, yerr=err, capsize=4, color="#4c72b0")
    for i in sorted(set(range(len(rows))) - set(present)):
        ax.text(i, 0, f"no {metric}", ha="center", va="bottom", rotation=90, color="#888888", fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_xticks(range(len(rows)), [r["label"] for r in rows], rotation=20, ha="right")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} (95% CI where logged)")
    fig.tight_layout()
    return fig


def plot(rows: Sequence[Row], metric: str, out: str | Path) -> Path:
    """:func:`figure` saved as a PNG at ``out``."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = figure(rows, metric)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def run_compare(cfg, args: argparse.Namespace) -> None:
    """CLI ``agentr1 compare``: print the table and write the PNG (``--out``, checked first)."""
    from agentr1.io import check_destination

    check_destination(args.out, "--out", kind="file")
    client, uri, _ = connect(cfg)
    if args.runs:
        rows = rows_for_runs(client, args.runs)
    else:
        names = args.model or [cfg.tracking.registered_model]  # several: e.g. the nano and the smol champion
        rows = [row for name in names for row in rows_for_aliases(client, name, args.aliases, named=len(names) > 1)]
    metrics = args.metric or [cfg.tracking.gate_metric]
    print(f"MLflow {redact_uri(uri)}")
    print(format_table(rows, metrics))
    print(f"plot: {plot(rows, metrics[0], args.out)}")


def _one_writer(command):
    """Run CLI ``command(cfg, args)`` holding the store's writer lock
    (:func:`agentr1.tracking.writelock.writer_lock`: an evaluation registering and gating, or
    ``agentr1 track``, waits; and this waits for them); a dry run writes nothing and takes none."""

    @functools.wraps(command)
    def locked(cfg, args: argparse.Namespace) -> None:
        if getattr(args, "dry_run", False):
            return command(cfg, args)
        from agentr1.tracking.writelock import writer_lock

        with writer_lock(cfg, "agentr1 promote"):
            return command(cfg, args)

    return locked


@_one_writer
def run_promote(cfg, args: argparse.Namespace) -> None:
    """CLI ``agentr1 promote``: apply the gate to the ``challenger`` alias's version (or to version
    ``--version`` where the command has that option) against the ``champion`` alias; prints the
    decision in words, then as one JSON line (read by ``flows/promote.py``). A store that cannot
    be read, or a challenger the gate must not take, is an error with no alias moved (exit 1)."""
    client, _, _ = connect(cfg)
    name = args.model or cfg.tracking.registered_model
    version = getattr(args, "version", None)
    result = promote(
        name, args.metric or cfg.tracking.gate_metric, version=version, dry_run=args.dry_run, client=client
    )
    moved = " (dry run: aliases unchanged)" if args.dry_run else ""
    print(
        f"{name} {'version' if version is not None else 'challenger'} v{result.challenger}: {result.decision}{moved} - "
        f"{result.reason}"
    )
    print(json.dumps(result.to_dict(), sort_keys=True))
