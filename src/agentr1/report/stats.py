"""The report's intervals: a two-level bootstrap over training seeds and questions.

A row of the report (an RL method) is S training runs (seeds) of one config, each evaluated on
the same Q questions of a split: scores x[s, q]. Its score is the mean over seeds and questions,
m = (1/S) sum_s (1/Q) sum_q x[s, q]. Two sources of noise move m: which questions were asked and
which seeds were trained (another seed - or another CPU, whose bits differ - takes the run down
another path: GRPO's seeds spread by +-0.017 on test, as much as a 600-question interval's
half-width). An interval over questions alone calls a difference that flips with the seed
"beyond noise"; the intervals here resample both (:func:`seeds_questions`):

* **questions**, with replacement, Q draws per split, the *same* draw for every seed of a row and
  for both rows of a difference (paired on the questions they share: question difficulty cancels);
  each split is resampled on its own (stratified);
* **seeds**, with replacement, the same draw for every split (a seed is one run, evaluated on every
  split), each row's seeds on their own (``report.pair_seeds: false``, the default); with
  ``paired_seeds`` (``report.pair_seeds: true``) a difference of two RL rows trained on the same
  seeds takes the *same* draw for both rows (a blocked design: seed s fixes the fresh-world stream
  and the first rollouts of every method alike, so a seed slow for every method cancels -
  ``bench/RESULTS.md`` section 23 - but with 3 seeds it rests on the method x seed interaction of
  three values and flipped more verdicts between seed sets: section 25); a row against a baseline
  (one SFT run, no seed) or against a row of other seeds always has its own draw. The draw is the rescaled
  bootstrap of Rao & Wu (1988) in its with-replacement form (McCarthy & Snowden 1985): S - 1 draws
  of the S seeds, so that the bootstrap variance of a row's seed mean, sigma_hat^2 / (S - 1) with
  the plug-in variance sigma_hat^2 = (1/S) sum_s (m_s - m)^2, is the unbiased s^2 / S (S draws would
  give (S - 1)/S of it: two thirds with 3 seeds). A row of one run (the baselines: one SFT run
  each) has no seed level.

Replicate b gives m*_b = sum_s w_bs sum_q c_bq x[s, q] with seed weights w_bs (counts / draws) and
question weights c_bq (counts / Q); a difference of rows is the difference of their replicates; the
average over splits is the mean of the split replicates. The interval is the percentile interval
of the B = ``report.bootstrap.samples`` replicates (``(1 - ci)/2`` and ``(1 + ci)/2`` quantiles,
widened to contain the point estimate), and a difference's two-sided p-value is
``(1 + #{b : |d*_b - d| >= |d|}) / (B + 1)`` (the centred bootstrap test, as
:func:`agentr1.eval.metrics.paired_bootstrap_diff`). With one seed per row it is the paired
question bootstrap the report used before.

Why not a library: ``scipy.stats.bootstrap`` resamples one index set per sample (paired) or each
sample on its own, not a crossed seeds x questions design; ``rliable``'s stratified bootstrap
resamples runs within each task *independently*, which averages a run-level seed effect away
(here a seed moves every question of its run at once). The question-only intervals of earlier
reports (:func:`bootstrap`, :func:`paired`: ``scipy.stats.bootstrap`` over the seed-averaged
per-question scores) stay for comparison (``bench/seed_sets.py``).

Question-only: per split it is exactly :func:`agentr1.eval.metrics.bootstrap_ci` and, for a
difference, :func:`agentr1.eval.metrics.paired_bootstrap_diff`; the **average** over splits is
bootstrapped stratified (:func:`stratified_average`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from agentr1.eval.metrics import bootstrap_ci, paired_bootstrap_diff, percentile_bootstrap

AVG = "avg"


@dataclass(frozen=True)
class Interval:
    mean: float
    lower: float
    upper: float
    p_value: float | None = None  # paired differences only (two-sided bootstrap test of "no difference")


def seed_mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean over seeds and the sample standard deviation (ddof 1; ``None`` for a single seed)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("no seeds")
    std = float(arr.std(ddof=1)) if arr.size > 1 else None
    return float(arr.mean()), std


def stratified_average(vectors: Sequence[np.ndarray], samples: int, ci: float, seed: int) -> Interval:
    """Bootstrap interval of the unweighted mean of the vectors' means (module docstring).

    The statistic is A = (1/K) sum_k mean(v_k); each stratum k is resampled on its own
    (:func:`agentr1.eval.metrics.percentile_bootstrap`, unpaired). A stratum whose values are all
    equal (a single question included) has the same mean in every resample, so it enters A as
    that constant and is not resampled; when every stratum is constant the interval is the point.
    """
    if not vectors:
        raise ValueError("no splits to average")
    point = float(np.mean([v.mean() for v in vectors]))
    varying = [v for v in vectors if np.any(v != v[0])]
    if not varying:
        return Interval(point, point, point)
    constant = float(sum(v[0] for v in vectors if np.all(v == v[0])))
    k = len(vectors)

    def average(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        return (np.sum([np.mean(x, axis=axis) for x in resampled], axis=0) + constant) / k

    lo, hi, _ = percentile_bootstrap(varying, average, samples, ci, seed)
    return Interval(point, min(lo, point), max(hi, point))


def _vectors(values: Mapping[str, Sequence[float]]) -> dict[str, np.ndarray]:
    out = {}
    for split, vec in values.items():
        arr = np.asarray(vec, dtype=float).reshape(-1)
        if arr.size == 0:
            raise ValueError(f"split {split!r} has no questions")
        out[split] = arr
    return out


def bootstrap(values: Mapping[str, Sequence[float]], samples: int, ci: float, seed: int) -> dict[str, Interval]:
    """Per split ``{split: per-question scores}``: the mean and its bootstrap interval, plus
    ``avg`` (the stratified average over the splits)."""
    vecs = _vectors(values)
    out = {}
    for split, vec in vecs.items():
        lo, hi = bootstrap_ci(vec, samples, ci, seed)
        out[split] = Interval(float(vec.mean()), lo, hi)
    out[AVG] = stratified_average(list(vecs.values()), samples, ci, seed)
    return out


def paired(
    a: Mapping[str, Mapping[str, float]], b: Mapping[str, Mapping[str, float]], samples: int, ci: float, seed: int
) -> tuple[dict[str, Interval], dict[str, int]]:
    """Paired bootstrap of ``a - b``: per split, ``{question id: score}`` of each policy, paired
    on the ids both hold. Returns the intervals of the difference (per split and ``avg``) and
    the paired counts; ``ValueError`` naming the split when the two share no question there."""
    diffs: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    out: dict[str, Interval] = {}
    for split in a:
        ids = sorted(set(a[split]) & set(b.get(split, {})))
        if not ids:
            raise ValueError(f"no question of split {split!r} is in both evaluations")
        x = np.array([a[split][q] for q in ids], dtype=float)
        y = np.array([b[split][q] for q in ids], dtype=float)
        res = paired_bootstrap_diff(x, y, samples, ci, seed)
        out[split] = Interval(res["mean_diff"], res["lo"], res["hi"], res["p_value"])
        diffs[split] = x - y
        counts[split] = len(ids)
    out[AVG] = stratified_average(list(diffs.values()), samples, ci, seed)
    return out, counts


# --------------------------------------------------------------------------- seeds x questions
def seed_counts(rng: np.random.Generator, n_seeds: int, samples: int) -> np.ndarray:
    """``(samples, n_seeds)`` draw counts of the rescaled bootstrap (module docstring): per replicate
    ``n_seeds - 1`` draws with replacement (one seed: drawn once); a seed's weight is count / draws."""
    if n_seeds < 1:
        raise ValueError("a row needs at least one seed")
    if n_seeds == 1:
        return np.ones((samples, 1))
    return rng.multinomial(n_seeds - 1, np.full(n_seeds, 1.0 / n_seeds), size=samples).astype(float)


def question_counts(rng: np.random.Generator, n_questions: int, samples: int) -> np.ndarray:
    """``(samples, n_questions)`` draw counts: per replicate Q draws with replacement; weight = count / Q."""
    if n_questions < 1:
        raise ValueError("a split needs at least one question")
    return rng.multinomial(n_questions, np.full(n_questions, 1.0 / n_questions), size=samples).astype(float)


def _percentile(point: float, replicates: np.ndarray, ci: float, p_value: bool) -> Interval:
    lo, hi = np.quantile(replicates, [(1 - ci) / 2, (1 + ci) / 2])
    p = None
    if p_value:
        hits = int(np.sum(np.abs(replicates - point) >= abs(point) - 1e-12)) if point != 0 else len(replicates)
        p = min(1.0, (1 + hits) / (len(replicates) + 1))
    lo, hi = float(lo) + 0.0, float(hi) + 0.0  # + 0.0: no -0.0 from the interpolation of zeros
    return Interval(point + 0.0, min(lo, point + 0.0), max(hi, point + 0.0), p)


def seeds_questions(
    terms: Sequence[tuple[float, Mapping[str, np.ndarray]]],
    samples: int,
    ci: float,
    seed: int,
    paired_seeds: bool = False,
) -> dict[str, Interval]:
    """The interval of ``sum_t coef_t * m_t`` per split and on ``avg`` (module docstring): each term
    is ``(coef, {split: x})`` with ``x`` of shape ``(seeds, questions)``; in a split every term's
    columns are the same questions in the same order (the caller aligns them), so the question draw
    is shared (paired); each term has its own seed draw, shared by the splits, unless
    ``paired_seeds``: then every term's rows are the same seeds in the same order (the caller
    aligns them) and one seed draw serves them all. One term: a row's mean (no p-value);
    ``[(1, a), (-1, b)]``: the difference a - b with its p-value."""
    if not terms:
        raise ValueError("no rows to bootstrap")
    splits = list(terms[0][1])
    mats = [{sp: np.atleast_2d(np.asarray(v[sp], dtype=float)) for sp in splits} for _, v in terms]
    for sp in splits:
        widths = {m[sp].shape[1] for m in mats}
        if len(widths) != 1 or 0 in widths:
            raise ValueError(f"split {sp!r}: the rows are not aligned on the same questions ({sorted(widths)})")
    n_seeds = [m[splits[0]].shape[0] for m in mats]
    if paired_seeds and len(set(n_seeds)) != 1:
        raise ValueError(f"paired seeds need the same seeds in every row, not {n_seeds} of them")
    rng = np.random.default_rng(seed)
    qc = {sp: question_counts(rng, mats[0][sp].shape[1], samples) for sp in splits}
    if paired_seeds:
        sc = [seed_counts(rng, n_seeds[0], samples)] * len(mats)
    else:
        sc = [seed_counts(rng, n, samples) for n in n_seeds]
    out: dict[str, Interval] = {}
    reps, points = {}, {}
    for sp in splits:
        # per term: each seed's count-weighted question sum per replicate (seeds x B), then the seed
        # counts, scaled last; with 0/1 scores every sum is an exact integer, so two rows with equal
        # seeds give bit-equal replicates (a zero difference stays exactly 0)
        reps[sp] = sum(
            c * np.sum(w * (m[sp] @ qc[sp].T).T, axis=1) / (w[0].sum() * m[sp].shape[1])
            for (c, _), w, m in zip(terms, sc, mats)
        )
        points[sp] = float(sum(c * m[sp].mean() for (c, _), m in zip(terms, mats)))
    diff = len(terms) > 1
    for sp in splits:
        out[sp] = _percentile(points[sp], reps[sp], ci, diff)
    out[AVG] = _percentile(
        float(np.mean([points[sp] for sp in splits])), np.mean([reps[sp] for sp in splits], axis=0), ci, diff
    )
    return out
