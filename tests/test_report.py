"""Stage ``report``: runs x seeds as methods/ablations, Table 3/4 numbers equal hand-computed
ones, beyond-noise flags on constructed data, plots, curves, errors that name the stage to run.
(The two-level interval itself: tests/test_seed_intervals.py.)"""

from __future__ import annotations

import csv
import json
import statistics
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from agentr1 import stages
from agentr1.cli import main
from agentr1.config import config_from_dict
from agentr1.errors import StageError
from agentr1.eval.metrics import bootstrap_ci
from agentr1.report.methods import group_methods
from agentr1.report.stats import seeds_questions, stratified_average

# ----------------------------------------------------------------------------- grouping (unit)
PAPER_RUNS = {
    "ppo": {"estimator": "gae"},
    "grpo": {"estimator": "grpo"},
    "reinforce_pp": {"estimator": "reinforce_pp"},
    "reinforce_pp_baseline": {"estimator": "reinforce_pp_baseline"},
    "rloo": {"estimator": "rloo"},
    "ppo_no_adv_mask": {"estimator": "gae", "advantage_mask": False},
    "ppo_no_adv_no_loss_mask": {"estimator": "gae", "advantage_mask": False, "loss_mask": False},
    "grpo_no_loss_mask": {"estimator": "grpo", "loss_mask": False},
}


def test_stratified_average_is_scipys_unpaired_bootstrap_with_constant_strata_fixed():
    import numpy as np
    from scipy.stats import bootstrap

    rng = np.random.default_rng(3)
    dev, test = (rng.random(60) < 0.4).astype(float), (rng.random(90) < 0.7).astype(float)
    zeros = np.zeros(25)  # an all-zero split: the same mean in every resample
    got = stratified_average([dev, zeros, test], 800, 0.95, seed=4)
    ref = bootstrap(
        (dev, test),
        lambda a, b, axis: (a.mean(axis=axis) + b.mean(axis=axis)) / 3,
        n_resamples=800,
        method="percentile",
        rng=np.random.default_rng(4),
    ).confidence_interval
    assert got.mean == pytest.approx((dev.mean() + test.mean()) / 3)
    assert (got.lower, got.upper) == pytest.approx((min(ref.low, got.mean), max(ref.high, got.mean)), abs=1e-15)
    assert got.lower < got.mean < got.upper
    point = stratified_average([zeros, np.ones(1)], 800, 0.95, seed=4)  # nothing varies: the point itself
    assert (point.mean, point.lower, point.upper) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="no splits"):
        stratified_average([], 800, 0.95, seed=4)


def test_group_methods_seeds_labels_and_ablations():
    methods = group_methods(PAPER_RUNS, seeds=[0, 1, 2])
    by = {m.label: m for m in methods}
    assert [m.label for m in methods] == [
        "ppo",
        "grpo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "rloo",  # full mask, estimator order
        "ppo_no_adv_mask",
        "ppo_no_adv_no_loss_mask",
        "grpo_no_loss_mask",
    ]  # then the ablations
    assert by["grpo"].runs == ["grpo-0", "grpo-1", "grpo-2"]  # one replica per seed: train@grpo-1, ...
    assert by["ppo_no_adv_mask"].runs == ["ppo_no_adv_mask-0", "ppo_no_adv_mask-1", "ppo_no_adv_mask-2"]
    assert by["ppo_no_adv_mask"].ablation_of == "ppo" and by["ppo_no_adv_mask"].masks_off == ["advantage_mask"]
    assert by["ppo_no_adv_no_loss_mask"].ablation_of == "ppo"
    assert by["ppo_no_adv_no_loss_mask"].masks_off == ["loss_mask", "advantage_mask"]
    assert by["grpo_no_loss_mask"].ablation_of == "grpo"
    assert all(m.ablation_of is None for m in methods if not m.is_ablation)
    assert [by[k].display for k in ("ppo", "grpo", "reinforce_pp", "reinforce_pp_baseline", "rloo")] == [
        "PPO",
        "GRPO",
        "REINFORCE++",
        "REINFORCE++ baseline",
        "RLOO",
    ]
    assert by["ppo_no_adv_no_loss_mask"].display == "PPO w/o loss mask & advantage mask"


def test_group_methods_defaults_are_dropped_and_names_are_unique():
    runs = {
        "grpo_a": {"estimator": "grpo", "loss_mask": True},  # restates the train default: a full-mask method
        "cos": {"estimator": "grpo", "kl": {"coef": 0.01, "mode": "loss"}},
    }
    methods = group_methods(runs, {"loss_mask": True, "advantage_mask": True, "estimator": "grpo"}, seeds=[3, 5])
    by = {m.label: m for m in methods}
    assert sorted(by) == ["cos", "grpo_a"] and by["grpo_a"].overrides == {}  # both keys restate the defaults
    assert by["cos"].runs == ["cos-3", "cos-5"]
    # two full-mask GRPO methods: the plain one keeps the estimator name, the other adds its label
    assert by["grpo_a"].display == "GRPO" and by["cos"].display == "GRPO (cos)"


def test_runs_refuse_a_seed_of_their_own_and_twins():
    """Seeds are the top-level `seeds` list, one source for every run: a run's own `seed` (the old
    hand-copied replica) and two runs with the same overrides are refused, naming the fix."""
    from agentr1.config import ConfigError

    with pytest.raises(ConfigError, match=r"runs.grpo_s1.seed: a run trains once per seed of the top-level `seeds`"):
        config_from_dict({"runs": {"grpo": {"estimator": "grpo"}, "grpo_s1": {"estimator": "grpo", "seed": 1}}})
    with pytest.raises(ConfigError, match=r"runs.b and runs.a have the same overrides"):
        config_from_dict({"runs": {"a": {"estimator": "rloo"}, "b": {"estimator": "rloo"}}})
    with pytest.raises(ConfigError, match=r"no '-': it separates a run from its seed"):
        config_from_dict({"runs": {"grpo-x": {"estimator": "grpo"}}})
    with pytest.raises(ConfigError, match=r"seeds \[1, 1\]: give distinct seeds"):
        config_from_dict({"seeds": [1, 1]})
    cfg = config_from_dict({"seeds": [4, 7], "runs": {"grpo": {"estimator": "grpo"}}})
    assert cfg.replicas() == ["grpo-4", "grpo-7"]
    assert cfg.train_for("grpo-7").seed == 7 and cfg.for_run("grpo-7").seed == 7  # any seed, not only those listed
    assert cfg.train_for("grpo-12").seed == 12 and cfg.train_for("grpo").seed is None
    assert cfg.run_overrides("grpo-4") == {"estimator": "grpo", "seed": 4}
    with pytest.raises(ConfigError, match=r"unknown run 'rloo-1'.*trained once per seed"):
        cfg.train_for("rloo-1")


def test_ablation_without_its_full_mask_method():
    methods = group_methods({"rloo_no_loss": {"estimator": "rloo", "loss_mask": False}, "ppo": {"estimator": "gae"}})
    abl = next(m for m in methods if m.is_ablation)
    assert abl.ablation_of is None and abl.display == "rloo_no_loss (loss mask off)"


# -------------------------------------------------------------------------- fake project data
N_TEST, N_OOD = 20, 12
TYPES = ("bridge", "comparison")
SEEDS = [0, 1, 2]
GRPO = ["grpo-0", "grpo-1", "grpo-2"]
# policy (a baseline, a run: the same for each of its seeds, or one replica) -> (indices answered
# correctly on test, on ood); every other question scores 0
CORRECT = {
    "base_tool_call": (range(2), []),
    "naive_rag": (range(4), []),
    "cold_start": (range(6), range(2)),
    "ppo": (range(10), range(3)),
    "ppo_no_adv_mask": (range(10), range(3)),  # identical to ppo: a zero difference
    "grpo-0": (range(16), range(9)),
    "grpo-1": (range(14), range(6)),
    "grpo-2": (range(15), range(6)),
    "grpo_no_loss_mask": ([], []),  # far below grpo: beyond noise
    "rloo": (range(4), []),  # identical to naive_rag: beats base tool call, not naive RAG
}
RUNS = {
    "ppo": {"estimator": "gae"},
    "grpo": {"estimator": "grpo"},
    "rloo": {"estimator": "rloo"},
    "ppo_no_adv_mask": {"estimator": "gae", "advantage_mask": False},
    "grpo_no_loss_mask": {"estimator": "grpo", "loss_mask": False},
}
BASELINE_KINDS = {"base_tool_call", "naive_rag", "cold_start"}
# behaviour: tool calls per episode c (2c on comparison questions), the first k multi-hop questions of
# each split answered early; Base Tool Call never answers (nor has a valid format), naive RAG never calls
CALLS = {"cold_start": 3, "naive_rag": 0, "grpo-0": 1, "grpo-1": 2, "grpo-2": 0}
EARLY = {
    "cold_start": (5, 0),
    "naive_rag": (16, 12),
    "base_tool_call": (0, 0),
    "grpo-0": (10, 6),
    "grpo-1": (12, 3),
    "grpo-2": (14, 0),
}


def _of(table: dict, policy: str, default=None):
    """A replica's entry, else its run's (``grpo-1`` -> ``grpo``), else ``default``."""
    return table.get(policy, table.get(policy.rsplit("-", 1)[0], default))


def em_vector(policy: str, split: str) -> list[float]:
    test, ood = _of(CORRECT, policy)
    n, hits = (N_TEST, set(test)) if split == "test" else (N_OOD, set(ood))
    return [1.0 if i in hits else 0.0 for i in range(n)]


def question(split: str, i: int) -> dict:
    if split == "test":  # 16 two-hop questions, then 4 single-hop ones
        return {"id": f"t{i:02d}", "type": TYPES[i % 2], "hops": 2 if i < 16 else 1}
    return {"id": f"o{i:02d}", "type": "chain", "hops": 3 if i < 6 else 4}


def behaviour_fields(policy: str, split: str, i: int, q: dict) -> dict:
    answered = float(policy != "base_tool_call")
    early = float(i < _of(EARLY, policy, (2, 1))[split != "test"] and q["hops"] >= 2 and answered == 1.0)
    calls = _of(CALLS, policy, 2) * (2 if q["type"] == "comparison" else 1)
    return {"tool_calls": float(calls), "answered": answered, "format_ok": answered, "early_answer": early}


def support_of(em: float, i: int) -> float:
    """Supporting passages retrieved: all of them for a right answer; a wrong one cycles all / half / none."""
    return 1.0 if em else (1.0, 0.5, 0.0)[i % 3]


def write_eval(eval_dir: Path, policy: str) -> None:
    rows, splits = [], {}
    for split in ("test", "ood"):
        ems = em_vector(policy, split)
        for i, em in enumerate(ems):
            q = question(split, i)
            rows.append(
                {
                    **q,
                    "split": split,
                    "em": em,
                    "f1": em,
                    "subem": em,
                    **behaviour_fields(policy, split, i, q),
                    "turns": 3,
                    "reward": em,
                    "answer": "x",
                    "golds": ["x"],
                    "reason": "answer",
                    "support_found": support_of(em, i),
                }
            )
        lo, hi = bootstrap_ci(ems, 1000, 0.95, 0)
        splits[split] = {"n": len(ems), "em": sum(ems) / len(ems), "em_ci_lower": lo, "em_ci_upper": hi}
    kind = policy if policy in BASELINE_KINDS else "rl"
    metrics = {"policy": policy, "kind": kind, "splits": splits, **{f"{s}/em": v["em"] for s, v in splits.items()}}
    d = eval_dir / policy
    d.mkdir(parents=True, exist_ok=True)
    (d / "metrics.json").write_text(json.dumps(metrics))
    (d / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_curve(runs_dir: Path, run: str, offset: float) -> None:
    d = runs_dir / run
    d.mkdir(parents=True, exist_ok=True)
    lines = ["step,reward,em,tool_calls,dev_em", "0,,,,0.0"] + [
        f"{s},{offset + 0.1 * s:.3f},0.0,{1 + s / 2}," + ("0.5" if s == 3 else "") for s in range(1, 4)
    ]
    (d / "curve.csv").write_text("\n".join(lines) + "\n")


GATE = {
    "passed": False,
    "failing": ["dev/multi/spouse"],
    "thresholds": {"one_hop": 0.95, "multi": 0.9},
    "splits": {
        "dev": {
            "one_hop": {"n": 2, "accuracy": 1.0, "relations": {"spouse": {"n": 2, "accuracy": 1.0}}},
            "multi": {"n": 2, "accuracy": 0.5, "relations": {"spouse": {"n": 2, "accuracy": 0.5}}},
        }
    },
}
COPY = {
    "base": {"start": {"top1": 0.4}, "continue": {"top1": 0.7}},
    "cold_start": {"start": {"top1": 0.93}, "continue": {"top1": 0.97}},
    "gate": {"thresholds": {"start": 0.9, "continue": 0.95}, "passed": True},
}
SAMPLING = {
    "k": 8,
    "temperature": 1.0,
    "top_p": 1.0,
    "splits": {
        s: {
            "n": 4,
            "sampled_em": 0.25,
            "pass_at_k": 0.5,
            "types": {"bridge": {"n": 4, "sampled_em": 0.25, "pass_at_k": 0.5}},
        }
        for s in ("test", "ood")
    },
}


def replicas(runs, seeds=SEEDS) -> list[str]:
    return [f"{r}-{s}" for r in runs for s in seeds]


def make_cfg(tmp_path: Path, runs: dict = RUNS, seeds: list[int] = SEEDS, **report):
    eval_dir, runs_dir = tmp_path / "eval", tmp_path / "runs"
    for policy in [*replicas(runs, seeds), *BASELINE_KINDS]:
        write_eval(eval_dir, policy)
    cold = json.loads((eval_dir / "cold_start" / "metrics.json").read_text())
    (eval_dir / "cold_start" / "metrics.json").write_text(json.dumps({**cold, "sampling": SAMPLING}))
    for k, run in enumerate(replicas(runs, seeds)):
        write_curve(runs_dir, run, offset=-0.5 + 0.05 * k)
    for name, metrics in (("pretrain", {"gate": GATE}), ("sft", {"copy": COPY, "train": {"examples": 200}})):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "metrics.json").write_text(json.dumps(metrics))
    cfg = config_from_dict(
        {
            "seeds": list(seeds),
            "evaluate": {"out_dir": str(eval_dir)},
            "train": {"out_dir": str(runs_dir)},
            "pretrain": {"report_dir": str(tmp_path / "pretrain")},
            "sft": {"report_dir": str(tmp_path / "sft")},
            "report": {"out_dir": str(tmp_path / "reports"), **report},
            "tracking": {"enabled": False},
        }
    )
    # set the runs past the train-override validation (which checks each run against the train section's keys)
    object.__setattr__(cfg, "runs", {k: dict(v) for k, v in runs.items()})
    return cfg


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    cfg = make_cfg(tmp)
    data = stages.run("report", cfg, SimpleNamespace())
    return SimpleNamespace(cfg=cfg, data=data, out=tmp / "reports")


def test_summary_shows_what_rl_starts_from(report):
    found = report.data["foundation"]
    assert found["gate"] == GATE and found["copy"]["start"] == 0.93 and found["copy"]["gate"]["passed"]
    cold_em = json.loads((Path(report.cfg.evaluate.out_dir) / "cold_start" / "metrics.json").read_text())["test/em"]
    assert found["headroom"]["test"]["greedy_em"] == cold_em and found["headroom"]["test"]["pass_at_k"] == 0.5
    md = (report.out / "summary.md").read_text()
    assert "## What RL starts from" in md
    assert "reading gate" in md and "**not passed** (below: dev/multi/spouse)" in md
    assert "| spouse | 1.000 | 0.500 |" in md
    assert "first token 0.930 (>= 0.90), continuation 0.970 (>= 0.95): **passed**" in md
    assert f"| **test** | 4 | {cold_em:.3f} | 0.250 | 0.500 |" in md and "| test / bridge | 4 |" in md


def read_csv(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open()))


def mean(xs):
    return sum(xs) / len(xs)


def test_table3_rows_numbers_and_text(report):
    rows = read_csv(report.out / "table3.csv")
    assert [r["method"] for r in rows] == ["base_tool_call", "naive_rag", "cold_start", "ppo", "grpo", "rloo"]
    assert [r["name"] for r in rows] == ["Base Tool Call", "Naive RAG", "Cold start SFT", "PPO", "GRPO", "RLOO"]
    grpo = next(r for r in rows if r["method"] == "grpo")
    assert grpo["runs"] == "grpo-0;grpo-1;grpo-2" and grpo["n_seeds"] == "3"
    test_means = [0.8, 0.7, 0.75]
    ood_means = [9 / 12, 6 / 12, 6 / 12]
    avg_means = [(t + o) / 2 for t, o in zip(test_means, ood_means)]
    for key, per_seed in (("test", test_means), ("ood", ood_means), ("avg", avg_means)):
        assert float(grpo[f"{key}_mean"]) == pytest.approx(mean(per_seed), abs=1e-6)
        assert float(grpo[f"{key}_std"]) == pytest.approx(statistics.stdev(per_seed), abs=1e-6)
    assert grpo["test_n"] == "20" and grpo["ood_n"] == "12"
    # the CI resamples the seeds and the questions (the seeds x questions matrix of the row, both splits)
    mats = {s: [em_vector(r, s) for r in GRPO] for s in ("test", "ood")}
    boot = seeds_questions([(1.0, mats)], 1000, 0.95, report.cfg.seed)
    lo, hi = boot["test"].lower, boot["test"].upper
    assert (float(grpo["test_ci_lower"]), float(grpo["test_ci_upper"])) == (
        pytest.approx(lo, abs=1e-6),
        pytest.approx(hi, abs=1e-6),
    )
    assert float(grpo["avg_ci_lower"]) == pytest.approx(boot["avg"].lower, abs=1e-6)
    assert float(grpo["avg_ci_lower"]) < float(grpo["avg_mean"]) < float(grpo["avg_ci_upper"])
    # wider than the interval over questions alone: the seeds disagree (0.8, 0.7, 0.75)
    q_lo, q_hi = bootstrap_ci([mean(v) for v in zip(*mats["test"])], 1000, 0.95, report.cfg.seed)
    assert hi - lo > q_hi - q_lo
    # a single run: no std, and a question-level interval around its evaluation's mean
    cold = next(r for r in rows if r["method"] == "cold_start")
    assert cold["n_seeds"] == "1" and cold["test_std"] == ""
    stated = json.loads((Path(report.cfg.evaluate.out_dir) / "cold_start" / "metrics.json").read_text())
    stated = stated["splits"]["test"]
    assert float(cold["test_mean"]) == pytest.approx(stated["em"])
    assert float(cold["test_ci_lower"]) == pytest.approx(stated["em_ci_lower"], abs=0.06)
    assert float(cold["test_ci_upper"]) == pytest.approx(stated["em_ci_upper"], abs=0.06)

    md = (report.out / "table3.md").read_text()
    assert f"| GRPO | grpo-0, grpo-1, grpo-2 | 3 | 0.750 ± 0.050 [{lo:.3f}, {hi:.3f}] |" in md
    assert "two-level bootstrap (1000 replicates, percentile) that resamples the training seeds" in md
    assert "| Cold start SFT | cold_start | 1 | 0.300 [" in md
    assert "test EM (in-domain)" in md and "ood EM (out-of-domain)" in md
    assert "ppo_no_adv_mask" not in md  # ablations live in Table 4


def test_table4_beyond_noise_flags(report):
    rows = {(r["ablation"], r["split"]): r for r in read_csv(report.out / "table4.csv")}
    assert {a for a, _ in rows} == {"ppo_no_adv_mask", "grpo_no_loss_mask"}
    for split in ("test", "ood", "avg"):
        same = rows[("ppo_no_adv_mask", split)]
        assert same["full_mask"] == "ppo" and float(same["diff"]) == 0.0
        assert float(same["diff_ci_lower"]) == 0.0 == float(same["diff_ci_upper"]) and same["beyond_noise"] == "False"
        assert (same["seeds_ablation"], same["seeds_full"], same["judged"]) == ("3", "3", "True")
        worse = rows[("grpo_no_loss_mask", split)]
        assert worse["full_mask"] == "grpo" and worse["beyond_noise"] == "True" and float(worse["diff_ci_upper"]) < 0
    assert float(rows[("grpo_no_loss_mask", "test")]["diff"]) == pytest.approx(-0.75)
    assert float(rows[("grpo_no_loss_mask", "ood")]["diff"]) == pytest.approx(-7 / 12)
    assert rows[("grpo_no_loss_mask", "test")]["n_paired"] == "20"
    md = (report.out / "table4.md").read_text()
    assert "| GRPO w/o loss mask | loss mask | GRPO | 3 / 3 | test | 0.750 | 0.000 | -0.750 |" in md
    assert (
        "| PPO w/o advantage mask | advantage mask | PPO | 3 / 3 | test | 0.500 | 0.500 | +0.000 | [+0.000, +0.000] "
        "| within noise |"
    ) in md


def test_summary_statements_are_computed(report):
    s = report.data["summary"]
    assert s["best"]["labels"] == ["grpo"]
    grpo_avg = mean([(0.8 + 0.75) / 2, (0.7 + 0.5) / 2, (0.75 + 0.5) / 2])
    base_avg, cold_avg = (0.1 + 0.0) / 2, (0.3 + 2 / 12) / 2
    assert s["grpo"]["ratio_vs_base_tool_call"] == pytest.approx(grpo_avg / base_avg)
    assert s["grpo"]["points_vs_cold_start"] == pytest.approx(100 * (grpo_avg - cold_avg))
    assert s["beat_both_baselines"] == ["ppo", "grpo"]  # rloo == naive RAG: not beyond noise
    assert s["beat_cold_start"] == ["ppo", "grpo"]
    assert {(a["ablation"], a["split"]) for a in s["ablations_beyond_noise"]} == {
        ("grpo_no_loss_mask", k) for k in ("test", "ood", "avg")
    }
    text = (report.out / "summary.md").read_text()
    assert f"**GRPO** scores {grpo_avg:.3f}" in text and "(a point estimate)" in text
    assert f"GRPO's mean average EM is {grpo_avg / base_avg:.2f}x Base Tool Call's" in text
    vs_cold = s["grpo"]["vs_cold_start"]
    assert vs_cold["diff"] == pytest.approx(grpo_avg - cold_avg) and vs_cold["verdict"] == "beyond noise"
    assert f"- GRPO (3 seeds) minus Cold start SFT on the average EM: {grpo_avg - cold_avg:+.3f} [" in text
    assert "every RL row and ablation is 3 training seed(s), each cold start one SFT run" in text
    assert "a difference is beyond noise when its interval excludes 0 and each RL row has 3+ seeds" in text
    # the RL methods against each other: GRPO is far above PPO and RLOO here
    pairs = s["vs_methods"]
    assert set(pairs) == {"ppo - grpo", "ppo - rloo", "grpo - rloo"}
    assert pairs["ppo - grpo"]["test"]["beyond_noise"] and pairs["ppo - grpo"]["test"]["diff"] == pytest.approx(
        0.5 - 0.75
    )
    assert (
        "- RL methods against each other on test (same cold start, 3 pairs, 95% intervals): beyond noise GRPO over PPO"
        in text
    )
    assert "Beat both Base Tool Call and Naive RAG beyond noise" in text and "the others do not: RLOO." in text
    assert "GRPO w/o loss mask vs GRPO on test: -0.750" in text
    # the one ablation beyond noise is worse than its full-mask method: the paper's direction holds
    assert s["mask_direction"] == "holds"
    assert (
        "The paper's direction (masks on beat masks off) holds: in every difference beyond noise the ablation is worse"
    ) in text


def test_report_json_breakdown_and_vs_baselines(report):
    data = json.loads((report.out / "report.json").read_text())
    assert data["metric"] == "em" and data["splits"] == ["test", "ood"]
    g = data["policies"]["grpo"]
    assert g["runs"] == GRPO and g["kind"] == "rl" and g["n_seeds"] == 3
    assert g["test"]["per_seed"] == {"grpo-0": 0.8, "grpo-1": 0.7, "grpo-2": 0.75}
    assert data["seeds"] == SEEDS and data["min_seeds"] == 3 and "two-level bootstrap" in data["interval_method"]
    assert set(data["bootstrap"]["resamples"]) == {"training_seeds", "questions"}
    assert data["policies"]["ppo_no_adv_mask"]["ablation_of"] == "ppo"
    vs = data["vs_baselines"]["rloo"]
    assert vs["naive_rag"]["test"]["diff"] == 0.0 and vs["naive_rag"]["avg"]["beyond_noise"] is False
    # 2 more correct of 20 questions: at the noise level (P(no such question resampled) = 0.9^20 = 12%)
    assert vs["base_tool_call"]["test"]["diff"] == pytest.approx(0.1)
    assert vs["base_tool_call"]["test"]["ci_lower"] == 0.0 and vs["base_tool_call"]["test"]["beyond_noise"] is False
    assert data["vs_baselines"]["grpo"]["base_tool_call"]["test"]["beyond_noise"] is True
    # by question type / hops: seed-averaged per-question EM over the group's questions
    bd = data["breakdown"]
    seed_avg = [mean(v) for v in zip(*(em_vector(r, "test") for r in GRPO))]
    for t in TYPES:
        idx = [i for i in range(N_TEST) if TYPES[i % 2] == t]
        assert bd["test"]["type"][t]["n"] == len(idx)
        assert bd["test"]["type"][t]["grpo"] == pytest.approx(mean([seed_avg[i] for i in idx]))
    ood_avg = [mean(v) for v in zip(*(em_vector(r, "ood") for r in GRPO))]
    assert bd["ood"]["hops"]["3"]["grpo"] == pytest.approx(mean(ood_avg[:6]))
    assert bd["ood"]["hops"]["4"]["grpo"] == pytest.approx(mean(ood_avg[6:]))
    md = (report.out / "breakdown.md").read_text()
    assert "## test EM (in-domain) by question type" in md and "bridge (n=10)" in md and "4 (n=6)" in md


def test_behaviour_table_numbers(report):
    rows = {(r["split"], r["by"], r["group"], r["policy"]): r for r in read_csv(report.out / "behaviour.csv")}
    assert list(next(iter(rows.values()))) == [
        "split",
        "by",
        "group",
        "policy",
        "name",
        "kind",
        "runs",
        "n",
        "n_multihop",
        "em",
        "tool_calls",
        "early_answer",
        "format_ok",
        "answered",
        "right",
        "wrong_all",
        "wrong_some",
        "wrong_none",
    ]

    def num(split, by, group, policy, field):
        v = rows[(split, by, group, policy)][field]
        return None if v == "" else float(v)

    g = rows[("test", "all", "all", "grpo")]
    assert (g["runs"], g["n"], g["n_multihop"]) == ("grpo-0;grpo-1;grpo-2", "20", "16")
    # seeds: calls 1, 2, 0 on bridge questions and twice that on comparison ones -> 1.5, 3, 0 -> 1.5
    assert num("test", "all", "all", "grpo", "tool_calls") == pytest.approx(1.5)
    assert num("test", "all", "all", "cold_start", "tool_calls") == pytest.approx(4.5)
    assert num("ood", "all", "all", "grpo", "tool_calls") == pytest.approx(1.0)
    # the early-answer share is over the multi-hop episodes only: 10, 12, 14 of 16 -> 0.75 (not 36 / 60)
    assert num("test", "all", "all", "grpo", "early_answer") == pytest.approx(0.75)
    assert num("test", "all", "all", "cold_start", "early_answer") == pytest.approx(5 / 16)
    assert num("ood", "all", "all", "grpo", "early_answer") == pytest.approx((6 + 3 + 0) / 36)
    assert num("test", "all", "all", "grpo", "em") == pytest.approx(0.75)
    # per type (bridge = the even questions: 8 of them multi-hop; the cold start's first 5 hold 0, 2, 4)
    assert num("test", "type", "bridge", "cold_start", "early_answer") == pytest.approx(3 / 8)
    assert num("test", "type", "comparison", "cold_start", "early_answer") == pytest.approx(2 / 8)
    assert num("test", "type", "comparison", "cold_start", "tool_calls") == 6.0
    # per hops: single-hop questions have no share; ood 3 hops = the first 6: 6, 3, 0 of 6 early
    assert (
        num("test", "hops", "1", "grpo", "early_answer") is None
        and rows[("test", "hops", "1", "grpo")]["n_multihop"] == "0"
    )
    assert num("test", "hops", "1", "cold_start", "tool_calls") == 4.5
    assert num("ood", "hops", "3", "grpo", "early_answer") == pytest.approx(0.5)
    assert num("ood", "hops", "4", "grpo", "early_answer") == 0.0
    # format / answered: Base Tool Call never answers, so it is never early either
    assert (
        num("test", "all", "all", "base_tool_call", "answered")
        == 0.0
        == num("test", "all", "all", "base_tool_call", "early_answer")
    )
    assert (
        num("test", "all", "all", "naive_rag", "tool_calls") == 0.0
        and num("test", "all", "all", "naive_rag", "early_answer") == 1.0
    )
    # failure breakdown: right, then the wrong answers by the share of supporting passages retrieved (seeds averaged)
    for policy, runs in (("cold_start", ["cold_start"]), ("grpo", GRPO)):
        ems = [em_vector(r, "test") for r in runs]
        want = {"right": mean([mean(e) for e in ems])}
        for k, found in (("wrong_all", 1.0), ("wrong_some", 0.5), ("wrong_none", 0.0)):
            want[k] = mean([mean([float(not x and support_of(x, i) == found) for i, x in enumerate(e)]) for e in ems])
        assert {k: num("test", "all", "all", policy, k) for k in want} == pytest.approx(want, abs=1e-5)
        assert sum(want.values()) == pytest.approx(1.0)
    assert ("test", "all", "all", "grpo_no_loss_mask") in rows  # ablations are policies too
    assert report.data["behaviour"]["splits"]["test"]["all"]["all"]["grpo"]["tool_calls"] == pytest.approx(1.5)

    md = (report.out / "behaviour.md").read_text()
    assert "## test EM (in-domain): 20 questions, 16 multi-hop" in md
    assert "| GRPO | grpo-0, grpo-1, grpo-2 | 0.750 | 1.50 | 0.750 | 1.000 | 1.000 |" in md
    assert "| Naive RAG * | naive_rag | 0.200 | 0.00 | 1.000 | 1.000 | 1.000 |" in md
    assert "| Base Tool Call | base_tool_call | 0.100 | 3.00 | 0.000 | 0.000 | 0.000 |" in md
    calls_table, early_table = md.split("### test: tool calls")[1].split("### test: early-answer")
    breakdown = md.split("### test: failure breakdown by question type")[1].split("## ood")[0]
    assert "| Method | all (n=20) | bridge (n=10) | comparison (n=10) |" in breakdown
    assert "| Naive RAG" not in breakdown and "| Base Tool Call" not in breakdown  # no search: no chain to break
    g = {k: num("test", "all", "all", "grpo", k) for k in ("right", "wrong_all", "wrong_some", "wrong_none")}
    assert "| GRPO | " + " / ".join(f"{v:.2f}" for v in g.values()) + " |" in breakdown
    assert "| Method | bridge (n=10) | comparison (n=10) | 1 hop (n=4) | 2 hops (n=16) |" in calls_table
    assert "| Method | bridge (n=8) | comparison (n=8) | 2 hops (n=16) |" in early_table.split("## ood")[0]

    # the summary states how GRPO's behaviour differs from the cold start's, from these numbers
    f = report.data["behaviour"]["grpo_vs_cold_start"]
    assert f["splits"]["test"]["tool_calls"] == {"cold_start": 4.5, "grpo": 1.5, "diff": -3.0}
    assert f["splits"]["ood"]["early_answer"]["diff"] == pytest.approx(0.25)
    text = (report.out / "summary.md").read_text()
    assert "## What RL changed besides the score" in text
    assert (
        f"- GRPO against Cold start SFT: fewer tool calls per episode (test 4.50 → 1.50, -3.00; ood 3.00 → 1.00, "
        f"-2.00) and a larger early-answer share (test {5 / 16:.3f} → 0.750, {0.75 - 5 / 16:+.3f}; ood 0.000 → 0.250, "
        "+0.250), the share of multi-hop episodes answered before all their supporting passages were retrieved."
    ) in text
    assert "| GRPO | 1.50 | 0.750 | 1.00 | 0.250 |" in text and text.index("besides the score") < text.index(
        "starts from"
    )


def test_behaviour_of_evaluations_without_early_answer(tmp_path):
    cfg = make_cfg(tmp_path, runs={"grpo": {"estimator": "grpo"}})
    for ep in Path(cfg.evaluate.out_dir).glob("*/episodes.jsonl"):  # evaluations that predate the field
        rows = [json.loads(line) for line in ep.read_text().splitlines()]
        ep.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "early_answer"}) + "\n" for r in rows))
    data = stages.run("report", cfg, SimpleNamespace())
    out = tmp_path / "reports"
    assert data["behaviour"]["splits"]["test"]["all"]["all"]["grpo"]["early_answer"] is None
    assert "| GRPO | grpo-0, grpo-1, grpo-2 | 0.750 | 1.50 | — | 1.000 | 1.000 |" in (out / "behaviour.md").read_text()
    text = (out / "summary.md").read_text()
    assert "fewer tool calls per episode (test 4.50 → 1.50, -3.00" in text
    assert "the early-answer share is not recorded in these evaluations" in text


def test_smoothed_tool_calls_and_deterministic_learning_curves(tmp_path):
    from agentr1.report.inputs import Curve
    from agentr1.report.plots import learning_curves, smoothed

    assert smoothed([0, 1, 2, 3, 4], [None, 1.0, 2.0, 3.0, 6.0], window=3) == [
        (1, 1.0),
        (2, 1.5),
        (3, 2.0),
        (4, 11 / 3),
    ]
    assert smoothed([0], [None]) == []
    curves = [
        Curve("grpo-0", [0, 1, 2], [None, 0.1, 0.2], [0.0, None, 0.5], [None, 2.0, 1.0]),
        Curve("grpo-1", [0, 1, 2], [None, 0.0, 0.3], [0.0, None, 0.25], [None, 3.0, 2.0]),
    ]
    for name in ("a.png", "b.png"):
        learning_curves(curves, {"grpo-0": "grpo", "grpo-1": "grpo"}, tmp_path / name)
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    w, h = _png_size(tmp_path / "a.png")
    assert w > 100 and h > 100


def _png_size(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", raw[16:24])


def test_plots_and_curves(report):
    for name in ("learning_curves.png", "em_bars.png", "ablations.png"):
        w, h = _png_size(report.out / "plots" / name)
        assert w > 100 and h > 100
    rows = read_csv(report.out / "curves.csv")
    assert list(rows[0]) == ["run", "method", "step", "reward", "dev_em", "tool_calls"]
    assert {(r["run"], r["method"]) for r in rows} == {(f"{run}-{s}", run) for run in RUNS for s in SEEDS}
    s1 = [r for r in rows if r["run"] == "grpo-1"]
    assert [r["step"] for r in s1] == ["0", "1", "2", "3"] and s1[0]["reward"] == "" and s1[0]["dev_em"] == "0.0"
    assert [r["tool_calls"] for r in s1] == ["", "1.5", "2.0", "2.5"]


def test_missing_evaluations_name_the_stage_to_run(tmp_path):
    cfg = make_cfg(tmp_path)
    eval_dir = Path(cfg.evaluate.out_dir)
    (eval_dir / "grpo-1" / "episodes.jsonl").unlink()
    (eval_dir / "naive_rag" / "metrics.json").unlink()
    (Path(cfg.train.out_dir) / "rloo-2" / "curve.csv").unlink()
    with pytest.raises(StageError) as exc:
        stages.run("report", cfg, SimpleNamespace())
    msg = str(exc.value)
    assert "grpo-1/episodes.jsonl (run `dvc repro evaluate@grpo-1`)" in msg
    assert "naive_rag/metrics.json (run `dvc repro evaluate_baseline@naive_rag`)" in msg
    assert "rloo-2/curve.csv (run `dvc repro train@rloo-2`)" in msg
    assert not (tmp_path / "reports").exists()


def test_seeds_on_different_questions_and_missing_split_fail(tmp_path):
    cfg = make_cfg(tmp_path)
    ep = Path(cfg.evaluate.out_dir) / "grpo-2" / "episodes.jsonl"
    lines = ep.read_text().splitlines(keepends=True)
    ep.write_text("".join(lines[1:]))  # drops question t00
    with pytest.raises(StageError, match=r"seeds of method 'grpo'.*dvc repro evaluate@grpo-2"):
        stages.run("report", cfg, SimpleNamespace())
    ep.write_text("".join(line for line in lines if '"split": "ood"' not in line))
    with pytest.raises(StageError, match=r"no 'ood' episodes: re-run `dvc repro evaluate@grpo-2`"):
        stages.run("report", cfg, SimpleNamespace())
    cfg.report.splits = ["dev"]
    with pytest.raises(StageError, match=r"report.splits \['dev'\] are not in evaluate.splits"):
        stages.run("report", cfg, SimpleNamespace())


def test_cli_report_prints_the_summary_path(tmp_path, monkeypatch, capsys):
    runs = {"ppo": {"estimator": "gae"}, "ppo_no_adv_mask": {"estimator": "gae", "advantage_mask": False}}
    cfg = make_cfg(tmp_path, runs=runs, metric="f1")
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump(
            {
                "seeds": [0],
                "runs": runs,
                "evaluate": {"out_dir": cfg.evaluate.out_dir},
                "train": {"out_dir": cfg.train.out_dir},
                "report": {"out_dir": "out", "metric": "f1", "bootstrap": {"samples": 200, "ci": 0.9}},
                "tracking": {"enabled": False},
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    assert main(["--params", str(params), "report"]) == 0
    assert capsys.readouterr().out.strip().endswith(str(Path("out") / "summary.md"))
    md = (tmp_path / "out" / "table3.md").read_text()
    assert "Table 3: F1" in md and "90% intervals" in md and "| PPO | ppo-0 | 1 | 0.500 [" in md  # params: seeds [0]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "No GRPO method among params `runs`" in summary
    # one seed: listed, never judged
    assert (
        "- Not judged (a verdict needs 3 training seeds per RL row, params report.min_seeds): PPO (1 seed)" in summary
    )
    t4 = read_csv(tmp_path / "out" / "table4.csv")
    assert {r["judged"] for r in t4} == {"False"} and {r["beyond_noise"] for r in t4} == {"False"}
    assert "No ablation difference is judged (too few seeds)" in summary
    (Path(cfg.evaluate.out_dir) / "ppo-0" / "metrics.json").unlink()
    assert main(["--params", str(params), "report"]) == 1
    assert "dvc repro evaluate@ppo-0" in capsys.readouterr().err


def test_report_config_is_validated():
    from agentr1.config import ConfigError

    with pytest.raises(ConfigError, match="report.metric"):
        config_from_dict({"report": {"metric": "bleu"}})
    with pytest.raises(ConfigError, match="report.splits"):
        config_from_dict({"report": {"splits": ["test", "test"]}})
    with pytest.raises(ConfigError, match="report.bootstrap.samples"):
        config_from_dict({"report": {"bootstrap": {"samples": 10}}})


@pytest.mark.slow
def test_report_logs_to_mlflow(tmp_path):
    import mlflow

    cfg = make_cfg(tmp_path, runs={"ppo": {"estimator": "gae"}})
    cfg.tracking.enabled = True
    cfg.tracking.experiment_prefix = "report-test"
    cfg.tracking.parent_run = True
    cfg.tracking.artifact_root = str(tmp_path / "artifacts")
    stages.run("report", cfg, SimpleNamespace())
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name("report-test-nano")
    assert "parent run per pipeline" in exp.tags["mlflow.note.content"]
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the runs table, not the GenAI view
    (run,) = client.search_runs([exp.experiment_id], filter_string="tags.mlflow.runName = 'report'")
    assert run.data.metrics["table3/ppo.test.em"] == pytest.approx(0.5)
    assert run.data.metrics["table3/ppo.avg.em"] == pytest.approx((0.5 + 0.25) / 2)
    assert all(k.count("/") == 1 for k in run.data.metrics)
    names = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/table3.md", "report/summary.md", "report/report.json", "report/plots"} <= names
    # the headline on the pipeline's parent run, which ends with its last stage
    parent = client.get_run(run.data.tags["mlflow.parentRunId"])
    assert parent.data.tags["agentr1.role"] == "pipeline" and parent.info.status == "FINISHED"
    assert parent.data.metrics == run.data.metrics
    assert parent.info.end_time >= run.info.end_time
    names = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/summary.md", "report/table3.md", "report/plots"} <= names
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "report/plots")} >= {"report/plots/em_bars.png"}
    # the parent's description is the headline in Markdown, Table 3 a table the UI renders
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("# Agent-R1 reproduction: summary") and "| PPO |" in note and len(note) <= 8000
    for run_id in (parent.info.run_id, run.info.run_id):
        table = mlflow.load_table("report/table3.json", run_ids=[run_id])
        assert "ppo" in set(table["method"]) and table.loc[table["method"] == "ppo", "test_mean"].item() == 0.5


def test_the_parent_description_keeps_whole_paragraphs_under_the_limit(tmp_path):
    from agentr1.stages.report import run_description

    (tmp_path / "summary.md").write_text("# Summary\n\nfirst paragraph\n\n## A heading\n\n| a |\n|---|\n| 1 |\n")
    (tmp_path / "table4.md").write_text("# Table 4\n\n| b |\n|---|\n| 2 |\n")
    whole = run_description(tmp_path)
    assert whole.startswith("# Summary") and whole.endswith("| 2 |") and "The rest" not in whole
    limit = len("# Summary\n\nfirst paragraph\n\n## A heading") + 100  # the heading fits, its table does not
    cut = run_description(tmp_path, limit=limit)
    assert cut.startswith("# Summary\n\nfirst paragraph") and "## A heading" not in cut  # no heading without its table
    assert cut.endswith("`report/table3.json` (a table).*") and len(cut) <= limit


def test_flat_panels_say_so_and_bars_carry_their_values():
    """An all-zero panel says "all 0" and an empty one what is missing, instead of looking broken;
    every bar is labelled with its value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agentr1.report.plots import _bars, _note_if_flat
    from agentr1.report.rows import Cell

    fig, (zero, empty, some) = plt.subplots(1, 3)
    _note_if_flat(zero, [0.0, 0.0], "no data")
    _note_if_flat(empty, [], "no dev evaluations")
    _note_if_flat(some, [0.0, 0.5], "no data")
    assert [t.get_text() for t in zero.texts] == ["all 0"] and [t.get_text() for t in empty.texts] == [
        "no dev evaluations"
    ]
    assert len(some.texts) == 0
    _bars(some, [0, 1], [Cell(0.25, None, 0.1, 0.4, 10), Cell(0.0, None, 0.0, 0.0, 10)])
    assert [t.get_text() for t in some.texts] == ["0.25", "0.00"]
    plt.close(fig)


def test_reference_cold_start_rows_and_each_method_against_its_own_cold_start(tmp_path):
    """With params sft_reference, Table 3 has the reference cold start and GRPO from it; every RL
    method is compared with the cold start it started from, per split, and GRPO with the reference."""
    CORRECT["cold_start_reference"] = (range(14), range(4))  # the better demonstrator's SFT
    CORRECT["grpo_reference"] = (range(15), range(4))
    try:
        runs = {**RUNS, "grpo_reference": {"estimator": "grpo", "cold_start": "reference"}}
        cfg = make_cfg(tmp_path, runs)
        write_eval(Path(cfg.evaluate.out_dir), "cold_start_reference")
        object.__setattr__(
            cfg, "sft_reference", {"oracle_noise": 0.2, "out_dir": "ref", "report_dir": str(tmp_path / "sft_ref")}
        )
        data = stages.run("report", cfg, SimpleNamespace())
    finally:
        del CORRECT["cold_start_reference"], CORRECT["grpo_reference"]
    t3 = read_csv(tmp_path / "reports" / "table3.csv")
    names = {r["method"]: r["name"] for r in t3}
    assert names["cold_start_reference"] == "Cold start SFT, reference demonstrator"
    assert names["grpo_reference"] == "GRPO from the reference cold start" and names["grpo"] == "GRPO"
    vs = data["summary"]["vs_cold_start"]["test"]
    assert vs["grpo_reference"]["cold_start"] == "cold_start_reference" and vs["grpo"]["cold_start"] == "cold_start"
    assert vs["grpo_reference"]["diff"] == pytest.approx(1 / 20)  # 15 - 14 of 20, against its own start
    grpo_mean = mean([mean(em_vector(r, "test")) for r in GRPO])
    assert vs["grpo"]["diff"] == pytest.approx(grpo_mean - 6 / 20) and vs["grpo"]["beyond_noise"]
    ref = data["summary"]["grpo_vs_reference"]["test"]
    assert ref["diff"] == pytest.approx(grpo_mean - 14 / 20) and ref["ratio_vs_naive_rag"] == pytest.approx(
        grpo_mean / 0.2
    )
    text = (tmp_path / "reports" / "summary.md").read_text()
    assert "- On test, each RL method minus the cold start it started from" in text
    assert f"- GRPO on test: {grpo_mean:.3f} ({grpo_mean / 0.2:.1f}x Naive RAG's mean 0.200)" in text
    assert "against Cold start SFT, reference demonstrator (0.700" in text


def test_gigpo_against_grpo_with_its_step_group_share(tmp_path):
    """A step-level method (GiGPO) is compared with plain GRPO from the same cold start, its seeds and
    the questions resampled (paired on the questions), and the summary states its step-group share
    read from curve.csv."""
    CORRECT["gigpo"], CORRECT["gigpo-1"] = (range(18), range(9)), (range(17), range(8))
    try:
        runs = {**RUNS, "gigpo": {"estimator": "gigpo"}}
        cfg = make_cfg(tmp_path, runs)
        for run, share in (("gigpo-0", 0.5), ("gigpo-1", 0.7), ("gigpo-2", 0.6)):
            path = Path(cfg.train.out_dir) / run / "curve.csv"
            rows = path.read_text().splitlines()
            path.write_text(
                "\n".join([rows[0] + ",step_group_shared", rows[1] + ","] + [r + f",{share}" for r in rows[2:]]) + "\n"
            )
        data = stages.run("report", cfg, SimpleNamespace())
    finally:
        del CORRECT["gigpo"], CORRECT["gigpo-1"]
    grpo_mean = mean([mean(em_vector(r, "test")) for r in GRPO])
    facts = data["summary"]["step_credit"]["gigpo"]
    assert facts["vs"] == "grpo" and facts["step_group_shared_later"] == pytest.approx(0.6)
    gigpo_mean = (18 + 17 + 18) / 3 / 20  # seeds 0 and 2 as "gigpo", seed 1 its own
    assert facts["diffs"]["test"]["diff"] == pytest.approx(gigpo_mean - grpo_mean)
    t3 = {r["method"]: r for r in read_csv(tmp_path / "reports" / "table3.csv")}
    assert t3["gigpo"]["name"] == "GiGPO" and t3["gigpo"]["n_seeds"] == "3"
    text = (tmp_path / "reports" / "summary.md").read_text()
    assert f"- GiGPO (3 seed(s)) against GRPO (3), same cold start, 95% interval: test {gigpo_mean:.3f} vs" in text
    assert "on average 60% of the turns after the first share their state" in text
    assert (tmp_path / "reports" / "plots" / "step_credit.png").stat().st_size > 1000
