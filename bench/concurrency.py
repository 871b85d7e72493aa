"""Commands at once on one MLflow store: do they leave the registry they leave one after the other?

The concurrency suite of issue 31, the long part (the fast part, 2 repetitions, is
``tests/test_registry_concurrency.py``, whose tiny project and workers this reuses). Three
scenarios, each ``--reps`` times on a fresh copy of its starting store, the commands started
together (a barrier) in separate processes with their own MLflow clients on one SQLite store:

* ``track+track``: two ``agentr1 track`` on an empty store (three evaluations to register);
* ``promote+promote``: two ``agentr1 promote`` while the challenger (grpo) awaits the gate;
* ``evaluate+promote``: grpo's evaluation registering and gating its version (the evaluate
  stage's MLflow phase, what ``agentr1 evaluate`` runs after its rollouts) beside ``agentr1 promote``.

A repetition is *same* when its registry (per version: variant, kind, registration state,
digest, gate decision; each alias's variant; FINISHED runs per stage; runs left RUNNING) equals
the one the same commands leave run one after the other (for the last scenario, in either order),
and *clean* when every command exited 0 without a traceback.

    python bench/concurrency.py --reps 10        # the issue's 10 repetitions each (~15 min on 2 cores)
    python bench/concurrency.py --reps 1 --scenarios track+track

Writes ``bench/results/concurrency.json`` and ``bench/results/concurrency.md`` (the table) and
prints the table; exit 1 when a repetition was not same or not clean.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_registry_concurrency import (  # noqa: E402
    copy_store,
    make_base_store,
    make_eval_project,
    make_full_store,
    problems,
    registry_state,
    run_together,
    store_env,
)

# scenario -> (starting store: empty | base | full, the commands run together)
SCENARIOS = {
    "track+track": ("empty", [("cli", ["track"]), ("cli", ["track"])]),
    "promote+promote": ("full", [("cli", ["promote"]), ("cli", ["promote"])]),
    "evaluate+promote": ("base", [("register", "grpo"), ("cli", ["promote"])]),
}


def start(kind: str, starts: dict[str, Path], dst: Path) -> Path:
    """A fresh store at ``dst`` in the starting state ``kind``."""
    if kind == "empty":
        dst.mkdir(parents=True)
        return dst
    return copy_store(starts[kind], dst)


def scenario(name: str, project: Path, starts: dict[str, Path], work: Path, reps: int) -> dict:
    kind, commands = SCENARIOS[name]
    orders = [commands] if commands[0] == commands[1] else [commands, commands[::-1]]
    references = []
    for i, order in enumerate(orders):
        store = start(kind, starts, work / f"{name}-serial{i}")
        failed = problems(run_together(project, store_env(store), order, store / "logs", together=False))
        if failed:
            raise SystemExit(f"{name}: the serial reference failed: {failed[0]}")
        references.append(registry_state(store_env(store)))
    rows = []
    for rep in range(reps):
        store = start(kind, starts, work / f"{name}-together{rep}")
        t0 = time.perf_counter()
        results = run_together(project, store_env(store), commands, store / "logs")
        wall = time.perf_counter() - t0
        state = registry_state(store_env(store))
        failed = problems(results)
        rows.append(
            {
                "rep": rep,
                "same": state in references,
                "clean": not failed,
                "wall_s": round(wall, 2),
                "exit_codes": [rc for rc, _ in results],
                "versions": len(state["versions"]),
                "aliases": state["aliases"],
                "problems": [f[:600] for f in failed],
                "state": state if state not in references else None,
            }
        )
        print(
            f"{name} rep {rep}: {'same' if rows[-1]['same'] else 'DIFFERENT'}, "
            f"{'clean' if not failed else 'FAILED/TRACEBACK'}, {wall:.1f} s",
            flush=True,
        )
    return {
        "scenario": name,
        "reps": reps,
        "same": sum(r["same"] for r in rows),
        "clean": sum(r["clean"] for r in rows),
        "mean_wall_s": round(sum(r["wall_s"] for r in rows) / max(len(rows), 1), 2),
        "references": references,
        "runs": rows,
    }


def table(results: list[dict]) -> str:
    lines = [
        "| scenario | repetitions | same registry as serial | clean (exit 0, no traceback) | mean wall s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['scenario']} | {r['reps']} | {r['same']}/{r['reps']} | {r['clean']}/{r['reps']} | {r['mean_wall_s']} |"
        for r in results
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=10, help="repetitions per scenario (the issue: 10)")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated subset of {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "concurrency.json"))
    parser.add_argument("--keep", action="store_true", help="keep the work folder (stores and command logs)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown or args.reps < 1:
        parser.error(
            f"unknown scenario(s) {unknown}: choose from {', '.join(SCENARIOS)}" if unknown else "--reps must be >= 1"
        )
    for var in ("MLFLOW_TRACKING_URI", "AGENTR1_ARTIFACT_ROOT"):  # every command gets its store explicitly
        os.environ.pop(var, None)
    work = Path(tempfile.mkdtemp(prefix="agentr1-concurrency-"))
    t0 = time.perf_counter()
    project = make_eval_project(work / "proj")
    starts: dict[str, Path] = {}
    kinds = {SCENARIOS[n][0] for n in names}
    if "base" in kinds:
        starts["base"] = make_base_store(project, work / "start-base")
    if "full" in kinds:
        starts["full"] = make_full_store(project, work / "start-full")
    results = [scenario(n, project, starts, work, args.reps) for n in names]
    text = table(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"reps": args.reps, "total_s": round(time.perf_counter() - t0, 1), "results": results}, indent=2)
        + "\n"
    )
    out.with_suffix(".md").write_text(
        f"# Commands at once vs one after the other ({args.reps} repetitions each)\n\n{text}\n"
    )
    print(text)
    print(f"wrote {out} and {out.with_suffix('.md')}" + (f"; work folder {work}" if args.keep else ""))
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["same"] == r["clean"] == r["reps"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
