"""``sweep`` flow: seeds x named runs x param overrides as DVC experiments.

Every combination is queued with ``dvc exp run --queue -n <name> -S key=value ... [target]`` and
the queue is run by ``dvc queue start -j N``: DVC executes each experiment in its own temporary
copy of the repository, so a sweep never runs concurrent ``dvc repro`` in one workspace. The flow
waits for the queue, collects ``dvc exp show --json`` into a table artifact (one row per
experiment: its overrides and metrics), and fails with the logs of any failed experiment.

Named runs are DVC targets such as ``train@grpo-0`` / ``evaluate@grpo-0`` (the matrix stages: run x
params ``seeds``); no target = the whole pipeline. ``--seed`` sets the top-level ``seed`` (the data's
too); the training seeds are params ``seeds`` (``-S 'seeds=[3,4,5]'``). Example::

    python -m flows.sweep --target validate --seed 0 --seed 1 -S data.hops.max=3 -S data.hops.max=4
"""

from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.common import (
    CommandError,
    flatten,
    fmt,
    md_table,
    retry_if_transient,
    run_command,
    run_logger,
)

SWEEP_KEY = "agentr1-sweep"
FINAL_STATES = {"Success", "Failed"}
MAX_METRIC_COLUMNS = 30


def _value(v: Any) -> str:
    """A param value as `-S key=value` expects it (YAML scalars)."""
    if isinstance(v, str):
        return v
    return json.dumps(v)


def plan_experiments(
    targets: list[str], seeds: list[int], overrides: dict[str, list[Any]], prefix: str
) -> list[dict[str, Any]]:
    """The cartesian product targets x seeds x override grid, each with a unique valid name."""
    keys = sorted(overrides)
    grid = list(itertools.product(*(overrides[k] for k in keys))) if keys else [()]
    runs = []
    for i, (target, seed, combo) in enumerate(itertools.product(targets or [None], seeds, grid)):
        sets = {"seed": seed, **dict(zip(keys, combo))}
        label = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{target or 'all'}-s{seed}")
        runs.append(
            {
                "name": f"{prefix}-{i:03d}-{label}".strip("-"),
                "target": target,
                "sets": sets,
            }
        )
    return runs


@task(
    name="dvc-exp-queue",
    task_run_name="queue {run[name]}",
    retries=2,
    retry_delay_seconds=10,
    retry_condition_fn=retry_if_transient,
)
def queue_experiment(project_dir: str, run: dict[str, Any]) -> str:
    cmd = ["dvc", "exp", "run", "--queue", "-n", run["name"]]
    for k, v in run["sets"].items():
        cmd += ["-S", f"{k}={_value(v)}"]
    if run["target"]:
        cmd.append(run["target"])
    run_command(cmd, project_dir)
    return run["name"]


def parse_queue_status(text: str) -> dict[str, str]:
    """``dvc queue status`` table -> {experiment name: status}. Rows look like
    ``<task> <name> <created...> <Status>``; the header and the worker line are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] == "Task" or line.startswith("Worker status"):
            continue
        out[parts[1]] = parts[-1]
    return out


@task(name="dvc-queue-run")
def run_queue(project_dir: str, names: list[str], jobs: int, poll_s: float, timeout_s: float) -> dict[str, str]:
    """Start ``jobs`` queue workers and wait until every experiment of this sweep is final."""
    logger = run_logger()
    run_command(["dvc", "queue", "start", "-j", str(jobs)], project_dir)
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while True:
        res = run_command(["dvc", "queue", "status"], project_dir, logger=_quiet())
        status = parse_queue_status(res.stdout)
        mine = {n: status.get(n, "Unknown") for n in names}
        if mine != last:
            logger.info("queue: %s", ", ".join(f"{n}={s}" for n, s in mine.items()))
            last = mine
        if all(s in FINAL_STATES for s in mine.values()):
            return mine
        if time.monotonic() > deadline:
            run_command(
                ["dvc", "queue", "kill", *[n for n, s in mine.items() if s == "Running"]], project_dir, check=False
            )
            raise TimeoutError(f"sweep did not finish within {timeout_s:.0f} s: {mine}")
        time.sleep(poll_s)


def _quiet():
    import logging

    return logging.getLogger("agentr1.flows.quiet")


def collect(
    project_dir: str, runs: list[dict[str, Any]], states: dict[str, str], metric_keys: list[str] | None
) -> list[dict[str, Any]]:
    """One row per experiment from ``dvc exp show --json``: name, rev, state, overrides, metrics."""
    res = run_command(["dvc", "exp", "show", "--json"], project_dir, logger=_quiet())
    shown: dict[str, dict[str, Any]] = {}
    for commit in json.loads(res.stdout or "[]"):
        for exp in commit.get("experiments") or []:
            for rev in exp.get("revs") or []:
                if rev.get("name"):
                    shown[rev["name"]] = rev
    rows = []
    for run in runs:
        rev = shown.get(run["name"], {})
        data = rev.get("data") or {}
        row: dict[str, Any] = {
            "experiment": run["name"],
            "state": states.get(run["name"], "Unknown"),
            "rev": (rev.get("rev") or "")[:7],
            "target": run["target"] or "(all)",
        }
        row.update({f"param:{k}": _value(v) for k, v in run["sets"].items()})
        for path, entry in (data.get("metrics") or {}).items():
            for key, value in flatten((entry or {}).get("data") or {}).items():
                col = f"{path}:{key}"
                if metric_keys is None:
                    if key.count(".") >= 2:  # the default keeps shallow metrics only
                        continue
                elif not any(fnmatch.fnmatch(col, pat) for pat in metric_keys):
                    continue
                row[col] = fmt(value)
        rows.append(row)
    # every row gets every column (tables need rectangular data), capped for readability
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    fixed = ["experiment", "state", "rev", "target"] + [c for c in cols if c.startswith("param:")]
    metric_cols = [c for c in cols if c not in fixed][:MAX_METRIC_COLUMNS]
    return [{c: r.get(c, "") for c in fixed + metric_cols} for r in rows]


@flow(name="sweep", log_prints=True)
def sweep(
    project_dir: str = ".",
    targets: list[str] | None = None,
    seeds: list[int] | None = None,
    overrides: dict[str, list[Any]] | None = None,
    jobs: int = 1,
    name_prefix: str = "sweep",
    metric_keys: list[str] | None = None,
    poll_s: float = 10.0,
    timeout_s: float = 24 * 3600.0,
) -> list[dict[str, Any]]:
    """Queue and run seeds x targets x override grid as DVC experiments.

    Args:
        project_dir: the DVC project (a git repository) to run in.
        targets: DVC targets per experiment (replicas, e.g. ``evaluate@grpo-0``); none = all.
        seeds: values of the top-level ``seed`` param (default ``[0]``).
        overrides: param path -> list of values, crossed into a grid, e.g.
            ``{"rl.lr": [1e-5, 3e-5], "reward.metric": ["em", "f1"]}``.
        jobs: queue workers (``dvc queue start -j``); each experiment runs in its own temp copy.
        name_prefix: experiment names are ``<prefix>-<id>-<nnn>-<target>-s<seed>``.
        metric_keys: fnmatch patterns over ``<file>:<metric.path>`` selecting the table's metric
            columns (default: the metrics at most two levels deep).
        poll_s: seconds between ``dvc queue status`` polls.
        timeout_s: give up (and kill the running experiments) after this long.
    """
    logger = run_logger()
    project_dir = str(Path(project_dir).resolve())
    if jobs < 1:
        raise ValueError("jobs must be >= 1")
    prefix = f"{name_prefix}-{uuid.uuid4().hex[:6]}"
    runs = plan_experiments(list(targets or []), list(seeds or [0]), dict(overrides or {}), prefix)
    logger.info("sweep %s: %d experiment(s), %d worker(s)", prefix, len(runs), jobs)
    names = [queue_experiment(project_dir, run) for run in runs]
    states = run_queue(project_dir, names, jobs, poll_s, timeout_s)
    rows = collect(project_dir, runs, states, metric_keys)
    create_table_artifact(rows, key=SWEEP_KEY, description=f"dvc exp show for sweep {prefix}")
    failed = [n for n, s in states.items() if s != "Success"]
    md = [f"# agentr1 sweep `{prefix}`: {len(runs) - len(failed)}/{len(runs)} succeeded", "", md_table(rows)]
    errors = []
    for name in failed:
        try:
            logs = run_command(["dvc", "queue", "logs", name], project_dir, check=False, logger=_quiet())
            tail = "\n".join((logs.stdout + "\n" + logs.stderr).strip().splitlines()[-30:])
        except (CommandError, OSError) as exc:
            tail = f"(no logs: {exc})"
        errors.append(f"experiment {name} {states[name]}:\n{tail}")
        md += [f"## {name} ({states[name]})", "", "```", tail, "```", ""]
    create_markdown_artifact("\n".join(md), key=f"{SWEEP_KEY}-summary", description=f"sweep {prefix}")
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(runs)} experiment(s) failed:\n" + "\n\n".join(errors))
    logger.info("sweep %s done; `dvc exp show` lists the experiments, `dvc exp apply <name>` restores one", prefix)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="run the agentr1 sweep flow once")
    ap.add_argument("--project-dir", default=".")
    ap.add_argument("--target", action="append", default=[])
    ap.add_argument("--seed", type=int, action="append", default=[])
    ap.add_argument(
        "-S",
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one grid value (repeat a key for several values)",
    )
    ap.add_argument("-j", "--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    from agentr1.config import parse_set  # the strict YAML of --set: `yes` or 0x10 are not numbers

    grid: dict[str, list[Any]] = {}
    for s in a.set:
        k, v = parse_set(s)
        grid.setdefault(k, []).append(v)
    sweep(project_dir=a.project_dir, targets=a.target, seeds=a.seed or [0], overrides=grid, jobs=a.jobs)


if __name__ == "__main__":
    main()
