"""Do the report's verdicts survive another set of training seeds? (issue 47, item 3)

The report judges every difference with an interval over training seeds x questions
(``agentr1.report.stats.seeds_questions``) on the seeds of params ``seeds`` (set A, 0-2 in the
nano default). This bench trains and evaluates every run again on a disjoint seed set (set B,
``--seeds``, default 3 4 5: another seed is what another CPU vendor amounts to, its bits differ),
then makes every comparison the report makes on each set:

* each RL row minus the cold start it started from, per split and on the average;
* each pair of full-mask RL methods from one cold start (who beats whom; GiGPO against GRPO among them);
* each mask ablation minus its full-mask method (the paper's direction);
* GRPO minus the reference cold start;

and prints, side by side, the verdict of each set under the two-level interval paired on the seeds
where both rows share them (``report.pair_seeds: true``, the report's in sessions 15-17), under the
two-level interval with each row's seeds drawn on its own (the report's default), and under the interval of earlier
reports (paired bootstrap over questions of the seed-averaged scores, seeds held fixed): a verdict
that differs between A and B is a flip. It also prints each row's test EM per seed (a seed that is
slow in every method is what pairing the seeds cancels). Set B's runs train
with ``--set`` overrides into ``bench/.cache/seed_sets/<recipe>/`` (git-ignored, tracking off: no
MLflow run or registry version; ``<recipe>`` = a digest of params ``train``, ``runs`` and
``evaluate``, so a changed recipe trains anew), one stage process at a time; finished ones are
reused. Set A's are the
pipeline's outputs (``dvc repro`` first). Results: table on stdout, ``bench/results/seed_sets.json``.

    .venv/bin/python bench/seed_sets.py                 # train + evaluate set B (~the RL part of make run), compare
    .venv/bin/python bench/seed_sets.py --no-train      # compare what is there
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
CACHE_ROOT = ROOT / "bench" / ".cache" / "seed_sets"


def cache_dir(cfg) -> Path:
    """Set B's folder for the recipe of ``cfg`` (params ``train``, ``runs``, ``evaluate``)."""
    import hashlib

    recipe = json.dumps(
        [cfg.train.model_dump(mode="json"), cfg.runs, cfg.evaluate.model_dump(mode="json")], sort_keys=True, default=str
    )
    return CACHE_ROOT / hashlib.sha256(recipe.encode()).hexdigest()[:12]


def _agentr1(cache: Path, *args: str) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
        "GX_ANALYTICS_ENABLED": "false",
    }
    exe = Path(sys.executable).with_name("agentr1")
    sets = [
        "--set",
        f"train.out_dir={cache / 'runs'}",
        "--set",
        f"evaluate.out_dir={cache / 'eval'}",
        "--set",
        "tracking.enabled=false",
    ]
    subprocess.run([str(exe), *sets, *args], cwd=ROOT, env=env, check=True)


def train_set_b(cfg, seeds: list[int]) -> dict[str, float]:
    """Train and evaluate every run x ``seeds`` not yet in the cache; seconds per replica."""
    times, cache = {}, cache_dir(cfg)
    for run in cfg.runs:
        for seed in seeds:
            name = f"{run}-{seed}"
            if (cache / "eval" / name / "episodes.jsonl").is_file():
                continue
            t0 = time.perf_counter()
            if not (cache / "runs" / name / "checkpoint").is_dir():
                _agentr1(cache, "train", "--run", name)
            _agentr1(cache, "evaluate", "--policy", name)
            times[name] = round(time.perf_counter() - t0, 1)
            print(f"{name}: {times[name]} s", flush=True)
    return times


def comparisons(cfg, seeds: list[int], eval_dir: Path) -> dict[str, dict]:
    """Every comparison the report makes, on the replicas of ``seeds`` in ``eval_dir`` (the
    baselines from ``evaluate.out_dir``): ``{name: {split: {two_level, question_only}}}``."""
    from agentr1.report.inputs import load_evaluation
    from agentr1.report.methods import group_methods, report_baselines
    from agentr1.report.rows import ablation_pairs, build_rows, compare, compare_questions_only
    from agentr1.report.summary import grpo_row, method_pairs

    rc = cfg.report
    splits, samples, ci = list(rc.splits), rc.bootstrap.samples, rc.bootstrap.ci
    named = report_baselines(cfg.sft_reference is not None)
    methods = group_methods(cfg.runs, cfg.train.model_dump(), seeds)
    evals = {p: load_evaluation(eval_dir, p, splits, rc.metric, list(named)) for m in methods for p in m.runs}
    evals |= {b: load_evaluation(Path(cfg.evaluate.out_dir), b, splits, rc.metric, list(named)) for b in named}
    rows = build_rows(methods, evals, splits, samples, ci, cfg.seed, named)
    by = {r.label: r for r in rows}
    pairs = [(r.label, r.method.cold_start) for r in rows if r.kind == "rl"]
    pairs += [(a.label, b.label) for a, b in method_pairs(rows)]
    pairs += [(abl.label, full.label) for abl, full in ablation_pairs(rows)]
    grpo = grpo_row(rows)
    if grpo is not None and "cold_start_reference" in by:
        pairs.append((grpo.label, "cold_start_reference"))
    out = {}
    for a, b in pairs:
        two = compare(by[a], by[b], splits, samples, ci, cfg.seed, rc.min_seeds, pair_seeds=True)
        alone = compare(by[a], by[b], splits, samples, ci, cfg.seed, rc.min_seeds, pair_seeds=False)
        one = compare_questions_only(by[a], by[b], splits, samples, ci, cfg.seed)
        out[f"{a} - {b}"] = {
            d.split: {"two_level": _entry(d), "two_level_unpaired": _entry(u), "question_only": _entry(q)}
            for d, u, q in zip(two, alone, one)
        }
    per_seed = {
        r.label: {k: [round(v, 4) for v in r.per_seed[k].values()] for k in r.per_seed}
        for r in rows
        if r.kind != "baseline"
    }
    return {"comparisons": out, "per_seed": per_seed}


def _entry(d) -> dict:
    verdict = d.verdict if d.verdict != "beyond noise" else ("beyond noise (+)" if d.diff > 0 else "beyond noise (-)")
    return {"diff": round(d.diff, 4), "ci": [round(d.ci_lower, 4), round(d.ci_upper, 4)], "verdict": verdict}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5], help="set B (disjoint from params seeds)")
    ap.add_argument("--no-train", action="store_true", help="compare the evaluations already there")
    ap.add_argument("--out", default=str(ROOT / "bench/results/seed_sets.json"))
    a = ap.parse_args()
    from agentr1.config import load_config

    cfg = load_config(ROOT / "params.yaml")
    if set(a.seeds) & set(cfg.seeds):
        ap.error(f"--seeds {a.seeds} overlap params seeds {cfg.seeds}: set B must be disjoint")
    times = {} if a.no_train else train_set_b(cfg, a.seeds)
    made = {
        "A": comparisons(cfg, list(cfg.seeds), Path(cfg.evaluate.out_dir)),
        "B": comparisons(cfg, list(a.seeds), cache_dir(cfg) / "eval"),
    }
    sets = {k: v["comparisons"] for k, v in made.items()}
    kinds = {"two_level": "two-level", "two_level_unpaired": "unpaired", "question_only": "questions"}
    for key, made_set in made.items():
        print(f"test EM per seed, set {key}:")
        for row, per in made_set["per_seed"].items():
            print(f"  {row:<28}" + " ".join(f"{v:.3f}" for v in per["test"]))
    flips = {k: [] for k in kinds}
    header = f"{'comparison':<48}{'split':<6}" + "".join(
        f"{f'{k} {s}':>30}" for k in kinds.values() for s in ("A", "B")
    )
    print(header)
    for name, per_split in sets["A"].items():
        for split, entry in per_split.items():
            b = sets["B"][name][split]
            cells = []
            for kind in kinds:
                va, vb = entry[kind], b[kind]
                cells += [f"{va['diff']:+.3f} {va['verdict']}", f"{vb['diff']:+.3f} {vb['verdict']}"]
                if va["verdict"] != vb["verdict"]:
                    flips[kind].append(f"{name} {split}: {va['verdict']} -> {vb['verdict']}")
            print(f"{name:<48}{split:<6}" + "".join(f"{c:>30}" for c in cells))
    n = sum(len(v) for v in sets["A"].values())
    for kind, found in flips.items():
        print(f"\n{kind}: {len(found)} of {n} verdicts flip between seeds {cfg.seeds} and {a.seeds}")
        for f in found:
            print("  " + f)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(
        json.dumps(
            {
                "seeds": {"A": list(cfg.seeds), "B": a.seeds},
                "comparisons": n,
                "flips": flips,
                "sets": sets,
                "per_seed": {k: v["per_seed"] for k, v in made.items()},
                "seconds_per_replica_B": times,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
