"""Which cold start and which RL settings make the nano agent climb? (issue 29, items 1-2)

One recipe = a cold start (``agentr1 sft`` with ``--set`` overrides of the ``sft`` section) and
one RL run from it (``agentr1 train --run <run>`` with overrides of ``train``/``rollout``), run as
the CLI a user would type, tracking off, into ``--work`` (default ``/tmp/cold_start_rl``). A cold
start is trained once per distinct set of sft overrides and reused. Appends one JSON line per
recipe to ``bench/results/cold_start_rl.jsonl``: the overrides, the cold start's SFT loss and
wall time, the run's dev EM curve (greedy, ``train.dev.examples`` dev questions; step 0 = the
cold start), rewards, tool calls per episode over the first and last 10 steps, informative
groups and wall time.

Usage (one at a time: two trainings side by side on 2 cores run ~10x slower)::

    python bench/cold_start_rl.py --name A_grpo --sft sft.train_examples=null sft.steps=300 \\
        --train train.steps=60 train.dev.examples=128 train.dev.every=20
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "cold_start_rl.jsonl"


def agentr1(args: list[str], sets: list[str], log: Path, threads: int | None = None) -> float:
    """Run ``agentr1 <args>`` with ``--set`` overrides (tracking off; ``threads``: torch threads of
    the sft and train stages); wall seconds."""
    exe = Path(sys.executable).parent / "agentr1"
    cmd = [str(exe) if exe.exists() else shutil.which("agentr1") or "agentr1", "--set", "tracking.enabled=false"]
    if threads:
        sets = [*sets, f"sft.num_threads={threads}", f"train.num_threads={threads}"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    with log.open("w") as fh:
        rc = subprocess.call(cmd + args, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=os.environ)
    if rc:
        raise SystemExit(f"{' '.join(cmd + args)} failed (rc {rc}); see {log}")
    return time.perf_counter() - t0


def cold_start(work: Path, sft_sets: list[str]) -> tuple[Path, dict]:
    """Train (once) the cold start of ``sft_sets``; its directory and SFT summary."""
    key = hashlib.sha1("\n".join(sorted(sft_sets)).encode()).hexdigest()[:10]
    d = work / f"cs_{key}"
    summary = d / "summary.json"
    if not summary.exists():
        d.mkdir(parents=True, exist_ok=True)
        wall = agentr1(["sft"], sft_sets + [f"sft.out_dir={d}/model", f"sft.report_dir={d}/report"], d / "sft.log")
        m = json.loads((d / "report" / "metrics.json").read_text())
        summary.write_text(
            json.dumps(
                {
                    "sft": sft_sets,
                    "wall_s": round(wall, 1),
                    "train": m["train"],
                    "oracle": {k: m["oracle"][k] for k in ("em", "kinds")},
                    "copy": {k: m["copy"]["cold_start"][k]["top1"] for k in ("start", "continue")},
                }
            )
        )
    return d, json.loads(summary.read_text())


def rl(work: Path, name: str, model: Path, run: str, train_sets: list[str]) -> dict:
    """One RL run from ``model``; its curve summarized."""
    out = work / "runs"
    wall = agentr1(
        ["train", "--run", run],
        train_sets + [f"sft.out_dir={model}", f"train.out_dir={out}/{name}"],
        work / f"{name}.train.log",
    )
    rows = list(csv.DictReader((out / name / run / "curve.csv").open()))
    dev = [[int(r["step"]), round(float(r["dev_em"]), 4)] for r in rows if r["dev_em"]]
    steps = [r for r in rows if r["reward"]]

    def mean(key, part):
        vals = [float(r[key]) for r in part if r.get(key)]
        return round(sum(vals) / len(vals), 3) if vals else None

    return {
        "dev_em": dev,
        "reward_first10": mean("reward", steps[:10]),
        "reward_last10": mean("reward", steps[-10:]),
        "tool_calls_first10": mean("tool_calls", steps[:10]),
        "tool_calls_last10": mean("tool_calls", steps[-10:]),
        "informative_groups": mean("informative_groups", steps),
        "wall_s": round(wall, 1),
        "steps": len(steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--sft", nargs="*", default=[], help="sft overrides KEY=VALUE")
    ap.add_argument("--train", nargs="*", default=[], help="train/rollout overrides KEY=VALUE")
    ap.add_argument("--run", default="grpo", help="named run of params `runs`")
    ap.add_argument("--work", default="/tmp/cold_start_rl")
    ap.add_argument("--no-rl", action="store_true", help="only the cold start")
    a = ap.parse_args()
    work = Path(a.work)
    d, cs = cold_start(work, a.sft)
    rec = {"name": a.name, "run": a.run, "cold_start": cs, "train": a.train, "date": time.strftime("%Y-%m-%d %H:%M")}
    if not a.no_rl:
        rec["rl"] = rl(work, a.name, d / "model", a.run, a.train)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
