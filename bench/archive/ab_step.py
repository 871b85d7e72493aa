"""Before/after of the whole nano RL step: ``bench/rl_step.py`` on the sources of an older
revision (A) and on the working tree (B), alternated in one run.

Not a test. Run from the repository root (after ``dvc repro sft``):

    python bench/archive/ab_step.py --rev f87841b              # 3 rounds, ~3 min
    python bench/archive/ab_step.py --rev f87841b --rounds 5 --steps 3

A is ``git worktree add`` of ``--rev`` (kept under ``bench/.ab_<rev>``, git-ignored), imported
through ``PYTHONPATH`` ahead of the editable install; the harness (``bench/rl_step.py`` and
``bench/_rl.py``) is this tree's in both, with the same params, data, checkpoint and seeds, so
the only difference is the library code. Each round runs A then B (B then A on odd rounds) as
fresh processes; each process warms up once and measures ``--steps`` steps.

Reported per phase (rollout, old/ref log-probs, update, step): median seconds of A and B and the
median of the per-round ratios B/A. Results: a table on stdout and ``bench/results/ab_step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("rollout", "old_logp", "ref_logp", "update", "total")


def worktree(rev: str) -> Path:
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = ROOT / "bench" / f".ab_{sha}"
    if not path.is_dir():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True, capture_output=True
        )
    return path


def one(src: Path, steps: int, threads: int) -> dict[str, float]:
    """Median seconds per phase of ``steps`` measured nano steps with ``src`` on the path."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rl_step.json"
        env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        cmd = [
            sys.executable,
            "bench/rl_step.py",
            "--models",
            "nano",
            "--steps",
            str(steps),
            "--threads",
            str(threads),
            "--out",
            str(out),
        ]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed (PYTHONPATH={src}):\n{proc.stderr[-3000:]}")
        steps_ = json.loads(out.read_text())["models"]["nano"]["steps"]
    return {p: statistics.median(s["seconds"][p] for s in steps_) for p in PHASES}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the 'before' revision (A)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per process (after 1 warm-up)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/ab_step.json")
    args = ap.parse_args()
    srcs = {"A": worktree(args.rev) / "src", "B": ROOT / "src"}
    probe = subprocess.run(
        [sys.executable, "-c", "import agentr1; print(agentr1.__file__)"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(srcs["A"])),
        check=True,
    ).stdout.strip()
    if not probe.startswith(str(srcs["A"])):
        raise SystemExit(f"PYTHONPATH does not take precedence over the installed agentr1 ({probe})")
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            runs[side].append(one(srcs[side], args.steps, args.threads))
            print(f"round {r + 1} {side}: " + ", ".join(f"{p} {runs[side][-1][p]:.2f}s" for p in PHASES), flush=True)
    rows = []
    print(f"\nnano RL step, A = {args.rev}, B = working tree; {args.rounds} alternated rounds x {args.steps} steps")
    print(f"{'phase':<10}{'A s':>8}{'B s':>8}{'B/A':>7}   per-round B/A")
    for p in PHASES:
        a = statistics.median(x[p] for x in runs["A"])
        b = statistics.median(x[p] for x in runs["B"])
        ratios = [y[p] / x[p] for x, y in zip(runs["A"], runs["B"]) if x[p] > 0]
        rows.append({"phase": p, "a_seconds": a, "b_seconds": b, "ratio": statistics.median(ratios), "ratios": ratios})
        print(f"{p:<10}{a:>8.2f}{b:>8.2f}{statistics.median(ratios):>7.2f}   {', '.join(f'{x:.2f}' for x in ratios)}")
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "bench": "ab_step",
                "rev_a": args.rev,
                "rounds": args.rounds,
                "steps": args.steps,
                "threads": args.threads,
                "runs": runs,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
