"""GiGPO's section of the summary: each step-level method (an estimator declaring ``stepwise``)
against plain GRPO from the same cold start, with the share of its later turns that shared a step
group during training (where its step advantage can differ from the episode's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from agentr1.registry import ESTIMATORS
from agentr1.report.rows import Diff, Row
from agentr1.report.summary import grpo_row


def step_credit(
    rows: Sequence[Row],
    diffs: Mapping[str, list[Diff]],
    shared: Mapping[str, float | None],
    splits: Sequence[str],
    ci: float,
) -> tuple[dict, list[str]]:
    """Each step-level method (an estimator declaring ``stepwise``, GiGPO) against plain GRPO from
    the same cold start: ``diffs[label]`` (its differences over seeds x questions, a = the method) per
    split, and ``shared[label]``, the mean share of later turns in a step group of more than one
    over its runs' training steps (the turns where its step advantage can differ from the
    episode's). Returns the facts (for report.json) and the summary's lines."""
    grpo = grpo_row(rows)
    facts: dict = {}
    lines: list[str] = []
    for r in rows:
        if r.label not in diffs or grpo is None:
            continue
        parts = [
            f"{d.split} {d.a_mean:.3f} vs {d.b_mean:.3f}, {d.diff:+.3f} [{d.ci_lower:+.3f}, {d.ci_upper:+.3f}]"
            for d in diffs[r.label]
            if d.split in splits
        ]
        test = [d for d in diffs[r.label] if d.split == splits[0]][0]
        verdict = (
            "above GRPO beyond noise"
            if test.diff > 0 and test.beyond_noise
            else "below GRPO beyond noise"
            if test.beyond_noise
            else "not judged (too few seeds)"
            if not test.judged
            else "at least GRPO's score, within noise"
            if test.diff >= 0
            else "below GRPO, within noise"
        )
        sh = shared.get(r.label)
        why = (
            f" Step groups: on average {sh:.0%} of the turns after the first share their state with another episode "
            "of the group (where the step advantage can differ from the episode's)."
            if sh is not None
            else ""
        )
        facts[r.label] = {
            "vs": grpo.label,
            "diffs": {d.split: d.as_dict() for d in diffs[r.label]},
            "step_group_shared_later": sh,
            "verdict_" + splits[0]: verdict,
        }
        lines.append(
            f"- {r.display} ({r.n_seeds} seed(s)) against {grpo.display} ({grpo.n_seeds}), same cold start, "
            f"{ci:.0%} interval: " + "; ".join(parts) + f". On {splits[0]}: {verdict}." + why
        )
    return facts, lines


def step_credit_inputs(rows: Sequence[Row], curves: Sequence, diff: Callable[[Row, Row], list[Diff]]):
    """For :func:`step_credit`: each full-mask step-level method's differences against plain GRPO
    from the same cold start (``diff(a, b)``: the report's comparison) and its runs' mean
    step-group share over their curves (:class:`agentr1.report.inputs.Curve`)."""
    grpo = grpo_row(rows)
    stepwise = [
        r
        for r in rows
        if r.kind == "rl"
        and r.method is not None
        and grpo is not None
        and ESTIMATORS.spec(r.method.estimator).meta.get("stepwise")
        and r.method.cold_start == grpo.method.cold_start
    ]
    diffs = {r.label: diff(r, grpo) for r in stepwise}
    shared = {}
    for r in stepwise:
        vals = [v for c in curves if c.run in r.runs for v in c.step_group_shared if v is not None]
        shared[r.label] = sum(vals) / len(vals) if vals else None
    return diffs, shared
