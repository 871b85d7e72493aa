"""A/B for a proposal outside src/: compiled bytecode for the venv (every process re-compiles now).

Not a test. Run from the repository root:

    python bench/archive/ab_bytecode.py                        # ~3 min
    python bench/archive/ab_bytecode.py --clone-rev aaa6770    # also `dvc repro` (no-op) in a clone of that commit
    python bench/archive/ab_bytecode.py --prefect --only prefect --repeats 2   # Prefect's first flow run (adds to the JSON)

The venv is installed by uv, which does not compile bytecode by default, and this machine runs
with ``PYTHONDONTWRITEBYTECODE=1``, so no ``.pyc`` exists under ``.venv`` and every Python process
(each ``dvc`` call, each ``agentr1 <stage>``, each test run) compiles every module it imports
from source. This script measures what that costs without touching the venv:

* A = the environment as it is;
* B = ``PYTHONPYCACHEPREFIX=<temp dir>`` and ``PYTHONDONTWRITEBYTECODE`` unset: Python writes
  and reads the bytecode under the temp dir (one untimed warm-up run per command fills it), the
  effect of ``uv pip install --compile-bytecode`` / ``python -m compileall .venv``.

Commands (alternated A, B, A, B, ... ``--repeats`` times): ``dvc status`` in the working tree,
``import agentr1.models.loading`` (torch + transformers: what every model stage and test imports),
and with ``--clone-rev`` a no-op ``dvc repro`` in a clone of that commit (as bench/pipeline.py).
Results: a table on stdout and ``bench/results/ab_bytecode.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import pipeline as P  # noqa: E402  (bench/pipeline.py: run(), paths)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clone-rev", default=None, help="also time a no-op `dvc repro` in a clone of this commit")
    ap.add_argument(
        "--prefect",
        action="store_true",
        help="also a trivial Prefect flow run in ephemeral mode (starts Prefect's temporary server; ~1 min a run)",
    )
    ap.add_argument("--only", nargs="*", default=None, help="keep the commands whose name contains one of these")
    ap.add_argument("--out", default="bench/results/ab_bytecode.json")
    args = ap.parse_args(argv)

    prefix = Path(tempfile.mkdtemp(prefix="bench-pycache-"))
    env_a = P._env()
    env_b = P._env(PYTHONPYCACHEPREFIX=str(prefix))
    env_b.pop("PYTHONDONTWRITEBYTECODE", None)
    cmds = {
        "dvc status (tree)": ([P.DVC, "status"], P.ROOT),
        "python -c 'import agentr1.models.loading'": ([P.PY, "-c", "import agentr1.models.loading"], P.ROOT),
    }
    home = Path(tempfile.mkdtemp(prefix="bench-prefect-home-"))
    if args.prefect:
        flow = (
            "import sys; sys.path.insert(0, '.'); import flows.pipeline; from prefect import flow\n"
            "@flow(name='bench-noop')\ndef noop():\n    return 1\nassert noop(return_state=True).is_completed()"
        )
        for env in (env_a, env_b):
            env.update(
                PREFECT_HOME=str(home),
                PREFECT_SERVER_ANALYTICS_ENABLED="false",
                PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="240",
                PREFECT_LOGGING_LEVEL="WARNING",
            )
            env.pop("PREFECT_API_URL", None)
        cmds["prefect: import flows.pipeline + first trivial flow run (ephemeral server)"] = (
            [P.PY, "-c", flow],
            P.ROOT,
        )
    clone_dir = None
    if args.clone_rev:
        clone_dir = Path(tempfile.mkdtemp(prefix="bench-dvc-clone-")) / "repo"
        for i, cmd in enumerate(
            [
                ["git", "clone", "-q", "--shared", str(P.ROOT), str(clone_dir)],
                ["git", "checkout", "-q", args.clone_rev],
                [P.DVC, "remote", "add", "--local", "-d", "benchsrc", str(P.ROOT / ".dvc" / "cache")],
                [P.DVC, "pull", "-q", "-r", "benchsrc"],
            ]
        ):
            P.run(cmd, P.ROOT if i == 0 else clone_dir)
        if P.up_to_date(P.run([P.DVC, "status"], clone_dir)):
            cmds[f"dvc repro (all stages, no-op, clone {args.clone_rev})"] = ([P.DVC, "repro"], clone_dir)
        else:
            print(f"clone at {args.clone_rev} is not up to date: no repro timed", file=sys.stderr)
    if args.only:
        cmds = {k: v for k, v in cmds.items() if any(o in k for o in args.only)}
    try:
        for cmd, cwd in cmds.values():  # fill B's bytecode cache (untimed)
            P.run(cmd, cwd, env=env_b)
        samples = {(k, v): [] for k in cmds for v in "AB"}
        for _ in range(args.repeats):
            for name, (cmd, cwd) in cmds.items():
                for variant, env in (("A", env_a), ("B", env_b)):
                    samples[(name, variant)].append(P.run(cmd, cwd, env=env))
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
        if clone_dir is not None:
            shutil.rmtree(clone_dir.parent, ignore_errors=True)
    out = Path(args.out)
    res = {"pythondontwritebytecode": os.environ.get("PYTHONDONTWRITEBYTECODE"), "commands": {}}
    if args.only and out.is_file():  # a partial run adds to the previous results
        res["commands"] = json.loads(out.read_text()).get("commands", {})
    print(f"{'command':<58}{'A (as is) s':>12}{'B (.pyc) s':>12}{'B/A':>7}{'A cpu':>7}{'B cpu':>7}")
    for name in cmds:
        a, b = samples[(name, "A")], samples[(name, "B")]
        row = {
            "A_wall_s_median": statistics.median(x["wall_s"] for x in a),
            "B_wall_s_median": statistics.median(x["wall_s"] for x in b),
            "A_cpu_s_median": statistics.median(x["cpu_s"] for x in a),
            "B_cpu_s_median": statistics.median(x["cpu_s"] for x in b),
            "ratio_B_over_A": statistics.median(y["wall_s"] / x["wall_s"] for x, y in zip(a, b)),
            "rc": [x["rc"] for x in a + b],
        }
        res["commands"][name] = row
        print(
            f"{name[:57]:<58}{row['A_wall_s_median']:>12.2f}{row['B_wall_s_median']:>12.2f}{row['ratio_B_over_A']:>7.2f}"
            f"{row['A_cpu_s_median']:>7.2f}{row['B_cpu_s_median']:>7.2f}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}")
    return res


if __name__ == "__main__":
    main()
