"""The report's numbers: a row per policy (its seeds' per-question scores, the cells of mean ± std
over seeds with the two-level interval), the differences between rows, the ablation pairs and the
breakdown per question type and hops. :mod:`agentr1.report.tables` writes them as tables.

* a **row** is a baseline (one SFT run) or an RL method (its seeds averaged per question); each cell
  is the mean over seeds and questions with its interval (:func:`agentr1.report.stats.seeds_questions`);
* a **difference** ``a - b`` resamples both rows' seeds (each row's on their own; one draw for both
  where they are the same training seeds with ``report.pair_seeds: true``) and the questions they
  share (paired).

A difference is **judged** only when each of its RL rows has at least ``min_seeds`` training seeds
(``report.min_seeds``; the baselines are one SFT run each and need none): "beyond noise" = judged
and its interval excludes 0. With fewer seeds the report says "not judged" - one seed is an anecdote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from agentr1.errors import StageError
from agentr1.report.inputs import Evaluation, Question, eval_stage
from agentr1.report.methods import BASELINES, Method
from agentr1.report.stats import AVG, paired, seed_mean_std, seeds_questions


@dataclass
class Cell:
    mean: float
    std: float | None
    ci_lower: float
    ci_upper: float
    n: int | None  # questions (None for the average over splits)

    def as_dict(self) -> dict:
        return {"mean": self.mean, "std": self.std, "ci_lower": self.ci_lower, "ci_upper": self.ci_upper, "n": self.n}


@dataclass
class Row:
    """A policy of the report: a baseline or an RL method (its seeds averaged per question)."""

    label: str
    display: str
    kind: str  # baseline | rl | ablation
    runs: list[str]
    method: Method | None
    scores: dict[str, dict[str, float]]  # per split, question id -> the score averaged over the runs
    questions: dict[str, dict[str, Question]]
    seed_scores: dict[str, dict[str, tuple[float, ...]]] = field(default_factory=dict)  # id -> one per run
    per_seed: dict[str, dict[str, float]] = field(default_factory=dict)
    cells: dict[str, Cell] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.seed_scores and len(self.runs) == 1:  # one run: its scores are its seed's
            self.seed_scores = {s: {q: (v,) for q, v in per_q.items()} for s, per_q in self.scores.items()}

    @property
    def n_seeds(self) -> int:
        return len(self.runs)

    def matrix(self, split: str, ids: Sequence[str]) -> np.ndarray:
        """``(runs, len(ids))``: the runs' scores on questions ``ids`` of ``split``."""
        per_q = self.seed_scores[split]
        return np.array([[per_q[q][s] for q in ids] for s in range(self.n_seeds)], dtype=float)

    @property
    def seeds(self) -> list[int] | None:
        """The training seed of each run (``None`` for a baseline: one SFT run, no seed level)."""
        return list(self.method.seeds) if self.method is not None and self.method.seeds else None

    def judgeable(self, min_seeds: int) -> bool:
        """Whether a verdict may rest on this row: a baseline (one SFT run, stated), or enough seeds."""
        return self.kind == "baseline" or self.n_seeds >= min_seeds


@dataclass
class Diff:
    """``a - b`` on one split (or ``avg``), paired per question."""

    a: str
    b: str
    split: str
    a_mean: float
    b_mean: float
    diff: float
    ci_lower: float
    ci_upper: float
    n: int | None
    p_value: float | None = None
    judged: bool = True  # both rows have enough seeds for a verdict (module docstring)
    seeds: tuple[int, int] = (1, 1)  # training seeds of a and b
    paired_seeds: bool = False  # one seed draw for both rows (the same training seeds)

    @property
    def beyond_noise(self) -> bool:
        return self.judged and (self.ci_lower > 0 or self.ci_upper < 0)

    @property
    def verdict(self) -> str:
        """``beyond noise``, ``within noise`` or ``not judged`` (too few seeds)."""
        return "not judged" if not self.judged else "beyond noise" if self.beyond_noise else "within noise"

    def as_dict(self) -> dict:
        """The numbers (the policies and the split are the keys it is stored under)."""
        return {
            "a_mean": self.a_mean,
            "b_mean": self.b_mean,
            "diff": self.diff,
            "ci_lower": self.ci_lower,
            "ci_upper": self.ci_upper,
            "n": self.n,
            "p_value": self.p_value,
            "seeds_a": self.seeds[0],
            "seeds_b": self.seeds[1],
            "paired_seeds": self.paired_seeds,
            "judged": self.judged,
            "beyond_noise": self.beyond_noise,
            "verdict": self.verdict,
        }


def seed_average(
    label: str, runs: Sequence[str], evals: Mapping[str, Evaluation], splits: Sequence[str], baselines: Sequence[str]
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Question]], dict[str, dict[str, tuple[float, ...]]]]:
    """Per split, ``{question id: score averaged over the runs}``, the questions and ``{question id:
    (score of each run)}``; ``StageError`` when the seeds of one method were evaluated on different
    questions."""
    scores: dict[str, dict[str, float]] = {}
    per_run: dict[str, dict[str, tuple[float, ...]]] = {}
    questions: dict[str, dict[str, Question]] = {}
    first = evals[runs[0]]
    for split in splits:
        ids = set(first.scores[split])
        for run in runs[1:]:
            other = set(evals[run].scores[split])
            if other != ids:
                raise StageError(
                    f"the seeds of method {label!r} were evaluated on different {split!r} questions: {runs[0]} has "
                    f"{len(ids)}, {run} has {len(other)} ({len(ids ^ other)} differ); re-run "
                    + " and ".join(f"`dvc repro {eval_stage(r, baselines)}`" for r in (runs[0], run))
                )
        per_run[split] = {q: tuple(evals[r].scores[split][q] for r in runs) for q in sorted(ids)}
        scores[split] = {q: sum(v) / len(v) for q, v in per_run[split].items()}
        questions[split] = first.questions[split]
    return scores, questions, per_run


def row_terms(row: Row, ids: Mapping[str, Sequence[str]]) -> dict[str, np.ndarray]:
    """``{split: (runs x questions)}`` of ``row`` on the questions ``ids[split]``."""
    return {s: row.matrix(s, q) for s, q in ids.items()}


def build_rows(
    methods: Sequence[Method],
    evals: Mapping[str, Evaluation],
    splits: Sequence[str],
    samples: int,
    ci: float,
    seed: int,
    baselines: Mapping[str, str] = BASELINES,
) -> list[Row]:
    """The ``baselines`` (Table 3 order) then every method (full-mask ones, then the ablations); each
    cell is the mean over seeds and questions with its two-level interval."""
    names = list(baselines)
    rows = []
    for name, display in baselines.items():
        scores, questions, per_q = seed_average(name, [name], evals, splits, names)
        rows.append(Row(name, display, "baseline", [name], None, scores, questions, per_q))
    for m in methods:
        scores, questions, per_q = seed_average(m.label, m.runs, evals, splits, names)
        rows.append(
            Row(m.label, m.display, "ablation" if m.is_ablation else "rl", list(m.runs), m, scores, questions, per_q)
        )
    for row in rows:
        per_run = {r: {s: _mean(evals[r].scores[s].values()) for s in splits} for r in row.runs}
        for r in row.runs:
            per_run[r][AVG] = _mean(per_run[r][s] for s in splits)
        boot = seeds_questions([(1.0, row_terms(row, {s: list(row.scores[s]) for s in splits}))], samples, ci, seed)
        for key in [*splits, AVG]:
            row.per_seed[key] = {r: per_run[r][key] for r in row.runs}
            mean, std = seed_mean_std(list(row.per_seed[key].values()))
            row.cells[key] = Cell(
                mean, std, boot[key].lower, boot[key].upper, len(row.scores[key]) if key != AVG else None
            )
    return rows


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def shared_ids(a: Row, b: Row, splits: Sequence[str]) -> dict[str, list[str]]:
    """Per split, the question ids both rows hold (sorted); ``StageError`` when a split shares none."""
    ids = {}
    for split in splits:
        ids[split] = sorted(set(a.scores[split]) & set(b.scores.get(split, {})))
        if not ids[split]:
            raise StageError(
                f"cannot compare {a.label} with {b.label}: no question of split {split!r} is in both evaluations"
            )
    return ids


def seeds_paired(a: Row, b: Row) -> bool:
    """Whether ``a - b`` resamples one seed draw for both rows: two RL rows of the same seeds."""
    return a.seeds is not None and a.seeds == b.seeds


def compare(
    a: Row,
    b: Row,
    splits: Sequence[str],
    samples: int,
    ci: float,
    seed: int,
    min_seeds: int = 3,
    pair_seeds: bool = False,
) -> list[Diff]:
    """``a - b`` per split and on the average: the two-level interval (both rows' seeds x the
    questions they share, paired on the questions and, with ``pair_seeds`` where both rows were
    trained on the same seeds, on the seeds; :func:`agentr1.report.stats.seeds_questions`); judged
    when both rows may carry a verdict (:meth:`Row.judgeable`)."""
    ids = shared_ids(a, b, splits)
    paired_seeds = pair_seeds and seeds_paired(a, b)
    intervals = seeds_questions(
        [(1.0, row_terms(a, ids)), (-1.0, row_terms(b, ids))], samples, ci, seed, paired_seeds=paired_seeds
    )
    judged = a.judgeable(min_seeds) and b.judgeable(min_seeds)
    counts = {key: len(v) for key, v in ids.items()}
    return _diffs(a, b, [*splits, AVG], intervals, counts, judged, paired_seeds)


def _diffs(
    a: Row, b: Row, keys: Sequence[str], intervals: Mapping, counts: Mapping[str, int], judged: bool, paired_seeds: bool
) -> list[Diff]:
    """One :class:`Diff` per split (and ``avg``) from the intervals of ``a - b``."""
    return [
        Diff(
            a.label,
            b.label,
            key,
            a.cells[key].mean,
            b.cells[key].mean,
            intervals[key].mean,
            intervals[key].lower,
            intervals[key].upper,
            counts.get(key),
            intervals[key].p_value,
            judged,
            (a.n_seeds, b.n_seeds),
            paired_seeds,
        )
        for key in keys
    ]


def compare_questions_only(a: Row, b: Row, splits: Sequence[str], samples: int, ci: float, seed: int) -> list[Diff]:
    """``a - b`` with the interval of earlier reports: a paired bootstrap over the questions of the
    seed-averaged scores, the seeds held fixed (:func:`agentr1.report.stats.paired`; for
    ``bench/seed_sets.py``'s comparison, never a verdict of the report)."""
    try:
        intervals, counts = paired(a.scores, b.scores, samples, ci, seed)
    except ValueError as exc:
        raise StageError(f"cannot compare {a.label} with {b.label}: {exc}") from None
    return _diffs(a, b, [*splits, AVG], intervals, counts, True, False)


def table3_rows(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.kind in ("baseline", "rl")]


def ablation_pairs(rows: Sequence[Row]) -> list[tuple[Row, Row]]:
    """(ablation, its full-mask method) for every ablation whose full-mask method exists."""
    by_label = {r.label: r for r in rows}
    return [
        (r, by_label[r.method.ablation_of])
        for r in rows
        if r.kind == "ablation" and r.method is not None and r.method.ablation_of in by_label
    ]


def hops_key(h: int | None) -> str:
    return "unknown" if h is None else str(h)


def breakdown(rows: Sequence[Row], splits: Sequence[str]) -> dict:
    """``{split: {"type"|"hops": {group: {"n": int, policy label: mean}}}}`` over each policy's
    seed-averaged per-question scores."""
    out: dict = {}
    for split in splits:
        out[split] = {}
        for by, key in (("type", lambda q: q.type), ("hops", lambda q: hops_key(q.hops))):
            groups: dict[str, dict] = {}
            for r in rows:
                acc: dict[str, list[float]] = {}
                for qid, score in r.scores[split].items():
                    acc.setdefault(key(r.questions[split][qid]), []).append(score)
                for g, vals in acc.items():
                    entry = groups.setdefault(g, {"n": 0})
                    entry["n"] = max(entry["n"], len(vals))
                    entry[r.label] = _mean(vals)
            out[split][by] = dict(sorted(groups.items(), key=lambda kv: (kv[0] == "unknown", kv[0])))
    return out
