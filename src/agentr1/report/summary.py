"""The generated summary (``summary.md``): every statement is computed from the report's numbers.

* the best policy on the average over splits;
* GRPO against Base Tool Call (ratio) and against the cold start (points);
* which RL methods beat both Base Tool Call and Naive RAG beyond noise (paired bootstrap vs
  each), and which beat the cold start they started from, on the average and on each split;
* with a reference cold start (params ``sft_reference``), GRPO against it on each split;
* which ablation differences exceed the noise;
* each step-level method (GiGPO) against GRPO, with its step-group share (:func:`step_credit`).

(How GRPO's tool calls and early-answer share differ from the cold start's is the section of
:func:`agentr1.report.behaviour.behaviour_summary`.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentr1.report.methods import REFERENCE
from agentr1.report.stats import AVG
from agentr1.report.tables import Diff, Row, ablation_pairs, fmt, table3_rows

# the two baselines of the paper's Table 3 that "beat both" refers to
PAPER_BASELINES = ("base_tool_call", "naive_rag")
COLD_START = "cold_start"


def _names(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def grpo_row(rows: Sequence[Row]) -> Row | None:
    """The plain GRPO method: full mask, estimator grpo, no other override (else the first
    full-mask GRPO method)."""
    cands = [r for r in rows if r.kind == "rl" and r.method is not None and r.method.estimator == "grpo"]
    plain = [r for r in cands if not any(k != "estimator" for k in r.method.overrides)]
    return (plain or cands or [None])[0]


def summarize(rows: Sequence[Row], vs_baselines: Mapping[str, Mapping[str, list[Diff]]],
              ablation_diffs: Mapping[str, list[Diff]], splits: Sequence[str], metric: str, ci: float) -> dict:
    """The summary's facts (for report.json) and its lines (for summary.md)."""
    m = metric.upper()
    by_label = {r.label: r for r in rows}
    facts: dict = {}
    lines: list[str] = []
    split_txt = ", ".join(splits)

    def per_split(r: Row) -> str:
        return ", ".join(f"{s} {r.cells[s].mean:.3f}" for s in splits)

    # best policy
    t3 = table3_rows(rows)
    best_score = max(r.cells[AVG].mean for r in t3)
    best = [r for r in t3 if r.cells[AVG].mean == best_score]
    facts["best"] = {"labels": [r.label for r in best], "avg": best_score}
    verb = "scores" if len(best) == 1 else "tie at"
    lines.append(f"- Best method on the average {m} over {split_txt}: **{_names([r.display for r in best])}** {verb} "
                 f"{best_score:.3f} ({per_split(best[0])}).")

    # GRPO vs Base Tool Call (ratio) and vs cold start (points)
    grpo = grpo_row(rows)
    base, cold = by_label.get("base_tool_call"), by_label.get(COLD_START)
    if grpo is None:
        lines.append("- No GRPO method among params `runs`: no GRPO comparison.")
        facts["grpo"] = None
    else:
        g, b, c = grpo.cells[AVG].mean, base.cells[AVG].mean, cold.cells[AVG].mean
        ratio = g / b if b > 0 else None
        points = 100 * (g - c)
        facts["grpo"] = {"label": grpo.label, "avg": g, "base_tool_call_avg": b, "ratio_vs_base_tool_call": ratio,
                         "cold_start_avg": c, "points_vs_cold_start": points}
        if ratio is not None:
            lines.append(f"- {grpo.display} reaches {ratio:.2f}x the average {m} of {base.display} ({g:.3f} vs {b:.3f}).")
        else:
            lines.append(f"- {base.display} scores {b:.3f} average {m}, so the ratio is undefined; "
                         f"{grpo.display} scores {g:.3f}.")
        word = "above" if points >= 0 else "below"
        lines.append(f"- {grpo.display} is {abs(points):.1f} points {word} {cold.display} on the average {m} "
                     f"({g:.3f} vs {c:.3f}).")

    # RL methods vs the baselines, beyond noise on the average
    def beats(r: Row, baseline: str) -> bool:
        d = _avg(vs_baselines[r.label][baseline])
        return d.diff > 0 and d.beyond_noise

    rl = [r for r in rows if r.kind == "rl"]
    beat_both = [r for r in rl if all(beats(r, b) for b in PAPER_BASELINES)]
    beat_cold = [r for r in rl if beats(r, _start(r))]
    facts["beat_both_baselines"] = [r.label for r in beat_both]
    facts["beat_cold_start"] = [r.label for r in beat_cold]
    pb = _names([by_label[b].display for b in PAPER_BASELINES])
    rest = [r.display for r in rl if r not in beat_both]
    if beat_both:
        lines.append(f"- Beat both {pb} beyond noise (average {m}, paired bootstrap {ci:.0%} CI of the difference "
                     f"above 0 against each): {_names([r.display for r in beat_both])}"
                     + (f"; the others do not: {_names(rest)}." if rest else "."))
    else:
        lines.append(f"- No RL method beats both {pb} beyond noise on the average {m} (paired bootstrap {ci:.0%} CI).")
    lines.append(f"- Beat the cold start they started from beyond noise (average {m}): "
                 + (_names([r.display for r in beat_cold]) if beat_cold else "none") + ".")
    facts["vs_cold_start"] = {}
    for split in splits:
        diffs = {r.label: _split(vs_baselines[r.label][_start(r)], split) for r in rl}
        facts["vs_cold_start"][split] = {k: {"cold_start": _start(by_label[k]), **d.as_dict()} for k, d in diffs.items()}
        parts = [f"{by_label[k].display} {d.diff:+.3f} [{d.ci_lower:+.3f}, {d.ci_upper:+.3f}]" for k, d in diffs.items()]
        won = [by_label[k].display for k, d in diffs.items() if d.diff > 0 and d.beyond_noise]
        lines.append(f"- On {split}, each RL method minus the cold start it started from (paired bootstrap {ci:.0%} CI): "
                     + "; ".join(parts) + f". Beyond noise: {_names(won) if won else 'none'}"
                     + (" (all of them)." if len(won) == len(diffs) else "."))
    if REFERENCE in by_label and grpo is not None:
        ref, naive = by_label[REFERENCE], by_label["naive_rag"]
        for split in splits:
            d = _split(vs_baselines[grpo.label][REFERENCE], split)
            c = _split(vs_baselines[grpo.label][COLD_START], split)
            n = naive.cells[split].mean
            facts.setdefault("grpo_vs_reference", {})[split] = {**d.as_dict(), "naive_rag": n,
                                                                "ratio_vs_naive_rag": d.a_mean / n if n > 0 else None}
            lines.append(f"- {grpo.display} on {split}: {d.a_mean:.3f}"
                         + (f" ({d.a_mean / n:.1f}x {naive.display}'s {n:.3f})" if n > 0 else "")
                         + f", {c.diff:+.3f} over {by_label[COLD_START].display} ({c.b_mean:.3f}) and {d.diff:+.3f} "
                         f"[{d.ci_lower:+.3f}, {d.ci_upper:+.3f}] against {ref.display} ({d.b_mean:.3f}, the same SFT "
                         "from a better demonstrator): " + ("above it beyond noise." if d.diff > 0 and d.beyond_noise else
                                                            "above it, within noise." if d.diff > 0 else "not above it."))

    # ablations
    pairs = ablation_pairs(rows)
    beyond = [(abl, full, d) for abl, full in pairs for d in ablation_diffs[abl.label] if d.beyond_noise]
    facts["ablations_beyond_noise"] = [{"ablation": abl.label, "full": full.label, "split": d.split, "diff": d.diff}
                                       for abl, full, d in beyond]
    if not pairs:
        lines.append("- No mask ablation with a full-mask method to compare.")
    elif not beyond:
        lines.append(f"- No ablation difference exceeds the noise: every {ci:.0%} CI of Δ (ablation − full mask) "
                     "contains 0, so the paper's direction (masks on beat masks off) is not shown here.")
    else:
        parts = [f"{abl.display} vs {full.display} on {d.split}: {d.diff:+.3f} [{d.ci_lower:+.3f}, {d.ci_upper:+.3f}]"
                 for abl, full, d in beyond]
        lines.append("- Ablation differences beyond noise: " + "; ".join(parts) + ".")
        worse = sum(d.diff < 0 for _, _, d in beyond)
        verdict = ("holds: in every difference beyond noise the ablation is worse than its full-mask method"
                   if worse == len(beyond) else
                   "is reversed: in every difference beyond noise the ablation is better than its full-mask method"
                   if worse == 0 else "holds for some differences beyond noise and is reversed for others")
        within = sum(len(ablation_diffs[abl.label]) for abl, _ in pairs) - len(beyond)
        lines.append(f"- The paper's direction (masks on beat masks off) {verdict}"
                     + (f"; the other {within} differences are within noise." if within else "."))
    facts["mask_direction"] = ("not shown" if pairs and not beyond else None if not pairs else
                               "holds" if all(d.diff < 0 for _, _, d in beyond) else
                               "reversed" if all(d.diff > 0 for _, _, d in beyond) else "mixed")
    facts["lines"] = lines
    return facts


def step_credit(rows: Sequence[Row], diffs: Mapping[str, list[Diff]], shared: Mapping[str, float | None],
                splits: Sequence[str], ci: float) -> tuple[dict, list[str]]:
    """Each step-level method (an estimator declaring ``stepwise``, GiGPO) against plain GRPO from
    the same cold start: ``diffs[label]`` (its paired bootstrap differences, a = the method) per
    split, and ``shared[label]``, the mean share of later turns in a step group of more than one
    over its runs' training steps (the turns where its step advantage can differ from the
    episode's). Returns the facts (for report.json) and the summary's lines."""
    grpo = grpo_row(rows)
    facts: dict = {}
    lines: list[str] = []
    for r in rows:
        if r.label not in diffs or grpo is None:
            continue
        parts = [f"{d.split} {d.a_mean:.3f} vs {d.b_mean:.3f}, {d.diff:+.3f} [{d.ci_lower:+.3f}, {d.ci_upper:+.3f}]"
                 for d in diffs[r.label] if d.split in splits]
        test = [d for d in diffs[r.label] if d.split == splits[0]][0]
        verdict = ("above GRPO beyond noise" if test.diff > 0 and test.beyond_noise else
                   "below GRPO beyond noise" if test.beyond_noise else
                   "at least GRPO's score, within noise" if test.diff >= 0 else "below GRPO, within noise")
        sh = shared.get(r.label)
        why = (f" Step groups: on average {sh:.0%} of the turns after the first share their state with another episode "
               "of the group (where the step advantage can differ from the episode's)." if sh is not None else "")
        facts[r.label] = {"vs": grpo.label, "diffs": {d.split: d.as_dict() for d in diffs[r.label]},
                          "step_group_shared_later": sh, "verdict_" + splits[0]: verdict}
        lines.append(f"- {r.display} ({r.n_seeds} seed(s)) against {grpo.display} ({grpo.n_seeds}), same cold start, "
                     f"paired bootstrap {ci:.0%} CI: " + "; ".join(parts) + f". On {splits[0]}: {verdict}." + why)
    return facts, lines


def _avg(diffs: list[Diff]) -> Diff:
    return _split(diffs, AVG)


def _split(diffs: list[Diff], split: str) -> Diff:
    return next(d for d in diffs if d.split == split)


def _start(r: Row) -> str:
    """The baseline an RL row started from: its method's cold start."""
    return r.method.cold_start if r.method is not None else COLD_START


def summary_markdown(facts: Mapping, rows: Sequence[Row], metric: str, splits: Sequence[str]) -> str:
    m = metric.upper()
    t3 = table3_rows(rows)
    head = [f"# Agent-R1 reproduction: summary ({m})", "",
            f"Splits: {', '.join(splits)}; {len(t3)} policies in Table 3 "
            f"({sum(r.kind == 'rl' for r in t3)} RL methods, {sum(r.n_seeds for r in t3 if r.kind == 'rl')} runs), "
            f"{sum(r.kind == 'ablation' for r in rows)} ablation(s). Tables: table3.md, table4.md, breakdown.md, "
            "behaviour.md; plots: plots/.", ""]
    table = ["| Method | " + " | ".join(splits) + " | avg |", "|---|" + "---|" * (len(splits) + 1)]
    table += [f"| {r.display} | " + " | ".join(fmt(r.cells[k].mean) for k in [*splits, AVG]) + " |" for r in t3]
    return "\n".join([*head, *facts["lines"], "", *table, ""])
