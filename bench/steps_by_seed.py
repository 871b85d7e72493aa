"""How many RL steps does every seed need? Dev EM by step for several training seeds (issue 47, item 5).

Section 19 chose ``train.steps`` from one seed's dev curve (GRPO flat from step 4). The pipeline's
first 3-seed run then showed one GRPO seed (grpo-1) still at the cold start's dev EM at step 8.
This bench trains the given runs for each seed for ``--steps`` steps (dev EM every
``train.dev.every`` steps on the dev questions; a run with constant lr is the same as a shorter
run for its first steps, so one long run answers every shorter budget) and prints, per
run x seed, the dev EM at each evaluated step, and per budget the number of seeds whose dev EM
has left the cold start's (step 0) by more than ``--margin``. ``--set train.KEY=VALUE`` (repeatable)
tries a recipe variant; ``--tag`` names its cache folder. Runs go to
``bench/.cache/steps_by_seed/<tag or steps>/`` (tracking off); finished ones are reused.
Results: table on stdout, ``--out`` (default ``bench/results/steps_by_seed.json``).

    .venv/bin/python bench/steps_by_seed.py --runs grpo --seeds 0 1 2 3 4 5 --steps 16
    .venv/bin/python bench/steps_by_seed.py --seeds 6 7 8 9 10 11 --tag lr2e-4 --set train.lr=0.0002 \
        --out bench/results/steps_by_seed_lr2e-4.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache" / "steps_by_seed"


def train(name: str, steps: int, sets: list[str], tag: str | None) -> Path:
    """Train replica ``name`` (``<run>-<seed>``) for ``steps`` steps with the ``sets`` overrides unless
    already there (in the folder ``tag``, default ``steps<steps>``); its curve."""
    out = CACHE / (tag or f"steps{steps}")
    curve = out / name / "curve.csv"
    if not curve.is_file():
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg"}
        exe = Path(sys.executable).with_name("agentr1")
        over = [x for kv in sets for x in ("--set", kv)]
        subprocess.run(
            [
                str(exe),
                "--set",
                f"train.out_dir={out}",
                "--set",
                f"train.steps={steps}",
                *over,
                "--set",
                "tracking.enabled=false",
                "train",
                "--run",
                name,
            ],
            cwd=ROOT,
            env=env,
            check=True,
        )
    return curve


def dev_curve(curve: Path) -> dict[int, float]:
    """``{step: dev EM}`` for the steps the run evaluated on dev."""
    with curve.open(encoding="utf-8") as f:
        return {int(r["step"]): float(r["dev_em"]) for r in csv.DictReader(f) if r.get("dev_em")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", default=["grpo"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--margin", type=float, default=0.05, help="dev EM above step 0 that counts as learned")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="train.KEY=VALUE",
        help="a recipe override for every run (repeatable); use with --tag",
    )
    ap.add_argument("--tag", default=None, help="cache folder of this variant (required with --set)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/steps_by_seed.json"))
    a = ap.parse_args()
    if a.sets and not a.tag:
        ap.error("--set needs --tag: the cache folder must say which variant trained its runs")
    curves = {f"{r}-{s}": dev_curve(train(f"{r}-{s}", a.steps, a.sets, a.tag)) for r in a.runs for s in a.seeds}
    steps = sorted({k for c in curves.values() for k in c})
    print(f"{'replica':<32}" + "".join(f"{f'dev@{k}':>9}" for k in steps))
    for name, c in curves.items():
        print(f"{name:<32}" + "".join(f"{c.get(k, float('nan')):>9.3f}" for k in steps))
    learned = {
        r: {
            k: sum(curves[f"{r}-{s}"].get(k, 0) > curves[f"{r}-{s}"][0] + a.margin for s in a.seeds) for k in steps if k
        }
        for r in a.runs
    }
    for r, by in learned.items():
        print(
            f"\n{r}: seeds (of {len(a.seeds)}) with dev EM > step 0 + {a.margin}: "
            + ", ".join(f"step {k}: {n}" for k, n in by.items())
        )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(
        json.dumps(
            {"steps": a.steps, "sets": a.sets, "margin": a.margin, "dev_em": curves, "learned": learned}, indent=1
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
