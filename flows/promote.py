"""``promote`` flow: the registry gate, run nightly.

It runs the CLI ``agentr1 --params <params_file> promote [args...]``, which evaluates the
registry's ``challenger`` against ``champion`` on the same evaluation data and moves the
``champion`` alias only when the challenger wins beyond the confidence interval (the gate itself
lives in ``agentr1.tracking``; this flow only schedules it, streams its log and publishes what it
decided). A non-zero exit fails the flow run with the command's stderr in the error; a gate that
declines to promote is a successful run whose artifact says so.

If the command prints a JSON object (on one line, or as its whole stdout), its keys become a
table artifact next to the markdown log.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.common import flatten, fmt, md_table, retry_if_transient, run_command, run_logger

PROMOTE_KEY = "agentr1-promote"
# The command prefix; tests replace it to run the flow without the registry.
PROMOTE_BASE: list[str] = ["agentr1"]


def promote_command(params_file: str, args: list[str]) -> list[str]:
    return [*PROMOTE_BASE, "--params", params_file, "promote", *args]


def parse_decision(stdout: str) -> dict[str, Any] | None:
    """The last JSON object the command printed (whole stdout, or a line of it), if any."""
    text = stdout.strip()
    candidates = [text] + [ln.strip() for ln in reversed(text.splitlines())]
    for c in candidates:
        if c.startswith("{") and c.endswith("}"):
            try:
                obj = json.loads(c)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


@task(name="agentr1-promote", retries=2, retry_delay_seconds=[30, 120], retry_condition_fn=retry_if_transient)
def run_promote(project_dir: str, cmd: list[str], env: dict[str, str], timeout_s: float | None) -> dict[str, Any]:
    res = run_command(cmd, project_dir, env=env, timeout_s=timeout_s)
    return {"stdout": res.stdout, "stderr": res.stderr, "seconds": round(res.seconds, 1)}


@flow(name="promote", log_prints=True)
def promote(
    project_dir: str = ".",
    params_file: str = "params.yaml",
    model: str | None = None,
    metric: str | None = None,
    dry_run: bool = False,
    args: list[str] | None = None,
    tracking_uri: str | None = None,
    timeout_s: float | None = 4 * 3600.0,
) -> dict[str, Any]:
    """Run the champion/challenger gate.

    Args:
        project_dir: the agentr1 repository root (where params.yaml and the evaluation data are).
        params_file: params file handed to the CLI (``agentr1 --params``).
        model: registered model (``--model``; default: ``tracking.registered_model`` in params).
        metric: gating metric (``--metric``; default: ``tracking.gate_metric``).
        dry_run: report the decision without moving aliases (``--dry-run``).
        args: further arguments for ``agentr1 promote`` (see ``agentr1 promote --help``).
        tracking_uri: MLflow tracking URI / registry (default: ``MLFLOW_TRACKING_URI`` or params).
        timeout_s: kill the command after this long.
    """
    logger = run_logger()
    project_dir = str(Path(project_dir).resolve())
    env = {"MLFLOW_TRACKING_URI": tracking_uri} if tracking_uri else {}
    flags = (["--model", model] if model else []) + (["--metric", metric] if metric else [])
    flags += ["--dry-run"] if dry_run else []
    cmd = promote_command(params_file, flags + list(args or []))
    out = run_promote(project_dir, cmd, env, timeout_s)
    decision = parse_decision(out["stdout"])
    tail = "\n".join((out["stdout"].strip() or out["stderr"].strip()).splitlines()[-40:])
    md = [f"# agentr1 promote ({out['seconds']} s)", "", f"`{' '.join(cmd)}`", ""]
    if decision is not None:
        rows = [{"key": k, "value": fmt(v)} for k, v in flatten(decision).items()]
        md += ["## Decision", "", md_table(rows)]
        create_table_artifact(rows, key=f"{PROMOTE_KEY}-decision", description="agentr1 promote decision")
    md += ["## Output", "", "```", tail, "```"]
    create_markdown_artifact("\n".join(md), key=PROMOTE_KEY, description="champion/challenger gate")
    logger.info("promote finished: %s", json.dumps(decision) if decision else "(no JSON decision printed)")
    return {"decision": decision, "output_tail": tail}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="run the agentr1 promote flow once")
    ap.add_argument("--project-dir", default=".")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--tracking-uri", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--metric", default=None)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="extra args for `agentr1 promote`")
    a = ap.parse_args(argv)
    promote(
        project_dir=a.project_dir,
        params_file=a.params,
        model=a.model,
        metric=a.metric,
        dry_run=a.dry_run,
        args=a.args,
        tracking_uri=a.tracking_uri,
    )


if __name__ == "__main__":
    main()
