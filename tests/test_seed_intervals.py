"""The report's two-level interval (training seeds x questions, agentr1.report.stats.seeds_questions)
on constructed per-seed results: seeds that disagree widen it past the question-only interval and
the verdict reads "within noise"; seeds that agree on a large effect read "beyond noise"; the seed
level keeps the unbiased variance; equal rows give exactly 0; fewer seeds than report.min_seeds are
"not judged"."""

from __future__ import annotations

import numpy as np
import pytest

from agentr1.report.inputs import Evaluation, Question
from agentr1.report.methods import group_methods
from agentr1.report.rows import build_rows, compare, compare_questions_only
from agentr1.report.stats import seeds_questions

Q = 300


def _scores(mean: float, n: int = Q) -> list[float]:
    """The first round(mean * n) questions right: rows with a higher mean answer a superset."""
    k = round(mean * n)
    return [1.0] * k + [0.0] * (n - k)


def _rows(per_seed: dict[str, list[float]], baselines=("cold_start",), splits=("test",)):
    """Report rows from constructed evaluations: ``per_seed[run]`` = each seed's mean EM (its first
    questions right), the seeds the replicas ``<run>-<i>``."""
    n_seeds = {len(v) for v in per_seed.values()}
    assert len(n_seeds) == 1
    seeds = list(range(n_seeds.pop()))
    evals = {}

    def add(policy: str, mean: float) -> None:
        ev = Evaluation(policy=policy, kind="rl")
        for split in splits:
            ids = [f"{split}{i:03d}" for i in range(Q)]
            ev.scores[split] = dict(zip(ids, _scores(mean)))
            ev.questions[split] = {q: Question(split, q, "bridge", 2, s) for q, s in ev.scores[split].items()}
        evals[policy] = ev

    for run, means in per_seed.items():
        for s, m in zip(seeds, means):
            add(f"{run}-{s}", m)
    for b in baselines:
        add(b, 0.2)
    methods = group_methods(
        {run: {"estimator": "grpo", "lr": 1e-4 * (i + 1)} for i, run in enumerate(per_seed)}, seeds=seeds
    )
    rows = build_rows(methods, evals, list(splits), 1000, 0.95, 0, {b: b for b in baselines})
    return {r.label: r for r in rows}


def _test(diffs):
    return next(d for d in diffs if d.split == "test")


def test_seeds_that_disagree_widen_the_interval_past_the_question_only_one_and_read_within_noise():
    # a: two seeds at 0.55, one at 0.30 (mean 0.467); b: 0.38 on every seed. Per question the seed
    # averages differ on 26 questions, all in a's favour: over questions alone the difference is solid
    rows = _rows({"a": [0.55, 0.30, 0.55], "b": [0.38, 0.38, 0.38]})
    a, b = rows["a"], rows["b"]
    both = _test(compare(a, b, ["test"], 1000, 0.95, 0))
    q_only = _test(compare_questions_only(a, b, ["test"], 1000, 0.95, 0))
    assert both.diff == pytest.approx(q_only.diff) == pytest.approx((0.55 + 0.30 + 0.55) / 3 - 0.38)
    assert q_only.ci_lower > 0 and q_only.beyond_noise  # what the old report would have called a finding
    assert both.ci_upper - both.ci_lower > 2 * (q_only.ci_upper - q_only.ci_lower)
    assert both.ci_lower < 0 < both.ci_upper
    assert both.judged and not both.beyond_noise and both.verdict == "within noise"
    # the row's own interval is wider than its interval over questions alone (the seed-averaged scores), too
    seed_avg = a.matrix("test", list(a.scores["test"])).mean(axis=0, keepdims=True)
    q_only_row = seeds_questions([(1.0, {"test": seed_avg})], 1000, 0.95, 0)["test"]
    assert a.cells["test"].ci_upper - a.cells["test"].ci_lower > q_only_row.upper - q_only_row.lower


def test_seeds_that_agree_on_a_large_effect_read_beyond_noise():
    rows = _rows({"a": [0.50, 0.52, 0.48], "b": [0.30, 0.31, 0.29]})
    d = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0))
    assert d.diff == pytest.approx(0.2) and d.ci_lower > 0.1 and d.verdict == "beyond noise"
    # and against the one-run baseline (no seed level there)
    d = _test(compare(rows["a"], rows["cold_start"], ["test"], 1000, 0.95, 0))
    assert d.beyond_noise and d.seeds == (3, 1)


def test_fewer_seeds_than_min_seeds_are_not_judged():
    rows = _rows({"a": [0.9, 0.9], "b": [0.1, 0.1]})  # a huge effect on 2 seeds: listed, not judged
    d = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, min_seeds=3))
    assert d.ci_lower > 0.7 and not d.judged and not d.beyond_noise and d.verdict == "not judged"
    assert _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, min_seeds=2)).verdict == "beyond noise"
    assert _test(compare(rows["a"], rows["cold_start"], ["test"], 1000, 0.95, 0, min_seeds=3)).verdict == "not judged"


def test_equal_rows_differ_by_exactly_zero():
    rows = _rows({"a": [0.4, 0.4, 0.4], "b": [0.4, 0.4, 0.4]})
    d = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0))
    assert (d.diff, d.ci_lower, d.ci_upper, d.p_value) == (0.0, 0.0, 0.0, 1.0)
    # equal results from seeds that disagree: paired on the seeds (the same seed draw for both rows)
    # the difference is exactly 0 in every replicate; each row's seeds drawn on their own
    # (report.pair_seeds: false), the interval is the seed spread around 0
    rows = _rows({"a": [0.4, 0.3, 0.5], "b": [0.4, 0.3, 0.5]})
    d = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, pair_seeds=True))
    assert d.paired_seeds and (d.diff, d.ci_lower, d.ci_upper, d.p_value) == (0.0, 0.0, 0.0, 1.0)
    d = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, pair_seeds=False))
    assert not d.paired_seeds and d.diff == 0.0 and d.ci_lower < -0.05 and d.ci_upper > 0.05 and d.p_value == 1.0


def test_a_seed_slow_for_both_methods_cancels_when_the_seeds_are_paired():
    """Seed 2 learns little in both methods (a seed fixes the fresh worlds and first rollouts of every
    method): a - b is +0.08 to +0.10 on every seed. Paired on the seeds the difference is beyond noise;
    each row's seeds drawn on their own, the slow seed's spread swamps it."""
    rows = _rows({"a": [0.50, 0.52, 0.22], "b": [0.42, 0.42, 0.13]})
    paired = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, pair_seeds=True))
    alone = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, pair_seeds=False))
    assert paired.diff == pytest.approx(alone.diff) == pytest.approx(0.09)
    assert paired.paired_seeds and paired.verdict == "beyond noise" and paired.ci_lower > 0.05
    assert not alone.paired_seeds and alone.verdict == "within noise"
    # seeds that disagree on the direction stay within noise when paired
    rows = _rows({"a": [0.50, 0.30, 0.50], "b": [0.30, 0.50, 0.35]})
    d = _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, pair_seeds=True))
    assert d.paired_seeds and d.diff > 0 and d.verdict == "within noise"
    # a row against the one-run baseline has no seed to pair
    assert not _test(compare(rows["a"], rows["cold_start"], ["test"], 1000, 0.95, 0, pair_seeds=True)).paired_seeds


def test_rows_of_other_seeds_are_not_paired():
    rows = _rows({"a": [0.5, 0.5, 0.2], "b": [0.4, 0.4, 0.1]})
    rows["b"].method.seeds = [3, 4, 5]  # the same run counts, other training seeds: nothing shared
    assert not _test(compare(rows["a"], rows["b"], ["test"], 1000, 0.95, 0, pair_seeds=True)).paired_seeds
    with pytest.raises(ValueError, match="paired seeds need the same seeds"):
        seeds_questions(
            [(1.0, {"test": np.zeros((3, 4))}), (-1.0, {"test": np.zeros((2, 4))})], 100, 0.95, 0, paired_seeds=True
        )


def test_the_seed_level_keeps_the_unbiased_variance_of_the_seed_mean():
    """With every question scoring its seed's mean, only the seed draw varies: S - 1 draws give the
    replicates the variance s^2 / S (s^2 the sample variance of the seed means); S draws would give
    (S - 1) / S of it."""
    means = np.array([0.2, 0.5, 0.35, 0.6])
    x = np.repeat(means[:, None], 10, axis=1)
    rng = np.random.default_rng(0)
    from agentr1.report.stats import seed_counts

    counts = seed_counts(rng, len(means), 40000)
    assert set(counts.sum(axis=1)) == {len(means) - 1.0}
    reps = (counts @ means) / (len(means) - 1)
    assert reps.var() == pytest.approx(means.var(ddof=1) / len(means), rel=0.03)
    row = seeds_questions([(1.0, {"test": x})], 4000, 0.95, 1)["test"]
    assert row.mean == pytest.approx(means.mean()) and row.lower < means.mean() < row.upper


def test_one_seed_per_row_is_the_paired_question_bootstrap():
    rows = _rows({"a": [0.45], "b": [0.40]})
    both = _test(compare(rows["a"], rows["b"], ["test"], 4000, 0.95, 0, min_seeds=1))
    q_only = _test(compare_questions_only(rows["a"], rows["b"], ["test"], 4000, 0.95, 0))
    assert both.diff == pytest.approx(q_only.diff)
    assert both.ci_lower == pytest.approx(q_only.ci_lower, abs=0.005) and both.ci_upper == pytest.approx(
        q_only.ci_upper, abs=0.005
    )


def test_the_average_over_splits_shares_the_seed_draw_and_misaligned_rows_are_refused():
    rows = _rows({"a": [0.55, 0.30, 0.55], "b": [0.38, 0.38, 0.38]}, splits=("test", "ood"))
    diffs = {d.split: d for d in compare(rows["a"], rows["b"], ["test", "ood"], 1000, 0.95, 0)}
    assert diffs["avg"].diff == pytest.approx((diffs["test"].diff + diffs["ood"].diff) / 2)
    # the same seed draw on both splits: the average is as uncertain as each split (the seed effect
    # does not average out across splits)
    assert diffs["avg"].ci_upper - diffs["avg"].ci_lower == pytest.approx(
        diffs["test"].ci_upper - diffs["test"].ci_lower, rel=0.25
    )
    with pytest.raises(ValueError, match="not aligned on the same questions"):
        seeds_questions([(1.0, {"test": np.zeros((2, 5))}), (-1.0, {"test": np.zeros((2, 4))})], 100, 0.95, 0)
