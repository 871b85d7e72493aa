"""``pipeline`` flow: ``dvc repro`` the requested targets, ``agentr1 track`` (MLflow gets a run for
every stage DVC skipped), optionally ``dvc push``, publish the results as Prefect artifacts
(metrics from every DVC metrics file + links to the MLflow runs the stages logged), optionally
sync report folders to S3.

Run it locally::

    python -m flows.pipeline                      # whole pipeline, from the repo root
    python -m flows.pipeline --target validate --push

or through the ``agentr1-pipeline-weekly`` deployment in ``prefect.yaml``.

Retries: a repro/push task is retried (2x, after 30 s then 120 s) only when the failure is
*transient* - DVC's repo lock held by another process, or a network / S3 error (see
``flows.common.TRANSIENT_PATTERNS``). A deterministic failure (bad params, a failed validation,
a bug) fails the flow run at once with the stage's stderr in the error message.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.common import (
    flatten,
    fmt,
    md_link,
    md_table,
    metrics_table,
    mlflow_runs_since,
    read_dvc_metrics,
    retry_if_transient,
    run_command,
    run_logger,
    tracking_store,
)

REPORT_KEY = "agentr1-pipeline-report"
METRICS_KEY = "agentr1-pipeline-metrics"
# Read directly when `dvc metrics show` cannot answer (the stages' metrics files so far).
KNOWN_METRICS = (
    "data/validation/summary.json",
    "data/retrieval/report.json",
    "data/sft/metrics.json",
    "data/sft_reference/metrics.json",
    "reports/report.json",
)
# The markdown shows metric paths up to this depth; the table artifact has all of them.
MD_DEPTH = 3
MD_ROWS_PER_FILE = 40


def repro_run_name(parameters: dict[str, Any]) -> str:
    """Task run name: ``dvc repro train@ppo-0`` (or several targets), ``dvc repro (all stages)``."""
    target = parameters.get("target")
    targets = [target] if isinstance(target, str) else list(target or [])
    return "dvc repro " + (" ".join(targets) if targets else "(all stages)")


@task(
    name="dvc-repro",
    task_run_name=repro_run_name,
    retries=2,
    retry_delay_seconds=[30, 120],
    retry_condition_fn=retry_if_transient,
)
def repro(project_dir: str, target: str | None, force: bool = False, timeout_s: float | None = None) -> dict[str, Any]:
    cmd = ["dvc", "repro"] + (["--force"] if force else []) + ([target] if target else [])
    res = run_command(cmd, project_dir, timeout_s=timeout_s)
    return {"target": target or "(all)", "seconds": round(res.seconds, 1)}


def params_files(targets: list[str]) -> list[str]:
    """The params file of each pipeline the DVC ``targets`` belong to, in order: ``params.yaml`` for
    the root ``dvc.yaml`` (no targets, or a stage of it), ``pipelines/<name>/params.yaml`` for
    ``pipelines/<name>/dvc.yaml`` or one of its stages (``pipelines/<name>/dvc.yaml:sft``), a
    profile's pipeline of its own (``agentr1.pipelines``)."""
    found: list[str] = []
    for target in targets or ["dvc.yaml"]:
        path = target.split(":", 1)[0]  # dvc.yaml or dvc.yaml:stage
        params = (
            str(Path(path).parent / "params.yaml")
            if path.endswith("dvc.yaml") and Path(path).parent != Path(".")
            else "params.yaml"
        )
        if params not in found:
            found.append(params)
    return found


@task(name="mlflow-track", retries=2, retry_delay_seconds=[30, 120], retry_condition_fn=retry_if_transient)
def track(project_dir: str, params_file: str = "params.yaml") -> str:
    """``agentr1 track``: MLflow gets a run for every stage DVC skipped (its outputs up to date),
    the registry its versions and aliases; adds nothing for the stages that logged live. A pipeline
    of its own (``params_file`` = ``pipelines/<name>/params.yaml``) is tracked from its own lock."""
    params = [] if params_file == "params.yaml" else ["--params", params_file]
    res = run_command(["agentr1", *params, "track"], project_dir)
    return next((ln for ln in res.stdout.splitlines() if ln.startswith("agentr1 track:")), "tracked")


@task(
    name="dvc-push",
    retries=2,
    retry_delay_seconds=[30, 120],
    retry_condition_fn=retry_if_transient,
)
def dvc_push(project_dir: str, targets: list[str], remote: str | None = None) -> str:
    # --with-deps: the targets' upstream outputs too (what `dvc repro <target>` produced)
    cmd = ["dvc", "push"] + (["-r", remote] if remote else []) + (["--with-deps", *targets] if targets else [])
    res = run_command(cmd, project_dir)
    return (res.stdout.strip().splitlines() or ["pushed"])[-1]


@task(name="s3-publish", retries=2, retry_delay_seconds=[30, 120], retry_condition_fn=retry_if_transient)
def publish(project_dir: str, url: str, paths: list[str]) -> list[str]:
    """Sync report folders/files to ``url`` (s3://bucket/prefix) with agentr1.tracking.storage."""
    from agentr1.tracking.storage import S3Storage

    storage = S3Storage.from_url(url)
    storage.check()
    uploaded: list[str] = []
    for rel in paths:
        p = Path(project_dir) / rel
        if p.is_dir():
            uploaded += storage.sync_up(p, rel).transferred
        elif p.is_file():
            uploaded += storage.upload(p, rel)
        else:
            run_logger().warning("publish: %s does not exist, skipped", p)
    return uploaded


class NoDvcRemoteError(RuntimeError):
    """``push=true`` but the project has no DVC remote to push to."""


def check_push_remote(project_dir: str, remote: str | None) -> str:
    """The remote ``dvc push`` will use; raises :class:`NoDvcRemoteError` naming the fix when
    there is none (checked before any stage runs, so a weekly run does not fail after hours)."""
    listed = run_command(["dvc", "remote", "list"], project_dir, logger=_quiet()).stdout
    names = [ln.split()[0] for ln in listed.splitlines() if ln.strip()]
    if remote:
        if remote not in names:
            raise NoDvcRemoteError(
                f"push=true with remote={remote!r}, but {project_dir} has no such DVC remote "
                f"(configured: {', '.join(names) or 'none'}): `dvc remote add {remote} s3://<bucket>/dvcstore`, "
                "or pass another remote, or push=false"
            )
        return remote
    res = run_command(["dvc", "remote", "default"], project_dir, check=False, logger=_quiet())
    default = res.stdout.strip() if res.returncode == 0 else ""  # else: "No default remote set"
    if not default:
        raise NoDvcRemoteError(
            f"push=true, but {project_dir} has no default DVC remote (.dvc/config tracks none): "
            "for the local topology run `scripts/topology.sh up` (it sets one in the git-ignored "
            ".dvc/config.local); otherwise `dvc remote add --local -d <name> s3://<bucket>/dvcstore` "
            '(docs/OPERATIONS.md, "DVC remote and MLflow artifacts on S3"), pass remote=<name>, or push=false'
        )
    return default


def _git_sha(project_dir: str) -> str:
    try:
        sha = run_command(
            ["git", "rev-parse", "--short", "HEAD"], project_dir, check=False, logger=_quiet()
        ).stdout.strip()
        dirty = run_command(["git", "status", "--porcelain"], project_dir, check=False, logger=_quiet()).stdout.strip()
        return (sha or "unknown") + (" (dirty)" if dirty else "")
    except OSError:
        return "unknown"


def _quiet():
    import logging

    return logging.getLogger("agentr1.flows.quiet")


def build_report(
    *,
    status: str,
    project_dir: str,
    targets: list[str],
    stages: list[dict[str, Any]],
    metrics: dict[str, Any],
    mlflow_rows: list[dict[str, str]],
    mlflow_note: str | None,
    error: str | None = None,
    pushed: str | None = None,
    published: list[str] | None = None,
    report_md: str | None = None,
    tracked: str | None = None,
) -> str:
    """The markdown artifact: status, what ran, metrics per file, MLflow links, the error."""
    lines = [
        f"# agentr1 pipeline: {status}",
        "",
        f"- project: `{Path(project_dir).resolve()}`",
        f"- git: `{_git_sha(project_dir)}`",
        f"- targets: {', '.join(f'`{t}`' for t in targets) if targets else '`(all stages)`'}",
    ]
    if tracked:
        lines.append(f"- MLflow: {tracked}")
    if pushed:
        lines.append(f"- dvc push: {pushed}")
    if published:
        lines.append(f"- published to S3: {len(published)} object(s)")
    lines += ["", "## Stages run", "", md_table(stages, ["target", "seconds"]) if stages else "_none_\n"]
    if error:
        lines += ["## Error", "", "```", error.strip(), "```", ""]
    lines += ["## Metrics", ""]
    if not metrics:
        lines.append("_no metrics files yet_\n")
    for path, data in metrics.items():
        flat: dict[str, Any] = {}
        for depth in range(1, MD_DEPTH + 1):  # shallow metrics first (n_failed before per-check detail)
            flat.update({k: v for k, v in flatten(data, max_depth=depth).items() if k not in flat})
        rows = [{"metric": k, "value": fmt(v)} for k, v in flat.items()]
        total = len(flatten(data))
        lines += [f"### `{path}`", "", md_table(rows[:MD_ROWS_PER_FILE], ["metric", "value"])]
        if total > min(len(rows), MD_ROWS_PER_FILE):
            lines.append(
                f"_{total - min(len(rows), MD_ROWS_PER_FILE)} more values in the `{METRICS_KEY}` table artifact._\n"
            )
    lines += ["## MLflow runs", ""]
    if mlflow_rows:
        lines.append(
            md_table(
                [{**r, "url": md_link(r["url"], "open")} for r in mlflow_rows],
                ["run", "stage", "experiment", "status", "url"],
            )
        )
    else:
        lines.append(f"_{mlflow_note}_\n")
    if report_md:
        lines += ["## Report", "", report_md]
    return "\n".join(lines)


@flow(name="pipeline", log_prints=True)
def pipeline(
    project_dir: str = ".",
    targets: list[str] | None = None,
    force: bool = False,
    push: bool = False,
    remote: str | None = None,
    tracking_uri: str | None = None,
    stage_timeout_s: float | None = None,
    publish_to: str | None = None,
    publish_paths: list[str] | None = None,
    report_file: str | None = "reports/summary.md",
    track_mlflow: bool = True,
) -> dict[str, Any]:
    """Reproduce the DVC pipeline and publish its results.

    Args:
        project_dir: the DVC project (repository root) to run in.
        targets: DVC targets (stage names such as ``validate`` or ``train@grpo-0``), reproduced in
            order with their upstream stages; empty = the whole pipeline. A profile's pipeline of its
            own is a target too: ``pipelines/smol/dvc.yaml`` (tracked from ``pipelines/smol/dvc.lock``).
        force: ``dvc repro --force`` (rerun even if nothing changed).
        push: ``dvc push`` the targets' outputs to the DVC remote afterwards; the flow fails
            before running any stage when there is no remote to push to.
        remote: DVC remote name for the push (default: the project's default remote).
        tracking_uri: MLflow tracking URI for the run links (default: ``MLFLOW_TRACKING_URI``,
            else the project's ``tracking.uri``; no links while that store does not exist).
        stage_timeout_s: kill a ``dvc repro`` that runs longer than this (None = no limit).
        publish_to: ``s3://bucket/prefix`` to sync ``publish_paths`` to (agentr1.tracking.storage).
        publish_paths: project-relative files/folders to publish (e.g. ``data/report``).
        report_file: a markdown report (project-relative) to embed in the artifact if it exists.
        track_mlflow: run ``agentr1 track`` after the repro, so MLflow (runs, registry) shows
            every stage of ``dvc.lock``, including those DVC skipped.
    """
    logger = run_logger()
    project_dir = str(Path(project_dir).resolve())
    if not (Path(project_dir) / "dvc.yaml").is_file():
        raise FileNotFoundError(f"{project_dir} has no dvc.yaml: set project_dir to the agentr1 repository root")
    targets = list(targets or [])
    started_ms = int(time.time() * 1000) - 1000
    stages: list[dict[str, Any]] = []
    error: str | None = None
    pushed: str | None = None
    tracked: str | None = None
    published: list[str] = []
    try:
        if push:
            check_push_remote(project_dir, remote)
        for target in targets or [None]:
            stages.append(repro(project_dir, target, force, stage_timeout_s))
        if track_mlflow:  # each pipeline the targets reproduced, from its own lock
            tracked = "; ".join(track(project_dir, params) for params in params_files(targets))
        if push:
            pushed = dvc_push(project_dir, targets, remote)
        if publish_to:
            published = publish(project_dir, publish_to, list(publish_paths or []))
    except Exception as exc:
        error = str(exc)
        raise
    finally:
        status = "Failed" if error else "Completed"
        metrics = read_dvc_metrics(project_dir, KNOWN_METRICS)
        uri = tracking_store(project_dir, tracking_uri)
        mlflow_rows, mlflow_note = mlflow_runs_since(uri, started_ms)
        report_md = None
        if report_file and (Path(project_dir) / report_file).is_file():
            report_md = (Path(project_dir) / report_file).read_text()
        markdown = build_report(
            status=status,
            project_dir=project_dir,
            targets=targets,
            stages=stages,
            metrics=metrics,
            mlflow_rows=mlflow_rows,
            mlflow_note=mlflow_note,
            error=error,
            pushed=pushed,
            published=published,
            report_md=report_md,
            tracked=tracked,
        )
        create_markdown_artifact(markdown, key=REPORT_KEY, description=f"agentr1 pipeline {status.lower()}")
        rows = metrics_table(metrics)
        if rows:
            create_table_artifact(rows, key=METRICS_KEY, description="every scalar in the DVC metrics files")
        logger.info(
            "pipeline %s: %d stage task(s), %d metrics file(s), %d MLflow run(s)",
            status.lower(),
            len(stages),
            len(metrics),
            len(mlflow_rows),
        )
    return {
        "stages": stages,
        "metrics": metrics,
        "mlflow_runs": mlflow_rows,
        "tracked": tracked,
        "pushed": pushed,
        "published": published,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="run the agentr1 pipeline flow once (no deployment needed)")
    ap.add_argument("--project-dir", default=".")
    ap.add_argument("--target", action="append", default=[], help="DVC target (repeatable); default: all")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--push", action="store_true", help="dvc push afterwards")
    ap.add_argument("--remote", default=None)
    ap.add_argument("--tracking-uri", default=None)
    ap.add_argument("--no-track", action="store_true", help="skip `agentr1 track` after the repro")
    a = ap.parse_args(argv)
    pipeline(
        project_dir=a.project_dir,
        targets=a.target,
        force=a.force,
        push=a.push,
        remote=a.remote,
        tracking_uri=a.tracking_uri,
        track_mlflow=not a.no_track,
    )


if __name__ == "__main__":
    main()
