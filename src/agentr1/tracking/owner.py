"""Who runs a stage run, and what happens to its MLflow run when that process is killed.

Every stage run is tagged with its process (:func:`owner_tags`: host, pid and the process's start
time, so a pid the system reused later is not taken for the owner). A ``kill -9`` leaves its run
RUNNING forever; when a stage run of the same name starts, :func:`end_orphans` sets every RUNNING
run of that name whose owner is *provably* gone (same host, pid not alive or now another process)
to KILLED. A run of another host, or without owner tags (an older version), is left alone: its
process cannot be checked from here.

``agentr1 train --resume`` continues the killed run instead of starting another
(:func:`continuable`, :func:`logged_steps`): the same MLflow run then holds the whole curve.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agentr1.io import pid_alive
from agentr1.tracking.tags import RUN_NAME_TAG

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

log = logging.getLogger(__name__)

HOST_TAG = "agentr1.host"
PID_TAG = "agentr1.pid"
PID_START_TAG = "agentr1.pid_start"  # the process's start time (s since the epoch), against pid reuse
ENDED_BY_TAG = "agentr1.ended_by"
_START_SLACK_S = 1.0


def _start_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # psutil missing, or no such process / no access
        return None


def owner_tags() -> dict[str, str]:
    """This process as run tags: host name, pid and start time."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    start = _start_time(os.getpid())
    if start is not None:
        tags[PID_START_TAG] = f"{start:.2f}"
    return tags


def owner_gone(tags: Mapping[str, str]) -> bool:
    """Whether the process that owns a run with ``tags`` has provably ended: it ran on this host
    and its pid is not alive, or is alive with another start time (a reused pid)."""
    if tags.get(HOST_TAG) != socket.gethostname():
        return False
    try:
        pid = int(tags.get(PID_TAG, ""))
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    if not pid_alive(pid):
        return True
    try:
        recorded = float(tags[PID_START_TAG])
    except (KeyError, ValueError):
        return False
    now = _start_time(pid)
    return now is not None and abs(now - recorded) > _START_SLACK_S


def _quoted(run_name: str) -> bool:
    return "'" in run_name or "`" in run_name or "\\" in run_name


def end_orphans(client: MlflowClient, experiment_id: str, run_name: str, keep: str | None = None) -> list[str]:
    """Set the RUNNING runs named ``run_name`` whose owner is gone (:func:`owner_gone`) to
    KILLED, except ``keep``; returns their ids."""
    if _quoted(run_name):
        return []
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{RUN_NAME_TAG}` = '{run_name}' and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    ended = []
    for run in found:
        if run.info.run_id == keep or not owner_gone(run.data.tags):
            continue
        client.set_tag(
            run.info.run_id,
            ENDED_BY_TAG,
            f"process {run.data.tags.get(PID_TAG)} on "
            f"{run.data.tags.get(HOST_TAG)} was gone when {run_name} started again (pid {os.getpid()})",
        )
        client.set_terminated(run.info.run_id, "KILLED")
        log.warning(
            "MLflow run %s (%s) was left RUNNING by a process that is gone (killed?): marked KILLED",
            run.info.run_id,
            run_name,
        )
        ended.append(run.info.run_id)
    return ended


def continuable(client: MlflowClient, experiment_id: str, run_id: str, run_name: str) -> tuple[Run | None, str]:
    """The run ``run_id`` when a resumed stage may continue it - in ``experiment_id``, not
    deleted, named ``run_name`` and not RUNNING under a live (or unknown) owner - else ``None``;
    and why (for the log). A FINISHED run is continued too: a process killed after its run ended
    (writing its last outputs) is resumed at its last step, and a second run would hold the same
    curve again (its steps are skipped, the run ends FINISHED once more)."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as exc:
        return None, f"it is not in the store ({str(exc).splitlines()[0][:120]})"
    info = run.info
    if info.experiment_id != experiment_id or info.lifecycle_stage != "active":
        return None, f"it is {'deleted' if info.lifecycle_stage != 'active' else 'in another experiment'}"
    if run.data.tags.get(RUN_NAME_TAG, info.run_name) != run_name:
        return None, f"it is named {run.data.tags.get(RUN_NAME_TAG, info.run_name)!r}"
    if info.status in ("RUNNING", "SCHEDULED") and not owner_gone(run.data.tags):
        return None, "its process may still be running"
    return run, info.status


def logged_steps(client: MlflowClient, run: Run) -> dict[str, int]:
    """``{metric: the highest step run holds of it}``: a resumed stage logs a metric only at the
    steps after it (a resume is byte-identical: those it holds would be logged twice)."""
    return {
        key: max(m.step for m in history)
        for key in run.data.metrics
        if (history := client.get_metric_history(run.info.run_id, key))
    }
