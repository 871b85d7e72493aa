"""The report's tables, from the rows and differences of :mod:`agentr1.report.rows`.

* **Table 3** (the paper's main comparison): the baselines (Base Tool Call, Naive RAG, Cold start
  SFT) then each full-mask RL method; per split and the average over splits, the method's score
  as ``mean ± std over seeds [CI]``, the CI the two-level bootstrap over the method's seeds and
  the questions (:func:`agentr1.report.stats.seeds_questions`).
* **Table 4** (the mask ablations): each ablation next to its full-mask method, the difference
  (ablation - full) and its CI (seeds of both rows x questions, paired on the questions, and on the
  seeds where both were trained on the same ones).
* **Breakdown**: every policy's score per question type and per number of hops.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

from agentr1.report.methods import MASK_WORDS
from agentr1.report.rows import Cell, Diff, Row, ablation_pairs, table3_rows
from agentr1.report.stats import AVG

SPLIT_ROLES = {"test": "in-domain", "ood": "out-of-domain", "dev": "dev", "train": "train"}


def fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def fmt_signed(x: float, digits: int = 3) -> str:
    return f"{x:+.{digits}f}"


def cell_text(c: Cell) -> str:
    """``mean ± std [lower, upper]`` (no ``±`` for a single seed)."""
    std = f" ± {c.std:.3f}" if c.std is not None else ""
    return f"{c.mean:.3f}{std} [{c.ci_lower:.3f}, {c.ci_upper:.3f}]"


def split_header(split: str, metric: str) -> str:
    role = SPLIT_ROLES.get(split, split)
    return f"{split} {metric.upper()}" + (f" ({role})" if role != split else "")


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else (round(v, 6) if isinstance(v, float) else v) for v in r])
    return buf.getvalue()


def interval_method(ci: float, samples: int, pair_seeds: bool = False) -> str:
    """One sentence stating how every interval of the report is made (the tables' and summary's header)."""
    seeds = (
        "one draw shared by both rows of a difference trained on the same seeds: paired, as a seed fixes the "
        "fresh worlds and first rollouts of every method"
        if pair_seeds
        else "each row drawn on its own"
    )
    return (
        f"{ci:.0%} intervals: a two-level bootstrap ({samples} replicates, percentile) that resamples the "
        "training seeds of each RL row (S - 1 draws of its S seeds, the Rao-Wu rescaling that keeps the seed "
        f"variance unbiased; {seeds}) and the questions of each split (one draw shared by every seed and by "
        "both rows of a difference: paired); the baselines are one SFT run each (no seed level)"
    )


def table3(
    rows: Sequence[Row], splits: Sequence[str], metric: str, ci: float, samples: int = 1000, pair_seeds: bool = False
) -> tuple[str, str]:
    """Table 3 as (markdown, csv)."""
    t3 = table3_rows(rows)
    header = ["Method", "Runs", "n_seeds", *(split_header(s, metric) for s in splits), f"Average {metric.upper()}"]
    md_rows = [[r.display, ", ".join(r.runs), r.n_seeds, *(cell_text(r.cells[k]) for k in [*splits, AVG])] for r in t3]
    n = {s: sorted({r.cells[s].n for r in t3}) for s in splits}
    md = (
        f"# Table 3: {metric.upper()} of the baselines and the RL methods\n\n"
        f"Each cell: mean over seeds and questions ± std over seeds [CI]; no ± for a single run. "
        f"{interval_method(ci, samples, pair_seeds)}. Average = the unweighted mean of the splits. Questions: "
        + ", ".join(f"{s} n={'/'.join(map(str, n[s]))}" for s in splits)
        + ".\n\n"
        + md_table(header, md_rows)
    )
    cols = ["method", "name", "kind", "runs", "n_seeds"]
    for k in [*splits, AVG]:
        cols += [f"{k}_mean", f"{k}_std", f"{k}_ci_lower", f"{k}_ci_upper"] + ([f"{k}_n"] if k != AVG else [])
    csv_rows = []
    for r in t3:
        vals: list[object] = [r.label, r.display, r.kind, ";".join(r.runs), r.n_seeds]
        for k in [*splits, AVG]:
            c = r.cells[k]
            vals += [c.mean, c.std, c.ci_lower, c.ci_upper] + ([c.n] if k != AVG else [])
        csv_rows.append(vals)
    return md, csv_text(cols, csv_rows)


def masks_text(row: Row) -> str:
    return " + ".join(MASK_WORDS[k] for k in row.method.masks_off) if row.method else ""


TABLE4_CSV_COLUMNS = [
    "ablation",
    "name",
    "masks_off",
    "full_mask",
    "seeds_ablation",
    "seeds_full",
    "split",
    "full_mean",
    "ablation_mean",
    "diff",
    "diff_ci_lower",
    "diff_ci_upper",
    "n_paired",
    "judged",
    "beyond_noise",
]


def _table4_cells(abl: Row, full: Row, d: Diff) -> tuple[list, list]:
    """One Table 4 line, as (markdown cells, csv cells), of ablation ``abl`` against ``full`` on ``d.split``."""
    md = [
        abl.display,
        masks_text(abl),
        full.display,
        f"{d.seeds[0]} / {d.seeds[1]}",
        d.split,
        fmt(d.b_mean),
        fmt(d.a_mean),
        fmt_signed(d.diff),
        f"[{d.ci_lower:+.3f}, {d.ci_upper:+.3f}]",
        d.verdict,
    ]
    csv = [
        abl.label,
        abl.display,
        ";".join(abl.method.masks_off),
        full.label,
        d.seeds[0],
        d.seeds[1],
        d.split,
        d.b_mean,
        d.a_mean,
        d.diff,
        d.ci_lower,
        d.ci_upper,
        d.n,
        d.judged,
        d.beyond_noise,
    ]
    return md, csv


def table4(
    rows: Sequence[Row],
    diffs: Mapping[str, list[Diff]],
    splits: Sequence[str],
    metric: str,
    ci: float,
    samples: int = 1000,
    pair_seeds: bool = False,
) -> tuple[str, str]:
    """Table 4 as (markdown, csv); ``diffs[ablation label]`` = ablation - full per split."""
    header = [
        "Ablation",
        "Masks off",
        "Full-mask method",
        "Seeds",
        "Split",
        f"Full mask {metric.upper()}",
        f"Ablation {metric.upper()}",
        "Δ (ablation − full)",
        f"{ci:.0%} CI of Δ",
        "Verdict",
    ]
    lines = [_table4_cells(abl, full, d) for abl, full in ablation_pairs(rows) for d in diffs[abl.label]]
    orphans = [r.display for r in rows if r.kind == "ablation" and (r.method is None or r.method.ablation_of is None)]
    md = (
        f"# Table 4: mask ablations ({metric.upper()})\n\n"
        f"Δ = ablation − full-mask method (means over seeds and questions). {interval_method(ci, samples, pair_seeds)}. "
        "Beyond noise = the interval excludes 0; not judged = a row has fewer seeds than report.min_seeds. "
        "avg = the unweighted mean of the splits.\n\n"
    )
    md += (
        md_table(header, [m for m, _ in lines])
        if lines
        else "No ablation in params `runs` has a full-mask method to compare with.\n"
    )
    if orphans:
        md += "\nAblations without a full-mask method in params `runs` (not compared): " + ", ".join(orphans) + ".\n"
    return md, csv_text(TABLE4_CSV_COLUMNS, [c for _, c in lines])


def breakdown_tables(rows: Sequence[Row], data: Mapping, splits: Sequence[str], metric: str) -> tuple[str, str]:
    """breakdown.md and breakdown.csv (long: split, by, group, n, policy, value)."""
    md = [
        f"# {metric.upper()} per question type and per number of hops\n",
        f"Per-question {metric.upper()} averaged over each method's seeds, then over the questions of the group "
        "(n = questions in the group).\n",
    ]
    csv_rows = []
    for split in splits:
        for by in ("type", "hops"):
            groups = data[split][by]
            header = ["Method", *(f"{g} (n={v['n']})" for g, v in groups.items())]
            body = [[r.display, *(fmt(v.get(r.label)) for v in groups.values())] for r in rows]
            title = "question type" if by == "type" else "hops"
            md.append(f"## {split_header(split, metric)} by {title}\n\n" + md_table(header, body))
            for g, v in groups.items():
                csv_rows += [[split, by, g, v["n"], r.label, v.get(r.label)] for r in rows]
    return "\n".join(md), csv_text(["split", "by", "group", "n", "policy", "value"], csv_rows)
