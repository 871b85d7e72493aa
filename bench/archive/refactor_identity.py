"""Does a refactor change any byte the pipeline writes? Old code vs new code, stage by stage, tiny.

Runs the same short versions of the stages (pretrain, sft, train with and without a critic,
evaluate of an RL run, the cold start and a baseline, report) twice, once with the code of a git
ref (checked out as a worktree, put first on ``PYTHONPATH``) and once with the working tree's
code, each into its own output root, tracking off, one process at a time. Then every output file
is compared by SHA-256. Files that hold wall-clock time (``timing.json``, and columns named in
:data:`TIMED`) are compared with those fields dropped. A run's resume state (``<run>/state/``, not a
DVC output) is not compared: it records step times, and its torch RNG state already differed
between two runs of the same old code (``--new`` pointing at the old worktree, the self-test).

    python bench/archive/refactor_identity.py --ref 4aaa424            # all stages
    python bench/archive/refactor_identity.py --ref 4aaa424 --stages sft,train

Writes ``bench/results/refactor_identity.json`` and prints a table: per stage, files compared,
identical, different (named). Exit status 1 when any file differs or a stage failed on one side only.
This is the quick check; the proof is ``dvc repro`` reproducing the committed outputs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMED = {"seconds", "elapsed_s", "wall_s", "time_s", "tokens_per_s", "step_s", "rollout_s", "update_s"}

# stage -> list of `agentr1` argument lists; {R} is the side's output root
COMMON = ["--set", "tracking.enabled=false", "--set", "runs={ppo: {estimator: gae}, grpo: {estimator: grpo}}"]
STAGES: dict[str, list[list[str]]] = {
    "pretrain": [
        [
            "pretrain",
            "--set",
            "pretrain.steps=12",
            "--set",
            "pretrain.log_every=4",
            "--set",
            "pretrain.tokenizer_docs=300",
            "--set",
            "pretrain.docs_per_world=200",
            "--set",
            "pretrain.gate.per_split=6",
            "--set",
            "pretrain.gate.every=6",
            "--set",
            "pretrain.out_dir={R}/init",
            "--set",
            "pretrain.report_dir={R}/pretrain",
        ]
    ],
    "sft": [
        [
            "sft",
            "--set",
            "sft.steps=3",
            "--set",
            "sft.train_examples=48",
            "--set",
            "sft.log_every=1",
            "--set",
            "sft.out_dir={R}/sft",
            "--set",
            "sft.report_dir={R}/sftrep",
        ]
    ],
    "train": [
        [
            "train",
            "--run",
            run,
            "--set",
            "sft.out_dir={R}/sft",
            "--set",
            "train.steps=2",
            "--set",
            "train.batch_questions=2",
            "--set",
            "train.dev.every=1",
            "--set",
            "train.dev.examples=4",
            "--set",
            "train.checkpoint.every=1",
            "--set",
            "train.trace_every=0",
            "--set",
            "train.out_dir={R}/runs",
        ]
        for run in ("ppo", "grpo")
    ],
    "evaluate": [
        [
            "evaluate",
            "--policy",
            policy,
            "--set",
            "sft.out_dir={R}/sft",
            "--set",
            "train.out_dir={R}/runs",
            "--set",
            "evaluate.out_dir={R}/eval",
            "--set",
            "evaluate.max_examples=6",
            "--set",
            "evaluate.register=false",
            "--set",
            "evaluate.sampling.k=2",
            "--set",
            "evaluate.bootstrap.samples=100",
        ]
        for policy in ("ppo", "grpo", "cold_start", "naive_rag", "base_tool_call")
    ],
    "report": [
        [
            "report",
            "--set",
            "evaluate.out_dir={R}/eval",
            "--set",
            "train.out_dir={R}/runs",
            "--set",
            "report.out_dir={R}/reports",
            "--set",
            "report.bootstrap.samples=100",
        ]
    ],
}


def env_for(src: Path) -> dict[str, str]:
    env = dict(
        os.environ,
        PYTHONPATH=str(src),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        GX_ANALYTICS_ENABLED="false",
        MPLBACKEND="Agg",
        PYTHONHASHSEED="0",
    )
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def run_side(src: Path, out: Path, stages: list[str], log: Path, base: str) -> dict[str, str]:
    """Run ``stages`` with the code under ``src`` into ``out``; per stage "ok" or the failure's last line.
    Every stage but pretrain starts from the base policy at ``base``."""
    status = {}
    for stage in stages:
        for argv in STAGES[stage]:
            from_base = [] if stage == "pretrain" else ["--set", f"pretrain.out_dir={base}"]
            words = [a.replace("{R}", str(out)) for a in [*argv, *COMMON, *from_base]]
            sets = [
                w for i, w in enumerate(words) if w == "--set" or (i and words[i - 1] == "--set")
            ]  # global options first
            cmd = [sys.executable, "-m", "agentr1.cli", *sets, *[w for w in words if w not in sets]]
            t0 = time.time()
            proc = subprocess.run(cmd, cwd=ROOT, env=env_for(src), capture_output=True, text=True)
            with log.open("a") as fh:
                fh.write(
                    f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n[rc {proc.returncode}, {time.time() - t0:.0f} s]\n"
                )
            key = f"{stage}:{argv[1] if len(argv) > 1 and not argv[1].startswith('--') else argv[2] if len(argv) > 2 else ''}"
            status[key] = "ok" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
            print(
                f"  {str(src):>28} {' '.join(argv[:3]):40s} rc {proc.returncode} {time.time() - t0:5.0f} s", flush=True
            )
    return status


def digest(path: Path) -> str:
    """SHA-256 of a file, with wall-clock fields dropped from timing files and from CSV/JSON columns in TIMED."""
    data = path.read_bytes()
    if path.name == "timing.json":
        return "timing (not compared)"
    if path.parent.name == "state":
        return "resume state (not compared)"
    if path.suffix == ".json":
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and TIMED & set(obj):
            data = json.dumps({k: v for k, v in obj.items() if k not in TIMED}).encode()
    elif path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(data.decode("utf-8", "replace"))))
        if rows and TIMED & set(rows[0]):
            keep = [i for i, c in enumerate(rows[0]) if c not in TIMED]
            data = json.dumps([[r[i] for i in keep if i < len(r)] for r in rows]).encode()
    return hashlib.sha256(data).hexdigest()


def tree(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): digest(p) for p in sorted(out.rglob("*")) if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", required=True, help="git ref of the old code (a worktree is made under --work)")
    ap.add_argument(
        "--stages", default=",".join(STAGES), help=f"comma-separated, in order (default {','.join(STAGES)})"
    )
    ap.add_argument("--work", default="/tmp/refactor_identity", help="scratch folder (outputs, the old worktree)")
    ap.add_argument("--new", default=str(ROOT / "src"), help="source folder of the new code (default: this tree's src)")
    ap.add_argument(
        "--base",
        default="data/models/init",
        help="the base policy the sft and baseline runs start from (default data/models/init; a copy "
        "of it while `dvc repro pretrain` rewrites that folder)",
    )
    ap.add_argument("--json", default=str(ROOT / "bench/results/refactor_identity.json"))
    args = ap.parse_args(argv)
    stages = args.stages.split(",")
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        ap.error(f"--stages: unknown {unknown}; choose from {list(STAGES)}")
    work = Path(args.work)
    old_tree = work / "old_code"
    if not old_tree.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old_tree), args.ref], cwd=ROOT, check=True, capture_output=True
        )
    else:
        subprocess.run(["git", "checkout", "--detach", args.ref], cwd=old_tree, check=True, capture_output=True)
    sides = {"old": old_tree / "src", "new": Path(args.new)}
    result: dict = {
        "ref": args.ref,
        "new": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        + (
            " + uncommitted changes"
            if subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
            else ""
        ),
        "stages": stages,
        "status": {},
        "files": {},
    }
    for side, src in sides.items():  # both sides write to the same path (outputs record their paths), then move
        out = work / "out"
        subprocess.run(["rm", "-rf", str(out), str(work / side)], check=True)
        out.mkdir(parents=True)
        result["status"][side] = run_side(src, out, stages, work / f"{side}.log", args.base)
        out.rename(work / side)
    old, new = tree(work / "old"), tree(work / "new")
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    same = sorted(k for k in old.keys() & new.keys() if old[k] == new[k])
    result["files"] = {"compared": len(old.keys() | new.keys()), "identical": len(same), "different": differ}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print("\n| stage run | old | new |\n|---|---|---|")
    for key in result["status"]["old"].keys() | result["status"]["new"].keys():
        print(f"| {key} | {result['status']['old'].get(key)} | {result['status']['new'].get(key)} |")
    print(f"\nfiles compared {len(old.keys() | new.keys())}, identical {len(same)}, different {len(differ)}")
    for k in differ:
        print(f"  DIFFERENT {k}")
    failed_one_side = result["status"]["old"] != result["status"]["new"]
    return 1 if differ or failed_one_side else 0


if __name__ == "__main__":
    sys.exit(main())
