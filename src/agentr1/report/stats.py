"""Seed statistics and bootstrap confidence intervals over questions.

Every interval here is a percentile bootstrap over *questions*. Per split it is exactly
:func:`agentr1.eval.metrics.bootstrap_ci` (a single-run policy gets the same interval as its
evaluate stage's ``<split>/<metric>_ci_lower/_upper`` for the same seed and settings) and, for a
difference of two policies, :func:`agentr1.eval.metrics.paired_bootstrap_diff` on the
per-question differences (question difficulty cancels; it also gives a two-sided p-value).

The **average** over splits (the unweighted mean of the split means, like the paper's Avg.
column) is bootstrapped stratified: each split's questions are resampled independently
(``scipy.stats.bootstrap`` with one sample per split, unpaired, one ``default_rng(seed)``
stream), the split means averaged, and the interval is the ``(1 - ci) / 2`` and ``(1 + ci) / 2``
quantiles of those averages (widened to contain the point estimate, as the per-split intervals
are). All intervals come from the one :func:`agentr1.eval.metrics.percentile_bootstrap`.
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


def paired(a: Mapping[str, Mapping[str, float]], b: Mapping[str, Mapping[str, float]], samples: int, ci: float,
           seed: int) -> tuple[dict[str, Interval], dict[str, int]]:
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
