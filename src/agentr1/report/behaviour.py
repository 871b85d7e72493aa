"""What the policies do besides scoring: ``behaviour.md`` / ``behaviour.csv``, ``report.json``
``behaviour`` and a section of ``summary.md``.

For every policy row of the report (the baselines, the cold start, each RL method and ablation,
with a method's seeds together) on every split, from the episodes of ``episodes.jsonl``:

* the report's metric (EM by default): its mean over the questions (Table 3's mean);
* ``tool_calls``: call attempts per episode (valid or not);
* ``early_answer``, the **early-answer share**: of the multi-hop episodes (hops >= 2), the share
  that answered before their retrievals had returned every supporting passage (the per-episode
  ``early_answer`` of :mod:`agentr1.eval.support`; naive RAG makes no search, so its retrieved
  passages are those of the one retrieval in its prompt). None (``—``) for a group without
  multi-hop episodes and for an evaluation that predates the field. A multi-hop question without
  supporting ids (a FlashRAG record whose support could not be derived) is never early and still
  counts among the multi-hop episodes;
* ``format_ok``: the share of episodes with a valid format (every call valid and an answer);
* ``answered``: the share of episodes that gave an answer;
* the **failure breakdown**: the shares of episodes that are right (the metric is 1), wrong with
  every supporting passage retrieved (``wrong_all``: a reading failure, the evidence was in the
  context), wrong with some of them (``wrong_some``: the chain broke on the way) and wrong with
  none (``wrong_none``); they sum to 1 over the questions that have supporting passages (the
  per-episode ``support_found`` of :mod:`agentr1.eval.support`), None for an evaluation that
  predates the field.

Each number is computed per run, then averaged over a method's seeds (evaluated on the same
questions, :func:`agentr1.report.rows.seed_average`); ``n`` is the group's questions and
``n_multihop`` its multi-hop ones. The same numbers per question type and per number of hops
(``by`` = ``type`` | ``hops``; ``all`` = the whole split).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentr1.eval.support import MULTI_HOP
from agentr1.report.inputs import Evaluation, Question
from agentr1.report.rows import Row, hops_key
from agentr1.report.summary import COLD_START, PAPER_BASELINES, grpo_row
from agentr1.report.tables import csv_text, fmt, md_table, split_header

FIELDS = ("score", "tool_calls", "early_answer", "format_ok", "answered")
BREAKDOWN = ("right", "wrong_all", "wrong_some", "wrong_none")
BY = ("all", "type", "hops")
NAIVE_RAG = "naive_rag"


def _mean(values: Iterable[float | None]) -> float | None:
    """The mean; None without values or when one is None (not recorded)."""
    values = list(values)
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def _multi_hop(q: Question) -> bool:
    return q.hops is not None and q.hops >= MULTI_HOP


def _failure(q: Question) -> str | None:
    """The breakdown class of one episode (module docstring); None without supporting passages."""
    found = q.values.get("support_found")
    if found is None:
        return None
    if q.score >= 1:
        return "right"
    return "wrong_all" if found >= 1 else "wrong_some" if found > 0 else "wrong_none"


def _breakdown(qs: Sequence[Question]) -> dict[str, float | None]:
    """The failure breakdown's shares over the questions of ``qs`` that have supporting passages
    (all None when an episode row predates ``support_found``)."""
    if any("support_found" not in q.values for q in qs):
        return dict.fromkeys(BREAKDOWN)
    classes = [c for c in map(_failure, qs) if c is not None]
    return {k: (sum(c == k for c in classes) / len(classes) if classes else None) for k in BREAKDOWN}


def _stats(qs: Sequence[Question]) -> dict[str, Any]:
    """One run's numbers over the questions ``qs`` (module docstring)."""
    multi = [q for q in qs if _multi_hop(q)]
    return {
        "n": len(qs),
        "n_multihop": len(multi),
        "score": _mean(q.score for q in qs),
        "tool_calls": _mean(q.values.get("tool_calls") for q in qs),
        "early_answer": _mean(q.values.get("early_answer") for q in multi),
        "format_ok": _mean(q.values.get("format_ok") for q in qs),
        "answered": _mean(q.values.get("answered") for q in qs),
        **_breakdown(qs),
    }


def _group(q: Question, by: str) -> str:
    return "all" if by == "all" else q.type if by == "type" else hops_key(q.hops)


def _order(group: str) -> tuple:
    return (group == "unknown", int(group) if group.isdigit() else 0, group)


def behaviour(rows: Sequence[Row], evals: Mapping[str, Evaluation], splits: Sequence[str]) -> dict:
    """``{split: {by: {group: {policy label: {n, n_multihop, score, tool_calls, early_answer,
    format_ok, answered}}}}}`` (module docstring)."""
    out: dict = {}
    for split in splits:
        out[split] = {}
        for by in BY:
            groups: dict[str, dict[str, dict]] = {}
            for r in rows:
                per_run = []
                for run in r.runs:
                    grouped: dict[str, list[Question]] = {}
                    for q in evals[run].questions[split].values():
                        grouped.setdefault(_group(q, by), []).append(q)
                    per_run.append({g: _stats(qs) for g, qs in grouped.items()})
                for g, first in per_run[0].items():
                    runs = [p.get(g, {}) for p in per_run]
                    groups.setdefault(g, {})[r.label] = {
                        "n": first["n"],
                        "n_multihop": first["n_multihop"],
                        **{f: _mean(s.get(f) for s in runs) for f in (*FIELDS, *BREAKDOWN)},
                    }
            out[split][by] = {g: groups[g] for g in sorted(groups, key=_order)}
    return out


def _name(r: Row) -> str:
    return f"{r.display} *" if r.label == NAIVE_RAG else r.display


def _group_title(by: str, group: str, n: int) -> str:
    if by == "hops" and group != "unknown":
        return f"{group} hop{'' if group == '1' else 's'} (n={n})"
    return f"{group} (n={n})"


def _by_tables(rows: Sequence[Row], split_data: Mapping, field: str, count: str, digits: int) -> str:
    """One table: a column per question type then per number of hops (groups where ``count`` > 0)."""
    cols = [(by, g, max(p[count] for p in v.values())) for by in ("type", "hops") for g, v in split_data[by].items()]
    cols = [c for c in cols if c[2] > 0]
    header = ["Method", *(_group_title(by, g, n) for by, g, n in cols)]
    body = [
        [_name(r), *(fmt(split_data[by][g].get(r.label, {}).get(field), digits) for by, g, _ in cols)] for r in rows
    ]
    return md_table(header, body)


def _breakdown_table(rows: Sequence[Row], split_data: Mapping) -> str:
    """One row per policy, a column for the whole split then one per question type (the agent's
    policies: naive RAG and the untrained base are left out, their episodes make no search)."""
    cols = [("all", "all")] + [("type", g) for g in split_data["type"]]
    header = ["Method", *(f"{g} (n={max(p['n'] for p in split_data[by][g].values())})" for by, g in cols)]

    def cell(s: Mapping | None) -> str:
        if s is None or any(s.get(k) is None for k in BREAKDOWN):
            return "—"
        return " / ".join(f"{s[k]:.2f}" for k in BREAKDOWN)

    body = [
        [_name(r), *(cell(split_data[by][g].get(r.label)) for by, g in cols)]
        for r in rows
        if r.label not in PAPER_BASELINES
    ]
    return md_table(header, body)


def _split_markdown(rows: Sequence[Row], d: Mapping, split: str, metric: str) -> list[str]:
    """behaviour.md's section of one split: the per-policy table, tool calls and early answers by
    question type and hops, the failure breakdown."""
    whole = d["all"]["all"]
    first = whole[rows[0].label]
    header = [
        "Method",
        "Runs",
        metric.upper(),
        "Tool calls / episode",
        "Early answer (multi-hop)",
        "Format valid",
        "Answered",
    ]
    body = [
        [
            _name(r),
            ", ".join(r.runs),
            fmt(s["score"]),
            fmt(s["tool_calls"], 2),
            fmt(s["early_answer"]),
            fmt(s["format_ok"]),
            fmt(s["answered"]),
        ]
        for r in rows
        for s in [whole[r.label]]
    ]
    return [
        f"## {split_header(split, metric)}: {first['n']} questions, {first['n_multihop']} multi-hop\n",
        md_table(header, body),
        f"### {split}: tool calls per episode by question type and hops\n",
        _by_tables(rows, d, "tool_calls", "n", 2),
        f"### {split}: early-answer share by question type and hops (n = multi-hop episodes)\n",
        _by_tables(rows, d, "early_answer", "n_multihop", 3),
        f"### {split}: failure breakdown by question type\n",
        "Each cell: right / wrong with every supporting passage retrieved (reading) / wrong with some "
        "(a broken chain) / wrong with none, as shares of the group's episodes.\n",
        _breakdown_table(rows, d),
    ]


def _split_csv_rows(rows: Sequence[Row], d: Mapping, split: str) -> list[list]:
    """behaviour.csv's rows of one split: one per grouping (``BY``), group and policy."""
    return [
        [
            split,
            by,
            g,
            r.label,
            r.display,
            r.kind,
            ";".join(r.runs),
            s["n"],
            s["n_multihop"],
            *(s[f] for f in (*FIELDS, *BREAKDOWN)),
        ]
        for by in BY
        for g, per in d[by].items()
        for r in rows
        if (s := per.get(r.label)) is not None
    ]


def behaviour_tables(rows: Sequence[Row], data: Mapping, splits: Sequence[str], metric: str) -> tuple[str, str]:
    """behaviour.md and behaviour.csv (long: split, by, group, policy, ..., one row per policy and group)."""
    md = [
        "# Behaviour: what the policies do besides scoring\n",
        f"Per policy (a method's seeds averaged) and split: {metric.upper()}; tool calls per episode (call attempts, "
        "valid or not); **early answer** = the share of multi-hop episodes (hops >= 2) that answered before their "
        "searches had retrieved every supporting passage of the question; format valid = every call valid and "
        "a final answer; answered = gave an answer. — = no multi-hop episode in the group, or an evaluation "
        "that predates the early-answer field (re-run its evaluate stage).\n",
        "\\* Naive RAG makes no search: its retrieved passages are the ones its prompt holds (one retrieval, "
        "the question as the query).\n",
    ]
    cols = [
        "split",
        "by",
        "group",
        "policy",
        "name",
        "kind",
        "runs",
        "n",
        "n_multihop",
        metric,
        *FIELDS[1:],
        *BREAKDOWN,
    ]
    csv_rows = []
    for split in splits:
        md += _split_markdown(rows, data[split], split, metric)
        csv_rows += _split_csv_rows(rows, data[split], split)
    return "\n".join(md), csv_text(cols, csv_rows)


# how a difference over every split reads: (all below 0, all above 0, all 0, otherwise)
WORDS = {
    "tool_calls": (
        "fewer tool calls per episode",
        "more tool calls per episode",
        "as many tool calls per episode",
        "tool calls per episode that move differently across splits",
    ),
    "early_answer": (
        "a smaller early-answer share",
        "a larger early-answer share",
        "the same early-answer share",
        "an early-answer share that moves differently across splits",
    ),
}


def _direction(diffs: Sequence[float], words: tuple[str, str, str, str]) -> str:
    down, up, same, mixed = words
    if all(d < 0 for d in diffs):
        return down
    if all(d > 0 for d in diffs):
        return up
    return same if all(d == 0 for d in diffs) else mixed


def _change(field: str, pairs: Mapping[str, tuple[float | None, float | None]], digits: int) -> str | None:
    """``<direction> (<split> a → b, ±d; ...)`` over the splits (a = the cold start, b = GRPO, d = b - a),
    or None when a value is not recorded."""
    if any(a is None or b is None for a, b in pairs.values()):
        return None
    steps = "; ".join(f"{s} {a:.{digits}f} → {b:.{digits}f}, {b - a:+.{digits}f}" for s, (a, b) in pairs.items())
    return f"{_direction([b - a for a, b in pairs.values()], WORDS[field])} ({steps})"


def behaviour_summary(rows: Sequence[Row], data: Mapping, splits: Sequence[str]) -> tuple[dict | None, list[str]]:
    """GRPO against the cold start (:func:`agentr1.report.summary.grpo_row`): ``(facts, lines of the
    summary.md section)``; the facts hold, per split and field, both values and the difference."""
    lines = ["## What RL changed besides the score", ""]
    grpo, cold = grpo_row(rows), next((r for r in rows if r.label == COLD_START), None)
    if grpo is None or cold is None:
        lines += ["No GRPO method among params `runs`: no behaviour comparison (per policy: behaviour.md).", ""]
        return None, lines
    whole = {s: data[s]["all"]["all"] for s in splits}
    facts: dict = {"policy": grpo.label, "baseline": COLD_START, "splits": {s: {} for s in splits}}
    changes = {}
    for f, digits in (("tool_calls", 2), ("early_answer", 3)):
        pairs = {s: (whole[s][cold.label][f], whole[s][grpo.label][f]) for s in splits}
        for s, (a, b) in pairs.items():
            facts["splits"][s][f] = {COLD_START: a, grpo.label: b, "diff": None if a is None or b is None else b - a}
        changes[f] = _change(f, pairs, digits)
    missing = "not recorded in these evaluations (they predate it: re-run the evaluate stages)"
    text = (
        f"- {grpo.display} against {cold.display}: {changes['tool_calls'] or 'tool calls per episode ' + missing}"
        + (
            f" and {changes['early_answer']}, the share of multi-hop episodes answered before all their supporting "
            "passages were retrieved."
            if changes["early_answer"]
            else f"; the early-answer share is {missing}."
        )
    )
    facts["line"] = text
    lines += [
        text,
        "",
        "| Method | " + " | ".join(f"{s} calls | {s} early" for s in splits) + " |",
        "|---|" + "---|---|" * len(splits),
    ]
    lines += [
        f"| {_name(r)} | "
        + " | ".join(
            f"{fmt(whole[s][r.label]['tool_calls'], 2)} | {fmt(whole[s][r.label]['early_answer'])}" for s in splits
        )
        + " |"
        for r in rows
        if r.kind != "ablation"
    ]
    lines += [
        "",
        "calls = tool calls per episode; early = early-answer share of the multi-hop episodes; "
        "\\* no search (its prompt holds one retrieval). Per question type and hops, and the ablations: "
        "behaviour.md.",
        "",
    ]
    return facts, lines
