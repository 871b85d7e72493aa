"""The generated summary (``summary.md``): every statement is computed from the report's numbers,
and every "beats", "above" or "direction" is a verdict (:attr:`agentr1.report.rows.Diff.verdict`:
the two-level interval over training seeds x questions excludes 0, and each RL row holds
``report.min_seeds`` seeds); a point estimate is called one.

* the highest mean on the average over splits (a point estimate);
* GRPO against Base Tool Call (ratio of means) and against the cold start (difference, verdict);
* which RL methods beat both Base Tool Call and Naive RAG beyond noise, and which beat the cold
  start they started from, on the average and on each split;
* with a reference cold start (params ``sft_reference``), GRPO against it on each split;
* the RL methods against each other from the same cold start, pairwise (``vs_methods``);
* which ablation differences exceed the noise, and so the paper's direction;
* each step-level method (GiGPO) against GRPO, with its step-group share (:func:`step_credit`).

(How GRPO's tool calls and early-answer share differ from the cold start's is the section of
:func:`agentr1.report.behaviour.behaviour_summary`.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentr1.report.methods import REFERENCE
from agentr1.report.rows import Diff, Row, ablation_pairs, table3_rows
from agentr1.report.stats import AVG
from agentr1.report.tables import fmt

# the two baselines of the paper's Table 3 that "beat both" refers to
PAPER_BASELINES = ("base_tool_call", "naive_rag")
COLD_START = "cold_start"


def _names(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _ci(d: Diff) -> str:
    return f"{d.diff:+.3f} [{d.ci_lower:+.3f}, {d.ci_upper:+.3f}]"


def grpo_row(rows: Sequence[Row]) -> Row | None:
    """The plain GRPO method: full mask, estimator grpo, no other override (else the first
    full-mask GRPO method)."""
    cands = [r for r in rows if r.kind == "rl" and r.method is not None and r.method.estimator == "grpo"]
    plain = [r for r in cands if not any(k != "estimator" for k in r.method.overrides)]
    return (plain or cands or [None])[0]


def method_pairs(rows: Sequence[Row]) -> list[tuple[Row, Row]]:
    """Every pair of full-mask RL methods that start from the same cold start, in row order."""
    rl = [r for r in rows if r.kind == "rl" and r.method is not None]
    return [(a, b) for i, a in enumerate(rl) for b in rl[i + 1 :] if a.method.cold_start == b.method.cold_start]


def summarize(
    rows: Sequence[Row],
    vs_baselines: Mapping[str, Mapping[str, list[Diff]]],
    ablation_diffs: Mapping[str, list[Diff]],
    splits: Sequence[str],
    metric: str,
    ci: float,
    vs_methods: Mapping[tuple[str, str], list[Diff]] | None = None,
    min_seeds: int = 3,
) -> dict:
    """The summary's facts (for report.json) and its lines (for summary.md), in the order a reader
    meets them: the rows not judged, the highest mean, GRPO against the baselines, every RL method
    against the baselines, GRPO against the reference cold start, the methods against each other,
    the ablations."""
    by_label = {r.label: r for r in rows}
    facts: dict = {"min_seeds": min_seeds}
    lines = _not_judged_lines(rows, min_seeds, facts)
    lines += _best_lines(rows, splits, metric, facts)
    grpo = grpo_row(rows)
    lines += _grpo_lines(grpo, by_label, vs_baselines, metric, facts)
    lines += _baseline_lines(rows, by_label, vs_baselines, splits, metric, ci, facts)
    if REFERENCE in by_label and grpo is not None:
        lines += _reference_lines(grpo, by_label, vs_baselines, splits, facts)
    lines += _method_lines(vs_methods or {}, by_label, splits, ci, facts)
    lines += _ablation_lines(rows, ablation_diffs, ci, facts)
    facts["lines"] = lines
    return facts


def _not_judged_lines(rows: Sequence[Row], min_seeds: int, facts: dict) -> list[str]:
    """The RL rows with fewer than ``min_seeds`` seeds: listed, never judged."""
    few = [r for r in rows if r.kind in ("rl", "ablation") and r.n_seeds < min_seeds]
    facts["not_judged"] = [r.label for r in few]
    if not few:
        return []
    return [
        f"- Not judged (a verdict needs {min_seeds} training seeds per RL row, params report.min_seeds): "
        + _names([f"{r.display} ({r.n_seeds} seed{'s' if r.n_seeds != 1 else ''})" for r in few])
        + ". Their differences are listed below, never called beyond noise."
    ]


def _per_split(r: Row, splits: Sequence[str]) -> str:
    return ", ".join(f"{s} {r.cells[s].mean:.3f}" for s in splits)


def _best_lines(rows: Sequence[Row], splits: Sequence[str], metric: str, facts: dict) -> list[str]:
    """The highest mean on the average (a point estimate; the verdicts follow)."""
    t3 = table3_rows(rows)
    best_score = max(r.cells[AVG].mean for r in t3)
    best = [r for r in t3 if r.cells[AVG].mean == best_score]
    facts["best"] = {"labels": [r.label for r in best], "avg": best_score}
    verb = "scores" if len(best) == 1 else "tie at"
    return [
        f"- Highest mean on the average {metric.upper()} over {', '.join(splits)} (a point estimate): "
        f"**{_names([r.display for r in best])}** {verb} {best_score:.3f} ({_per_split(best[0], splits)})."
    ]


def _grpo_lines(
    grpo: Row | None,
    by_label: Mapping[str, Row],
    vs_baselines: Mapping[str, Mapping[str, list[Diff]]],
    metric: str,
    facts: dict,
) -> list[str]:
    """GRPO against Base Tool Call (ratio of means) and against the cold start (difference, verdict)."""
    m = metric.upper()
    if grpo is None:
        facts["grpo"] = None
        return ["- No GRPO method among params `runs`: no GRPO comparison."]
    base, cold = by_label.get("base_tool_call"), by_label.get(COLD_START)
    g, b, c = grpo.cells[AVG].mean, base.cells[AVG].mean, cold.cells[AVG].mean
    ratio = g / b if b > 0 else None
    d = _avg(vs_baselines[grpo.label][COLD_START])
    facts["grpo"] = {
        "label": grpo.label,
        "avg": g,
        "base_tool_call_avg": b,
        "ratio_vs_base_tool_call": ratio,
        "cold_start_avg": c,
        "points_vs_cold_start": 100 * (g - c),
        "vs_cold_start": d.as_dict(),
    }
    if ratio is not None:
        lines = [f"- {grpo.display}'s mean average {m} is {ratio:.2f}x {base.display}'s ({g:.3f} vs {b:.3f})."]
    else:
        lines = [
            f"- {base.display} scores {b:.3f} average {m}, so the ratio is undefined; {grpo.display} scores {g:.3f}."
        ]
    lines.append(
        f"- {grpo.display} ({grpo.n_seeds} seeds) minus {cold.display} on the average {m}: {_ci(d)} "
        f"({g:.3f} vs {c:.3f}): {d.verdict}."
    )
    return lines


def _baseline_lines(
    rows: Sequence[Row],
    by_label: Mapping[str, Row],
    vs_baselines: Mapping[str, Mapping[str, list[Diff]]],
    splits: Sequence[str],
    metric: str,
    ci: float,
    facts: dict,
) -> list[str]:
    """Every RL method against the paper's baselines and the cold start it started from: beyond
    noise on the average, and per split with each interval."""
    m = metric.upper()
    rl = [r for r in rows if r.kind == "rl"]

    def beats(r: Row, baseline: str) -> bool:
        d = _avg(vs_baselines[r.label][baseline])
        return d.diff > 0 and d.beyond_noise

    beat_both = [r for r in rl if all(beats(r, b) for b in PAPER_BASELINES)]
    beat_cold = [r for r in rl if beats(r, _start(r))]
    facts["beat_both_baselines"] = [r.label for r in beat_both]
    facts["beat_cold_start"] = [r.label for r in beat_cold]
    pb = _names([by_label[b].display for b in PAPER_BASELINES])
    rest = [r.display for r in rl if r not in beat_both]
    if beat_both:
        lines = [
            f"- Beat both {pb} beyond noise (average {m}, {ci:.0%} interval of the difference above 0 "
            f"against each): {_names([r.display for r in beat_both])}"
            + (f"; the others do not: {_names(rest)}." if rest else ".")
        ]
    else:
        lines = [f"- No RL method beats both {pb} beyond noise on the average {m} ({ci:.0%} intervals)."]
    lines.append(
        f"- Beat the cold start they started from beyond noise (average {m}): "
        + (_names([r.display for r in beat_cold]) if beat_cold else "none")
        + "."
    )
    facts["vs_cold_start"] = {}
    for split in splits:
        diffs = {r.label: _split(vs_baselines[r.label][_start(r)], split) for r in rl}
        facts["vs_cold_start"][split] = {
            k: {"cold_start": _start(by_label[k]), **d.as_dict()} for k, d in diffs.items()
        }
        parts = [f"{by_label[k].display} {_ci(d)}" for k, d in diffs.items()]
        won = [by_label[k].display for k, d in diffs.items() if d.diff > 0 and d.beyond_noise]
        lines.append(
            f"- On {split}, each RL method minus the cold start it started from ({ci:.0%} interval): "
            + "; ".join(parts)
            + f". Beyond noise: {_names(won) if won else 'none'}"
            + (" (all of them)." if won and len(won) == len(diffs) else ".")
        )
    return lines


def _reference_lines(
    grpo: Row, by_label: Mapping[str, Row], vs_baselines: Mapping, splits: Sequence[str], facts: dict
) -> list[str]:
    """GRPO against the reference cold start (the same SFT from a better demonstrator), per split."""
    ref, naive, lines = by_label[REFERENCE], by_label["naive_rag"], []
    for split in splits:
        d = _split(vs_baselines[grpo.label][REFERENCE], split)
        c = _split(vs_baselines[grpo.label][COLD_START], split)
        n = naive.cells[split].mean
        facts.setdefault("grpo_vs_reference", {})[split] = {
            **d.as_dict(),
            "naive_rag": n,
            "ratio_vs_naive_rag": d.a_mean / n if n > 0 else None,
        }
        verdict = (
            "above it beyond noise."
            if d.diff > 0 and d.beyond_noise
            else "below it beyond noise."
            if d.beyond_noise
            else f"{d.verdict}."
        )
        lines.append(
            f"- {grpo.display} on {split}: {d.a_mean:.3f}"
            + (f" ({d.a_mean / n:.1f}x {naive.display}'s mean {n:.3f})" if n > 0 else "")
            + f", {_ci(c)} against {by_label[COLD_START].display} ({c.verdict}) and {_ci(d)} against "
            f"{ref.display} ({d.b_mean:.3f}, the same SFT from a better demonstrator): {verdict}"
        )
    return lines


def _method_lines(
    vs_methods: Mapping[tuple[str, str], list[Diff]],
    by_label: Mapping[str, Row],
    splits: Sequence[str],
    ci: float,
    facts: dict,
) -> list[str]:
    """Who beats whom among the RL methods from one cold start: the pairs beyond noise per split."""
    facts["vs_methods"] = {f"{a} - {b}": {d.split: d.as_dict() for d in ds} for (a, b), ds in vs_methods.items()}
    if not vs_methods:
        return []
    lines = []
    for split in splits:
        diffs = [(a, b, _split(ds, split)) for (a, b), ds in vs_methods.items()]
        won = [(a, b, d) if d.diff > 0 else (b, a, d) for a, b, d in diffs if d.beyond_noise]
        judged = sum(d.judged for _, _, d in diffs)
        if won:
            parts = [
                f"{by_label[w].display} over {by_label[v].display} {abs(d.diff):.3f} "
                f"[{min(abs(d.ci_lower), abs(d.ci_upper)):.3f}, {max(abs(d.ci_lower), abs(d.ci_upper)):.3f}]"
                for w, v, d in won
            ]
            lines.append(
                f"- RL methods against each other on {split} (same cold start, {len(diffs)} pairs, {ci:.0%} "
                f"intervals): beyond noise " + "; ".join(parts) + f"; the other {judged - len(won)} judged "
                "pairs are within noise."
            )
        else:
            widest = max(diffs, key=lambda x: abs(x[2].diff))
            lines.append(
                f"- RL methods against each other on {split} (same cold start, {len(diffs)} pairs, {ci:.0%} "
                f"intervals): no difference beyond noise ({judged} judged; the largest, "
                f"{by_label[widest[0]].display} minus {by_label[widest[1]].display}, {_ci(widest[2])})."
            )
    return lines


def _ablation_lines(rows: Sequence[Row], ablation_diffs: Mapping[str, list[Diff]], ci: float, facts: dict) -> list[str]:
    """The mask ablations beyond noise and the paper's direction (masks on beat masks off) from them."""
    pairs = ablation_pairs(rows)
    beyond = [(abl, full, d) for abl, full in pairs for d in ablation_diffs[abl.label] if d.beyond_noise]
    facts["ablations_beyond_noise"] = [
        {"ablation": abl.label, "full": full.label, "split": d.split, "diff": d.diff} for abl, full, d in beyond
    ]
    judged = sum(d.judged for abl, _ in pairs for d in ablation_diffs[abl.label])
    lines = []
    if not pairs:
        lines.append("- No mask ablation with a full-mask method to compare.")
    elif not judged:
        lines.append(
            "- No ablation difference is judged (too few seeds), so the paper's direction (masks on beat masks "
            "off) is neither shown nor contradicted here."
        )
    elif not beyond:
        lines.append(
            f"- No ablation difference exceeds the noise: every judged {ci:.0%} interval of Δ (ablation − full "
            "mask) contains 0, so the paper's direction (masks on beat masks off) is not shown here."
        )
    else:
        parts = [f"{abl.display} vs {full.display} on {d.split}: {_ci(d)}" for abl, full, d in beyond]
        lines.append("- Ablation differences beyond noise: " + "; ".join(parts) + ".")
        worse = sum(d.diff < 0 for _, _, d in beyond)
        verdict = (
            "holds: in every difference beyond noise the ablation is worse than its full-mask method"
            if worse == len(beyond)
            else "is reversed: in every difference beyond noise the ablation is better than its full-mask method"
            if worse == 0
            else "holds for some differences beyond noise and is reversed for others"
        )
        within = judged - len(beyond)
        lines.append(
            f"- The paper's direction (masks on beat masks off) {verdict}"
            + (f"; the other {within} judged differences are within noise." if within else ".")
        )
    facts["mask_direction"] = (
        None
        if not pairs
        else "not judged"
        if not judged
        else "not shown"
        if not beyond
        else "holds"
        if all(d.diff < 0 for _, _, d in beyond)
        else "reversed"
        if all(d.diff > 0 for _, _, d in beyond)
        else "mixed"
    )
    return lines


def _avg(diffs: list[Diff]) -> Diff:
    return _split(diffs, AVG)


def _split(diffs: list[Diff], split: str) -> Diff:
    return next(d for d in diffs if d.split == split)


def _start(r: Row) -> str:
    """The baseline an RL row started from: its method's cold start."""
    return r.method.cold_start if r.method is not None else COLD_START


def summary_markdown(facts: Mapping, rows: Sequence[Row], metric: str, splits: Sequence[str], method: str = "") -> str:
    """The summary page: the header (what was compared, ``method``: how the intervals are made), the
    lines of :func:`summarize` and the table of means."""
    m = metric.upper()
    t3 = table3_rows(rows)
    seeds = sorted({r.n_seeds for r in rows if r.kind != "baseline"})
    head = [
        f"# Agent-R1 reproduction: summary ({m})",
        "",
        f"Splits: {', '.join(splits)}; {len(t3)} policies in Table 3 "
        f"({sum(r.kind == 'rl' for r in t3)} RL methods, {sum(r.n_seeds for r in t3 if r.kind == 'rl')} runs), "
        f"{sum(r.kind == 'ablation' for r in rows)} ablation(s); every RL row and ablation is "
        f"{'/'.join(map(str, seeds))} training seed(s), each cold start one SFT run. Tables: table3.md, table4.md, "
        "breakdown.md, behaviour.md; plots: plots/.",
        "",
    ]
    if method:
        head += [
            f"{method}; a difference is beyond noise when its interval excludes 0 and each RL row has "
            f"{facts.get('min_seeds', 3)}+ seeds.",
            "",
        ]
    table = ["| Method | " + " | ".join(splits) + " | avg |", "|---|" + "---|" * (len(splits) + 1)]
    table += [f"| {r.display} | " + " | ".join(fmt(r.cells[k].mean) for k in [*splits, AVG]) + " |" for r in t3]
    return "\n".join([*head, *facts["lines"], "", *table, ""])
