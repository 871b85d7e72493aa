"""The MLflow adapter against a real tracking server (``mlflow server`` on 127.0.0.1, SQLite
backend and proxied artifacts in a temp dir), started and stopped by the test module.

Same scenarios as the SQLite tests (tracking_helpers.check_*); the stage URI comes from
``MLFLOW_TRACKING_URI`` here, as a user would point a pipeline at a shared server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tracking_helpers import check_registry, check_stage_run, check_traces, make_checkpoint, tracking_cfg, write_lock

pytestmark = pytest.mark.slow  # server start-up alone takes ~30-60 s on 2 shared cores

START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """``http://127.0.0.1:<port>`` of a fresh server; terminated (then killed) at module end."""
    mlflow_bin = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or shutil.which("mlflow")
    if mlflow_bin is None:
        pytest.fail("the mlflow CLI is not installed in this environment")
    root = tmp_path_factory.mktemp("mlflow_server")
    port = _free_port()
    log = open(root / "server.log", "wb")
    proc = subprocess.Popen(
        [
            mlflow_bin,
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root / 'backend.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--serve-artifacts",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # no GenAI job runner (it forks several huey consumers this test does not need)
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {proc.returncode}: {(root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"mlflow server not healthy after {START_TIMEOUT_S}s: {(root / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(1)
        yield uri
    finally:
        os.killpg(proc.pid, 15)  # the server and its uvicorn worker (own session, started here)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(autouse=True)
def _server_env(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    monkeypatch.setenv("AGENTR1_PIPELINE_ID", "server-pipeline")


def test_stage_run_server(server: str, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    src = tmp_path / "sft.py"
    src.write_text("x = 2\n")
    # params still say sqlite: the env URI must win, and the run must live on the server
    run_id = check_stage_run(
        tracking_cfg("sqlite:///unused.db", tmp_path / "art"), write_lock(tmp_path / "dvc.lock", src)
    )
    run = MlflowClient(tracking_uri=server).get_run(run_id)
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    assert not (Path.cwd() / "unused.db").exists()


def test_traces_server(server: str, tmp_path: Path) -> None:
    check_traces(tracking_cfg(server, tmp_path / "art"))


def test_registry_server(server: str, tmp_path: Path) -> None:
    check_registry(tracking_cfg(server, tmp_path / "art"), make_checkpoint(tmp_path / "policy"))


def test_compare_view_rest_params_differ(server: str) -> None:
    """What MLflow's compare view reads (``GET /api/2.0/mlflow/runs/get`` over HTTP): two
    ``train@`` runs of different estimators differ in ``train.estimator``, and only in the
    params their named runs set."""
    import json

    from agentr1.tracking import stage_run

    cfg = tracking_cfg(server, Path("unused"), parent_run=False)
    ids = {}
    for variant in ("ppo", "grpo"):
        with stage_run(cfg, "train", run_name=f"train@{variant}", variant=variant) as run:
            ids[variant] = run.run_id

    def params(run_id: str) -> dict[str, str]:
        with urllib.request.urlopen(f"{server}/api/2.0/mlflow/runs/get?run_id={run_id}", timeout=10) as resp:
            body = json.load(resp)
        return {p["key"]: p["value"] for p in body["run"]["data"]["params"]}

    ppo, grpo = params(ids["ppo"]), params(ids["grpo"])
    assert ppo["train.estimator"] == "gae" and grpo["train.estimator"] == "grpo"
    assert {k for k in ppo if ppo[k] != grpo.get(k)} == {"train.estimator"}
