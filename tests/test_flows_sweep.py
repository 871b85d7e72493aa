"""``sweep`` flow against a temporary Prefect server: two DVC experiments (seeds 1 and 2 of the
tiny project's ``prepare``) queued with ``dvc exp run --queue`` and run by ``dvc queue start``;
the table artifact is read back through the Prefect client."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="agentr1-prefect-home-"))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from prefect.client.orchestration import get_client  # noqa: E402
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId  # noqa: E402
from prefect.testing.utilities import prefect_test_harness  # noqa: E402

import _tiny_project as tiny  # noqa: E402


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def _artifacts(flow_run_id) -> dict[str, object]:
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a for a in arts if a.key}


def test_plan_and_queue_status_parsing():
    from flows.sweep import parse_queue_status, plan_experiments

    runs = plan_experiments(["evaluate@grpo"], [0, 1], {"rl.lr": [1e-5, 3e-5]}, "p")
    assert [r["sets"] for r in runs] == [
        {"seed": 0, "rl.lr": 1e-5},
        {"seed": 0, "rl.lr": 3e-5},
        {"seed": 1, "rl.lr": 1e-5},
        {"seed": 1, "rl.lr": 3e-5},
    ]
    assert runs[0]["name"] == "p-000-evaluate-grpo-s0" and len({r["name"] for r in runs}) == 4
    status = parse_queue_status(
        "Task     Name    Created    Status\n084ba32  s1      12:49 PM   Success\n"
        "9a2e7f1  s2      12:50 PM   Queued\n\nWorker status: 0 active, 0 idle\n"
    )
    assert status == {"s1": "Success", "s2": "Queued"}


@pytest.mark.slow
def test_sweep_runs_queued_experiments(harness, tmp_path):
    from flows.sweep import SWEEP_KEY, sweep

    project = tiny.make_project(tmp_path / "sweep")
    state = sweep(
        project_dir=str(project),
        targets=["prepare"],
        seeds=[1, 2],
        jobs=1,
        name_prefix="t",
        poll_s=2.0,
        timeout_s=900,
        return_state=True,
    )
    assert state.is_completed(), state.message
    rows = state.result()
    assert [r["state"] for r in rows] == ["Success", "Success"]
    assert [r["param:seed"] for r in rows] == ["1", "2"]
    assert all(r["rev"] for r in rows)
    arts = _artifacts(state.state_details.flow_run_id)
    table = arts[SWEEP_KEY].data
    table = json.loads(table) if isinstance(table, str) else table
    assert [r["experiment"] for r in table] == [r["experiment"] for r in rows]
    # the experiments exist in DVC, and the workspace itself was never touched
    shown = tiny.sh(["dvc", "exp", "list", "--name-only"], project).stdout.split()
    assert set(r["experiment"] for r in rows) <= set(shown)
    assert not (project / "data" / "processed").exists()
