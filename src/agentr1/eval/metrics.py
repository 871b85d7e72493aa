"""Evaluation statistics: bootstrap confidence intervals, paired differences, split summaries.

Per-question scores (EM, F1, substring EM, format, ...) come from :mod:`agentr1.eval.quick`
(answers compared with the :mod:`agentr1.env.rewards` metrics). Here they are averaged and
given uncertainty:

* :func:`percentile_bootstrap` - the one bootstrap (``scipy.stats.bootstrap``, percentile method)
  behind every interval here and in :mod:`agentr1.report.stats`;
* :func:`bootstrap_ci` - percentile bootstrap of the mean of one score vector;
* :func:`paired_bootstrap_diff` - per-question paired bootstrap of the difference of the means of
  two policies scored on the same questions (is a difference larger than the noise?);
* :func:`summarize_split` - one split's means, CIs and breakdowns by question type and hops.

Everything is deterministic for a given seed (``numpy.random.default_rng(seed)``, PCG64).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

SCORES = ("em", "f1", "subem")  # the answer metrics that get confidence intervals
# averaged over a split's episodes; early_answer (agentr1.eval.support) is a mean over ALL episodes
# (single-hop and unanswered ones count 0): the report's early-answer share is over multi-hop ones
MEANS = ("em", "f1", "subem", "format_ok", "answered", "tool_calls", "turns", "reward", "early_answer")
DIGITS = 6  # summaries are rounded (monotone, so lo <= mean <= hi survives the rounding)
_CHUNK = 4_000_000  # resampled entries drawn at once (bounds memory for large splits)


def _vector(values: Sequence[float], name: str = "values") -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError(f"{name} is empty: a bootstrap needs at least one value")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} holds non-finite values")
    return x


def percentile_bootstrap(
    data: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    samples: int,
    ci: float,
    seed: int,
    paired: bool = False,
) -> tuple[float, float, np.ndarray]:
    """``scipy.stats.bootstrap`` with the percentile method: ``(lo, hi, distribution)``.

    ``data`` holds the samples, each a 1-D vector of at least two values; ``statistic(*samples,
    axis=-1)`` is vectorised along the last axis. Resampling is uniform with replacement, from
    ``numpy.random.default_rng(seed)``: ``paired`` resamples one set of indices shared by all
    samples (equal lengths; per-question pairing), otherwise each sample is resampled on its own
    (a stratified bootstrap). ``lo`` and ``hi`` are the ``(1 - ci) / 2`` and ``(1 + ci) / 2``
    quantiles (linear interpolation) of the B = ``samples`` bootstrap statistics
    ``distribution``; the point estimate ``statistic(*data)`` is not yet included (callers widen).

    The percentile method is chosen over scipy's default BCa: it is the interval the promotion
    gate and the reports have always used, and BCa's jackknife acceleration is undefined (scipy
    warns and returns NaN) on the all-equal score vectors that are common here (all-zero EM).
    Resamples are drawn ``batch = max(1, 4e6 // n)`` at a time to bound memory on large splits.
    """
    _check_ci(ci)
    res = stats.bootstrap(
        tuple(data),
        statistic,
        n_resamples=samples,
        batch=max(1, _CHUNK // max(len(x) for x in data)),
        vectorized=True,
        paired=paired,
        axis=-1,
        confidence_level=ci,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    lo, hi = res.confidence_interval
    return float(lo), float(hi), res.bootstrap_distribution


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def _check_ci(ci: float) -> None:
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")


def bootstrap_ci(values: Sequence[float], samples: int = 1000, ci: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of ``values``.

    With x_1..x_n the per-question scores and mean m = (1/n) sum_i x_i: draw B = ``samples``
    resamples x*_b of size n with replacement (indices uniform on 1..n), compute their means
    m*_b, and return the alpha/2 and 1 - alpha/2 empirical quantiles of {m*_b} (alpha = 1 -
    ``ci``; linear interpolation between order statistics), by :func:`percentile_bootstrap`. The
    interval is widened to contain m in the rare case a skewed bootstrap distribution would
    exclude it (the promotion gate requires lo <= m <= hi). Degenerate samples are answered
    without resampling: all-equal values (n = 1 included) give lo = hi = m exactly, as every
    resample does; no values is a ``ValueError``. Its width shrinks like sd(x) / sqrt(n).
    """
    x = _vector(values)
    _check_ci(ci)
    mean = float(x.mean())
    if np.all(x == x[0]):
        return mean, mean
    lo, hi, _ = percentile_bootstrap((x,), _mean, samples, ci, seed)
    return min(lo, mean), max(hi, mean)


def paired_bootstrap_diff(
    a: Sequence[float], b: Sequence[float], samples: int = 1000, ci: float = 0.95, seed: int = 0
) -> dict[str, float]:
    """Paired bootstrap of the difference of two policies' mean scores on the same questions.

    ``a[i]`` and ``b[i]`` are the two policies' scores on question i. With d_i = a_i - b_i and
    the observed difference delta = mean(d): resample the *questions* (indices uniform on 1..n,
    with replacement, shared by both policies: :func:`percentile_bootstrap` with ``paired``; both
    keep their scores on each drawn question, so question difficulty cancels) B = ``samples``
    times, giving delta*_b = mean(d*_b). Returns

    * ``mean_diff`` = delta;
    * ``lo``, ``hi`` = the central ``ci`` percentile interval of {delta*_b} (widened to contain
      delta); a difference "exceeds the noise" when the interval excludes 0;
    * ``p_value`` = (1 + #{b : |delta*_b - delta| >= |delta|}) / (B + 1): the two-sided bootstrap
      test of "no difference", which shifts the bootstrap distribution to be centred on 0
      (Efron & Tibshirani 1993, sec. 16.4); identical vectors give p = 1, and p is never 0.

    A constant difference (all d_i equal, n = 1 included) has delta*_b = delta for every
    resample: lo = hi = delta and p = 1 / (B + 1) (or 1 when delta = 0), without resampling.
    """
    x, y = _vector(a, "a"), _vector(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired scores need equal lengths, got {x.size} and {y.size}")
    _check_ci(ci)
    d = x - y
    delta = float(d.mean())
    if np.all(d == d[0]):
        lo = hi = delta
        boots = np.full(samples, delta)
    else:
        lo, hi, boots = percentile_bootstrap((x, y), _mean_diff, samples, ci, seed, paired=True)
    extreme = int(np.sum(np.abs(boots - delta) >= abs(delta)))
    return {"mean_diff": delta, "lo": min(lo, delta), "hi": max(hi, delta), "p_value": (1 + extreme) / (samples + 1)}


def _bootstrap_params(bootstrap_cfg: Any) -> tuple[int, float]:
    if isinstance(bootstrap_cfg, Mapping):
        return int(bootstrap_cfg["samples"]), float(bootstrap_cfg["ci"])
    return int(bootstrap_cfg.samples), float(bootstrap_cfg.ci)


def _r(x: float) -> float:
    return round(float(x), DIGITS)


def _scores_with_ci(
    rows: Sequence[Mapping[str, Any]], samples: int, ci: float, seed: int, metrics=SCORES
) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in metrics:
        values = [float(r[m]) for r in rows]
        lo, hi = bootstrap_ci(values, samples, ci, seed)
        out[m] = _r(np.mean(values))  # the same mean bootstrap_ci brackets
        out[f"{m}_ci_lower"], out[f"{m}_ci_upper"] = _r(lo), _r(hi)
    return out


def _group(
    rows: Sequence[Mapping[str, Any]], key: str, samples: int, ci: float, seed: int
) -> dict[str, dict[str, float]]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r.get(key)), []).append(r)
    out = {}
    for name in sorted(groups):
        members = groups[name]
        entry: dict[str, float] = {"n": len(members)}
        entry.update(_scores_with_ci(members, samples, ci, seed, metrics=("em",)))
        for m in ("f1", "subem"):
            entry[m] = _r(np.mean([float(r[m]) for r in members]))
        out[name] = entry
    return out


def tool_usage(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per tool, over rows with ``calls_by_tool`` (``{tool: {"calls", "ok"}}``, see
    :func:`agentr1.eval.quick.calls_by_tool`): ``calls`` = mean call attempts per episode,
    ``success_rate`` = successful calls / attempts (None without attempts) and ``episodes`` =
    share of episodes with at least one attempt. ``{}`` when the rows have no per-tool counts."""
    if not rows or "calls_by_tool" not in rows[0]:
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for tool in rows[0]["calls_by_tool"]:
        calls = [int(r["calls_by_tool"][tool]["calls"]) for r in rows]
        ok = sum(int(r["calls_by_tool"][tool]["ok"]) for r in rows)
        out[tool] = {
            "calls": _r(np.mean(calls)),
            "success_rate": _r(ok / sum(calls)) if sum(calls) else None,
            "episodes": _r(np.mean([c > 0 for c in calls])),
        }
    return out


def summarize_split(rows: Sequence[Mapping[str, Any]], bootstrap_cfg: Any, seed: int = 0) -> dict[str, Any]:
    """Summary of one split's per-question rows (keys ``em f1 subem format_ok answered
    tool_calls turns reward early_answer type hops reason``; see ``agentr1.stages.evaluate``).

    Returns ``n``; the mean of each of :data:`MEANS`; ``<m>_ci_lower`` / ``<m>_ci_upper`` for
    m in em, f1, subem (:func:`bootstrap_ci`, ``bootstrap_cfg.samples`` / ``.ci``, ``seed``);
    ``reasons`` (episodes per end reason); ``by_type`` and ``by_hops`` (group name -> ``n``,
    ``em`` with its CI, ``f1``, ``subem``; hop counts as strings). Rows with per-tool counts
    (several tools) add ``by_tool`` (:func:`tool_usage`) and a ``by_tool`` in each ``by_type``
    group. Numbers are rounded to :data:`DIGITS` decimals. An empty split gives ``{"n": 0}``.
    """
    if not rows:
        return {"n": 0}
    samples, ci = _bootstrap_params(bootstrap_cfg)
    out: dict[str, Any] = {"n": len(rows)}
    for m in MEANS:
        out[m] = _r(np.mean([float(r[m]) for r in rows]))
    out.update(_scores_with_ci(rows, samples, ci, seed))
    out["reasons"] = dict(sorted(Counter(str(r.get("reason", "")) for r in rows).items()))
    out["by_type"] = _group(rows, "type", samples, ci, seed)
    out["by_hops"] = _group(rows, "hops", samples, ci, seed)
    if tool_usage(rows):
        out["by_tool"] = tool_usage(rows)
        for name, entry in out["by_type"].items():
            entry["by_tool"] = tool_usage([r for r in rows if str(r.get("type")) == name])
    return out
