"""The report's calculator-task section (``tools.md``, ``report.json`` ``tools``): only when the
evaluated splits hold calculator questions (``data.task: tools`` or GSM8K).

For every policy row of the report and every group ``<split>/<type>`` (type in :data:`TASK_TYPES`
present in that split): the metric's mean over the group's questions with its interval (the same
two-level bootstrap over seeds x questions as Table 3, :func:`agentr1.report.stats.seeds_questions`,
the groups as its strata), the calls per episode and success rate of each tool (the evaluations'
``by_type.<type>.by_tool``, averaged over a method's seeds), and for each RL method the difference
to the cold start per group (:func:`agentr1.report.rows.compare`): "beyond noise" when its
interval excludes 0 and the method has ``report.min_seeds`` seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentr1.report.inputs import Evaluation
from agentr1.report.rows import Cell, Diff, Row, compare, row_terms
from agentr1.report.stats import AVG, seeds_questions
from agentr1.report.tables import cell_text, fmt, fmt_signed, md_table

TASK_TYPES = ("arithmetic", "multi_tool", "gsm8k")
COLD_START = "cold_start"


def task_groups(rows: Sequence[Row], splits: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(key, split, type)`` of each calculator-question group the evaluations hold."""
    if not rows:
        return []
    return [
        (f"{s}/{t}", s, t)
        for s in splits
        for t in TASK_TYPES
        if any(q.type == t for q in rows[0].questions[s].values())
    ]


def task_rows(
    rows: Sequence[Row], groups: Sequence[tuple[str, str, str]], samples: int, ci: float, seed: int
) -> list[Row]:
    """Each row restricted to the groups (scores keyed by group), with bootstrap cells per group
    and over the groups (``avg``, the stratified average)."""
    out = []
    for r in rows:
        scores = {k: {qid: v for qid, v in r.scores[s].items() if r.questions[s][qid].type == t} for k, s, t in groups}
        questions = {k: {qid: r.questions[s][qid] for qid in scores[k]} for k, s, _ in groups}
        per_seed = {k: {qid: r.seed_scores[s][qid] for qid in scores[k]} for k, s, _ in groups}
        row = Row(r.label, r.display, r.kind, r.runs, r.method, scores, questions, per_seed)
        boot = seeds_questions([(1.0, row_terms(row, {k: list(v) for k, v in scores.items()}))], samples, ci, seed)
        for key in [*scores, AVG]:
            row.cells[key] = Cell(
                boot[key].mean, None, boot[key].lower, boot[key].upper, len(scores[key]) if key != AVG else None
            )
        out.append(row)
    return out


def tool_calls(row: Row, evals: Mapping[str, Evaluation], split: str, qtype: str) -> dict[str, dict[str, float | None]]:
    """Per tool: calls per episode and success rate on one group, averaged over the row's runs
    (``{}`` when the evaluations have no per-tool counts)."""
    per_run = [
        evals[r].metrics.get("splits", {}).get(split, {}).get("by_type", {}).get(qtype, {}).get("by_tool", {})
        for r in row.runs
    ]
    out: dict[str, dict[str, float | None]] = {}
    for tool in per_run[0] if per_run else {}:
        calls = [p[tool]["calls"] for p in per_run]
        rates = [p[tool]["success_rate"] for p in per_run if p[tool]["success_rate"] is not None]
        out[tool] = {"calls": sum(calls) / len(calls), "success_rate": sum(rates) / len(rates) if rates else None}
    return out


def tools_section(
    rows: Sequence[Row],
    evals: Mapping[str, Evaluation],
    splits: Sequence[str],
    metric: str,
    samples: int,
    ci: float,
    seed: int,
    min_seeds: int = 3,
) -> tuple[dict[str, Any], str] | None:
    """``(report.json "tools" block, tools.md)``, or None when no split holds calculator questions."""
    groups = task_groups(rows, splits)
    if not groups:
        return None
    trows = task_rows(rows, groups, samples, ci, seed)
    keys = [k for k, _, _ in groups]
    by_label = {r.label: r for r in trows}
    calls = {r.label: {k: tool_calls(r, evals, s, t) for k, s, t in groups} for r in trows}
    diffs: dict[str, list[Diff]] = {}
    if COLD_START in by_label:
        diffs = {
            r.label: compare(r, by_label[COLD_START], keys, samples, ci, seed, min_seeds)
            for r in trows
            if r.kind != "baseline"
        }
    data = {
        "groups": keys,
        "metric": metric,
        "policies": {
            r.label: {k: {**r.cells[k].as_dict(), "by_tool": calls[r.label].get(k, {})} for k in [*keys, AVG]}
            for r in trows
        },
        "vs_cold_start": {a: {d.split: d.as_dict() for d in ds} for a, ds in diffs.items()},
    }
    return data, _markdown(trows, keys, calls, diffs, metric, ci)


def _calls_text(per_tool: Mapping[str, Mapping[str, float | None]]) -> str:
    return ", ".join(f"{t} {fmt(v['calls'], 2)} (ok {fmt(v['success_rate'], 2)})" for t, v in per_tool.items()) or "-"


def _markdown(
    trows: Sequence[Row], keys: Sequence[str], calls: Mapping, diffs: Mapping[str, list[Diff]], metric: str, ci: float
) -> str:
    m = metric.upper()
    md = [
        f"# Calculator tasks: {m} per question type\n",
        f"{m} over each group's questions and a method's seeds with the {ci:.0%} interval over seeds x questions; "
        "avg = the mean over the groups. Calls: per episode, per tool (ok = share of calls that executed).\n",
    ]
    md.append(
        md_table(
            ["Method", *(f"{k} (n={trows[0].cells[k].n})" for k in keys), AVG],
            [[r.display, *(cell_text(r.cells[k]) for k in [*keys, AVG])] for r in trows],
        )
    )
    md.append("\n## Tool calls per episode\n")
    md.append(
        md_table(["Method", *keys], [[r.display, *(_calls_text(calls[r.label][k]) for k in keys)] for r in trows])
    )
    if diffs:
        md.append(f"\n## RL vs the cold start ({m} difference, {ci:.0%} interval over seeds x questions, paired)\n")
        body = [
            [
                a,
                *(
                    f"{fmt_signed(d.diff)} [{fmt_signed(d.ci_lower)}, {fmt_signed(d.ci_upper)}]"
                    f"{'' if d.verdict == 'within noise' else ' ' + d.verdict}"
                    for d in ds
                ),
            ]
            for a, ds in diffs.items()
        ]
        md.append(md_table(["Method", *keys, AVG], body))
    return "\n".join(md) + "\n"
