"""Where the seconds between two stages of `make run` go (issue 47's budget).

Not a test. Run in a checkout whose pipeline has run (the stage's inputs present), from its root:

    python bench/stage_gap.py [--policy ppo-0] [--repeats 2]

A `make run` log shows ~17-19 s between the last line of one stage and the first of the next
(`bench/stage_times.py`, bench/RESULTS.md section 26). This script re-runs one
evaluate stage four ways, alternated ``--repeats`` times, against a scratch copy of the MLflow
store (the project's store is not touched) and times each whole command:

* ``python``: the interpreter start alone (``python -c pass``);
* ``imports``: the modules an ``agentr1 evaluate`` process imports (the CLI, the stage, torch,
  transformers, MLflow);
* ``command``: ``agentr1 evaluate --policy P``, the stage's command as dvc.yaml runs it (its own
  ``timing.json`` says how much of it the stage's work took: ``time_s.total``);
* ``dvc``: ``dvc repro -f -s evaluate@P``, the same command run by DVC (DVC's part: the
  difference from ``command``).

The evaluation's outputs are rewritten with the same bytes (the stage is deterministic); the
script checks that ``data/eval/P/metrics.json`` is unchanged and restores ``dvc.lock``. Writes
``bench/results/stage_gap.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORTS = "import agentr1.cli, agentr1.stages.evaluate, torch, transformers, mlflow"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="ppo-0")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench/results/stage_gap.json"))
    args = ap.parse_args(argv)
    py = str(Path.cwd() / ".venv/bin/python")  # not resolved: the symlink is what makes it the venv
    metrics = Path(f"data/eval/{args.policy}/metrics.json")
    before = metrics.read_bytes()
    lock = Path("dvc.lock").read_bytes()
    scratch = Path(tempfile.mkdtemp(prefix="stage-gap-"))
    shutil.copy("mlflow/mlflow.db", scratch / "mlflow.db")
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{scratch / 'mlflow.db'}",
        "AGENTR1_ARTIFACT_ROOT": str(scratch / "artifacts"),
        "HF_HUB_OFFLINE": "1",
        "GX_ANALYTICS_ENABLED": "false",
        "PATH": f"{Path('.venv/bin').resolve()}:{os.environ['PATH']}",
    }
    cmds = {
        "python": [py, "-c", "pass"],
        "imports": [py, "-c", IMPORTS],
        "command": [str(Path.cwd() / ".venv/bin/agentr1"), "evaluate", "--policy", args.policy],
        "dvc": [str(Path.cwd() / ".venv/bin/dvc"), "repro", "-f", "-s", f"evaluate@{args.policy}"],
    }
    samples: dict[str, list[float]] = {k: [] for k in cmds}
    work: list[float] = []
    try:
        for r in range(args.repeats):
            for name, cmd in cmds.items():
                samples[name].append(timed(cmd, env))
                if name in ("command", "dvc"):
                    work.append(json.loads(Path(f"data/eval/{args.policy}/timing.json").read_text())["time_s"]["total"])
                print(f"repeat {r + 1} {name}: {samples[name][-1]:.1f} s", file=sys.stderr, flush=True)
    finally:
        Path("dvc.lock").write_bytes(lock)
        shutil.rmtree(scratch, ignore_errors=True)
    if metrics.read_bytes() != before:
        raise SystemExit(f"{metrics} changed: the evaluation is not deterministic here")
    med = {k: statistics.median(v) for k, v in samples.items()}
    stage_work = statistics.median(work)
    parts = {
        "python start": med["python"],
        "imports": med["imports"] - med["python"],
        "stage work (timing.json total: load, rollouts, MLflow registration)": stage_work,
        "the rest of the process (MLflow set-up before the work, exit: traces flushed)": med["command"]
        - med["imports"]
        - stage_work,
        "DVC (dvc repro -f -s over the bare command)": med["dvc"] - med["command"],
    }
    print(f"\n| part of `dvc repro -s evaluate@{args.policy}` ({med['dvc']:.1f} s) | seconds |\n|---|---|")
    for k, v in parts.items():
        print(f"| {k} | {v:.1f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"policy": args.policy, "samples_s": samples, "stage_work_s": work, "parts_s": parts}, indent=2)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
