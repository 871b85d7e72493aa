"""Prefect flows against a real (temporary) Prefect server: ``prefect_test_harness``.

* ``pipeline`` end to end on a tiny DVC project running the real ``agentr1 prepare/validate/
  index`` stages, with ``dvc push`` to a local DVC remote; flow state and artifacts read back
  through the Prefect client.
* a failing stage (bad params) -> flow run Failed with the stage's own error text, no retries;
  a transient failure (DVC lock message) -> retried and Completed.
* ``prefect deploy --all`` from prefect.yaml against the test server -> schedules checked.
* ``promote`` with the CLI replaced by a stand-in script (the real ``agentr1 promote`` belongs
  to agentr1.tracking and has its own tests).
* ``sweep``: see tests/test_flows_sweep.py (own file to keep each file under ~4 minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# Prefect reads PREFECT_HOME when it is first imported: give the tests their own.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="agentr1-prefect-home-"))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from flows import common  # noqa: E402
from flows import pipeline as pipeline_mod  # noqa: E402
from flows import promote as promote_mod  # noqa: E402
from flows.pipeline import METRICS_KEY, REPORT_KEY, pipeline, repro  # noqa: E402
from prefect.client.orchestration import get_client  # noqa: E402
from prefect.client.schemas.filters import (  # noqa: E402
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterId,
)
from prefect.testing.utilities import prefect_test_harness  # noqa: E402

import _tiny_project as tiny  # noqa: E402


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        from prefect.settings import PREFECT_API_URL

        yield PREFECT_API_URL.value()


def _artifacts(flow_run_id) -> dict[str, object]:
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a for a in arts if a.key}


def _flow_run(flow_run_id):
    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def _task_runs(flow_run_id):
    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


# ----------------------------------------------------------------------------------- unit
def test_transient_classification():
    assert common.is_transient("ERROR: Unable to acquire lock. Most likely another DVC process is running")
    assert common.is_transient("botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL")
    assert common.is_transient("Read timed out.")
    assert not common.is_transient("agentr1: data.synthetic.questions.train: Input should be >= 0")
    assert not common.is_transient(
        "ERROR: failed to reproduce 'prepare': failed to run: agentr1 prepare, exited with 2"
    )


# Ordinary stage output (training/eval logs, config errors) that mentions numbers such as 503 or
# words such as "timeout": a deterministic failure whose log has these lines must not be retried.
ORDINARY_LINES = [
    "step 503/1000",
    "eval n=504",
    "timeout_s must be > 0",
    "2026-12-01 INFO agentr1.rl.trainer: step 503/1000 reward 0.1",
    "2026-12-01 12:00:03,502 INFO agentr1.eval: evaluate@ppo n=502 em=0.31 f1=0.44",
    "agentr1: retrieval.server.timeout_s: Input should be greater than 0",
    "ERROR: failed to reproduce 'evaluate@ppo': failed to run: agentr1 evaluate, exited with 1",
    "ValueError: expected 504 passages, got 503",
    "rollout: 503 episodes, 12 timed_out, mean turns 3.1",
    "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(Connection refused)'",
    "2026-12-01 WARNING urllib3.connectionpool: Retrying after Read timed out.",
]
# Real transient errors (lock, network, S3/HTTP server), as DVC, boto3, requests and SQLite print them.
TRANSIENT_LINES = [
    "ERROR: Unable to acquire lock. Most likely another DVC process is running or was terminated abruptly.",
    "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked",
    'botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "http://127.0.0.1:9000/agentr1"',
    "ConnectionRefusedError: [Errno 111] Connection refused",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    "socket.gaierror: [Errno -3] Temporary failure in name resolution",
    "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='mlflow.internal', port=443): Read timed out. (read timeout=120)",
    "botocore.exceptions.ClientError: An error occurred (503) when calling the PutObject operation: Service Unavailable",
    "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation: Please reduce your request rate.",
    "urllib.error.HTTPError: HTTP Error 502: Bad Gateway",
    "mlflow.exceptions.MlflowException: API request to endpoint /api/2.0/mlflow/runs/create failed with error code 503 != 200",
    "requests.exceptions.HTTPError: 504 Server Error: Gateway Timeout for url: http://mlflow.internal/api/2.0/mlflow/runs/log-batch",
]


@pytest.mark.parametrize("line", ORDINARY_LINES)
def test_ordinary_output_is_not_transient(line):
    assert not common.is_transient(line), line


@pytest.mark.parametrize("line", TRANSIENT_LINES)
def test_real_transient_errors_are_transient(line):
    assert common.is_transient(line), line


def test_transient_looks_at_stderr_only():
    # a stage that printed a transient-looking line on stdout, then failed deterministically
    err = common.CommandError(
        ["dvc", "repro"],
        1,
        ".",
        "ERROR: failed to reproduce 'train@ppo'",
        "Connection refused (retried, recovered)\nERROR: failed to reproduce 'train@ppo'",
    )
    assert not err.transient
    err = common.CommandError(["dvc", "push"], 1, ".", "ERROR: unexpected error - Connection reset by peer", "")
    assert err.transient


def test_run_command_streams_and_reports_stderr(caplog):
    caplog.set_level("INFO", logger="agentr1.flows")
    res = common.run_command([sys.executable, "-c", "print('hello'); import sys; print('warn', file=sys.stderr)"], ".")
    assert res.stdout == "hello" and res.stderr == "warn"
    assert "hello" in caplog.text and "[stderr] warn" in caplog.text
    with pytest.raises(common.CommandError) as ei:
        common.run_command(
            [sys.executable, "-c", "import sys; print('boom: bad key', file=sys.stderr); sys.exit(3)"], "."
        )
    assert ei.value.returncode == 3 and "boom: bad key" in str(ei.value) and not ei.value.transient
    with pytest.raises(common.CommandError, match="timed out"):
        common.run_command([sys.executable, "-c", "import time; time.sleep(30)"], ".", timeout_s=1)


def test_flatten_and_markdown():
    flat = common.flatten({"a": {"b": 1, "c": [1, 2]}, "d": True, "e": {"f": {"g": 0.5}}}, max_depth=2)
    assert flat == {"a.b": 1, "a.c": "1, 2", "d": True}
    md = common.md_table([{"x": "a|b", "y": 1}])
    assert "a\\|b" in md and md.startswith("| x | y |")


def test_tracking_store_is_the_stages_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "params.yaml").write_text("tracking: {uri: 'sqlite:///store/runs.db'}\n")
    # the project's tracking.uri, relative to the project (not to where the flow runs)
    assert common.tracking_store(tmp_path) == f"sqlite:///{(tmp_path / 'store/runs.db').resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the env wins over params ...
    assert common.tracking_store(tmp_path) == "http://127.0.0.1:9"
    # ... and the flow's parameter over both
    assert common.tracking_store(tmp_path, "sqlite:///x.db") == f"sqlite:///{(tmp_path / 'x.db').resolve()}"
    assert common.tracking_store(tmp_path, "sqlite:////abs/y.db") == "sqlite:////abs/y.db"
    (tmp_path / "params.yaml").write_text("- not a mapping\n")
    assert common.tracking_store(tmp_path) is None
    missing = tmp_path / "store/runs.db"
    rows, note = common.mlflow_runs_since(f"sqlite:///{missing}", 0)
    assert rows == [] and note == f"no MLflow store at {missing} yet (no stage has logged to it)"
    assert not missing.exists()  # reading never creates the store


@pytest.mark.slow  # MLflow sqlite migrations take ~30 s on a loaded 2-core machine
def test_mlflow_links(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    since = int(time.time() * 1000) - 1000
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("nano", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp, run_name="validate", tags={"agentr1.stage": "validate"})
    client.set_terminated(run.info.run_id)
    rows, note = common.mlflow_runs_since(uri, since)
    assert note is None and rows == [
        {
            "run": "validate",
            "stage": "validate",
            "experiment": "nano",
            "status": "FINISHED",
            "url": f"runs:/{run.info.run_id}",
        }
    ]
    assert common.run_url("http://127.0.0.1:5000/", exp, "abc") == f"http://127.0.0.1:5000/#/experiments/{exp}/runs/abc"
    assert common.mlflow_runs_since(None, since)[1].startswith("no MLflow tracking URI configured")
    rows, note = common.mlflow_runs_since("http://127.0.0.1:9", since)  # nothing listens: tolerated
    assert rows == [] and "could not read MLflow runs" in note


# ----------------------------------------------------------------------------------- pipeline
@pytest.mark.slow
def test_pipeline_end_to_end(harness, tmp_path, monkeypatch):
    project = tiny.make_project(tmp_path / "proj")
    remote = tmp_path / "dvc-remote"
    tiny.sh(["dvc", "remote", "add", "-d", "local", str(remote)], project)
    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # the stages (once they log to MLflow) and the flow's link lookup use the same store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)

    state = pipeline(project_dir=str(project), targets=["index"], push=True, return_state=True)
    assert state.is_completed(), state.message
    flow_run_id = state.state_details.flow_run_id
    assert _flow_run(flow_run_id).state.is_completed()

    # the stages really ran, and the push reached the remote
    summary = json.loads((project / "data/validation/summary.json").read_text())
    report = json.loads((project / "data/retrieval/report.json").read_text())
    assert summary["success"] is True
    assert any(p.is_file() for p in remote.rglob("*")), "dvc push wrote nothing to the remote"
    assert tiny.sh(["dvc", "status", "-c"], project).stdout.strip() in ("Cache and remote 'local' are in sync.", "")

    arts = _artifacts(flow_run_id)
    assert {REPORT_KEY, METRICS_KEY} <= set(arts)
    md = arts[REPORT_KEY].data
    assert "# agentr1 pipeline: Completed" in md
    assert "`index`" in md and "dvc push:" in md
    # agentr1 track ran after the repro: the stages' live runs (first runs, no dvc.lock entry to tag
    # their outputs with yet) are adopted, not logged twice
    assert "- MLflow: agentr1 track: 3 stages in dvc.lock: 3 adopted" in md
    assert "### `data/validation/summary.json`" in md and "### `data/retrieval/report.json`" in md
    assert f"| n_expectations | {summary['n_expectations']} |" in md
    assert f"| n_failed | {summary['n_failed']} |" in md
    r1 = report["splits"]["dev"]["recall@1"]
    assert f"| splits.dev.recall@1 | {common.fmt(r1)} |" in md
    # no stage logged to MLflow in this tiny project (or they did): either way the section is there
    assert "## MLflow runs" in md
    table = arts[METRICS_KEY].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert {"file": "data/validation/summary.json", "metric": "success", "value": "True"} in rows
    assert {"file": "data/retrieval/report.json", "metric": "passages", "value": str(report["passages"])} in rows


FLAKY = """\
import pathlib, sys
marker = pathlib.Path('flaky.attempts')
n = int(marker.read_text()) if marker.exists() else 0
marker.write_text(str(n + 1))
if n == 0:
    print('ERROR: Unable to acquire lock. Most likely another DVC process is running', file=sys.stderr)
    sys.exit(1)
pathlib.Path('flaky.out').write_text('ok')
"""


@pytest.mark.slow
def test_failing_stage_fails_the_flow_without_retries(harness, tmp_path):
    bad = tiny.deep_merge(tiny.TINY_PARAMS, {"data": {"synthetic": {"questions": {"train": -5}}}})
    project = tiny.make_project(tmp_path / "bad", params=bad)

    state = pipeline(project_dir=str(project), targets=["prepare"], return_state=True)
    assert state.is_failed()
    fr = _flow_run(state.state_details.flow_run_id)
    assert fr.state.is_failed()
    # the stage's own stderr (agentr1's ConfigError naming the key path) is in the failure
    for text in (state.message, fr.state.message):
        assert "dvc repro prepare" in text
        assert "data.synthetic.questions.train" in text
    with pytest.raises(common.CommandError, match="data.synthetic.questions.train"):
        state.result()
    # deterministic failure: the repro task ran once (no retry)
    (tr,) = [t for t in _task_runs(fr.id) if t.name.startswith("dvc repro")]
    assert tr.run_count == 1 and tr.state.is_failed()
    md = _artifacts(fr.id)[REPORT_KEY].data
    assert "# agentr1 pipeline: Failed" in md and "## Error" in md and "data.synthetic.questions.train" in md


@pytest.mark.slow
def test_transient_failure_is_retried(harness, tmp_path, monkeypatch):
    project = tiny.make_project(
        tmp_path / "flaky",
        extra_stages={"flaky": {"cmd": f"{sys.executable} flaky.py", "deps": ["flaky.py"], "outs": ["flaky.out"]}},
        files={"flaky.py": FLAKY},
    )
    monkeypatch.setattr(pipeline_mod, "repro", repro.with_options(retry_delay_seconds=0))
    state = pipeline(project_dir=str(project), targets=["flaky"], return_state=True)
    assert state.is_completed(), state.message
    assert (project / "flaky.attempts").read_text() == "2"
    (tr,) = [t for t in _task_runs(state.state_details.flow_run_id) if t.name.startswith("dvc repro")]
    assert tr.run_count == 2


def test_repro_task_run_names():
    assert pipeline_mod.repro_run_name({"target": None}) == "dvc repro (all stages)"
    assert pipeline_mod.repro_run_name({"target": "train@ppo"}) == "dvc repro train@ppo"
    assert pipeline_mod.repro_run_name({"target": ["train@ppo", "evaluate@ppo"]}) == "dvc repro train@ppo evaluate@ppo"
    assert repro.task_run_name is pipeline_mod.repro_run_name


@pytest.mark.slow
def test_repro_task_run_name_without_target(harness, tmp_path):
    from prefect import flow

    @flow
    def only_repro(project_dir: str):
        repro(project_dir, None)

    state = only_repro(str(tmp_path), return_state=True)  # not a DVC project: fails at once
    assert state.is_failed()
    names = [t.name for t in _task_runs(state.state_details.flow_run_id)]
    assert names == ["dvc repro (all stages)"], names


def test_push_needs_a_remote(tmp_path):
    tiny.sh(["dvc", "init", "--no-scm", "-q"], tmp_path)
    with pytest.raises(pipeline_mod.NoDvcRemoteError, match="scripts/topology.sh up"):
        pipeline_mod.check_push_remote(str(tmp_path), None)
    with pytest.raises(pipeline_mod.NoDvcRemoteError, match="no such DVC remote"):
        pipeline_mod.check_push_remote(str(tmp_path), "s3remote")
    tiny.sh(["dvc", "remote", "add", "--local", "-d", "s3remote", "s3://agentr1/dvcstore"], tmp_path)
    assert pipeline_mod.check_push_remote(str(tmp_path), None) == "s3remote"
    assert pipeline_mod.check_push_remote(str(tmp_path), "s3remote") == "s3remote"


@pytest.mark.slow
def test_push_without_remote_fails_before_any_stage(harness, tmp_path):
    project = tiny.make_project(tmp_path / "noremote")
    state = pipeline(project_dir=str(project), targets=["prepare"], push=True, return_state=True)
    assert state.is_failed()
    assert "no default DVC remote" in state.message and "scripts/topology.sh up" in state.message
    assert _task_runs(state.state_details.flow_run_id) == []  # no stage ran


# ----------------------------------------------------------------------------------- deployments
@pytest.mark.slow
def test_deployments_register_with_schedules(harness, tmp_path):
    env = {
        **tiny.env(),
        "PREFECT_API_URL": harness,
        "PREFECT_HOME": str(tmp_path / "home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    prefect = [sys.executable, "-m", "prefect"]
    for cmd in (
        prefect + ["work-pool", "create", "agentr1-process", "--type", "process"],
        prefect + ["--no-prompt", "deploy", "--all"],
    ):
        res = subprocess.run(cmd, cwd=REPO_ROOT, env=env, text=True, capture_output=True, timeout=300)
        assert res.returncode == 0, f"{cmd}:\n{res.stdout}\n{res.stderr}"

    with get_client(sync_client=True) as client:
        deps = {d.name: d for d in client.read_deployments()}
    assert {"agentr1-pipeline-weekly", "agentr1-promote-nightly", "agentr1-sweep"} <= set(deps)

    def crons(name):
        return [(s.schedule.cron, s.schedule.timezone, s.active) for s in deps[name].schedules]

    assert crons("agentr1-pipeline-weekly") == [("0 3 * * 1", "UTC", True)]
    assert crons("agentr1-promote-nightly") == [("0 2 * * *", "UTC", True)]
    assert crons("agentr1-sweep") == []
    for name, entry in (
        ("agentr1-pipeline-weekly", "flows/pipeline.py:pipeline"),
        ("agentr1-promote-nightly", "flows/promote.py:promote"),
        ("agentr1-sweep", "flows/sweep.py:sweep"),
    ):
        d = deps[name]
        assert d.entrypoint == entry and d.work_pool_name == "agentr1-process"
        # the working directory of the flow runs is this checkout
        assert d.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO_ROOT)}}]
    assert deps["agentr1-pipeline-weekly"].parameters["push"] is True
    # typed parameters reach the deployment's schema
    props = deps["agentr1-sweep"].parameter_openapi_schema["properties"]
    assert {"seeds", "overrides", "jobs", "targets"} <= set(props)


# ----------------------------------------------------------------------------------- promote
FAKE_PROMOTE = """\
import json, sys
args = sys.argv[1:]
print("evaluating challenger v7 against champion v5 on data/processed/test.parquet", file=sys.stderr)
if "--fail" in args:
    print("agentr1 promote: registered model 'agentr1-policy' has no alias 'champion'", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"argv": args, "promoted": True, "champion": 7, "previous": 5, "delta_em": 0.06}))
"""


@pytest.mark.slow
def test_promote_flow_with_stand_in_cli(harness, tmp_path, monkeypatch):
    # `agentr1 promote` is another module's command; the flow's contract is: run it in the
    # project, stream it, publish its JSON decision, fail with its stderr.
    fake = tmp_path / "fake_agentr1.py"
    fake.write_text(FAKE_PROMOTE)
    monkeypatch.setattr(promote_mod, "PROMOTE_BASE", [sys.executable, str(fake)])
    state = promote_mod.promote(
        project_dir=str(tmp_path), model="agentr1-policy", metric="test/em", dry_run=True, return_state=True
    )
    assert state.is_completed(), state.message
    out = state.result()
    assert out["decision"]["argv"] == [
        "--params",
        "params.yaml",
        "promote",
        "--model",
        "agentr1-policy",
        "--metric",
        "test/em",
        "--dry-run",
    ]
    arts = _artifacts(state.state_details.flow_run_id)
    assert "| promoted | True |" in arts["agentr1-promote"].data
    rows = arts["agentr1-promote-decision"].data
    rows = json.loads(rows) if isinstance(rows, str) else rows
    assert {"key": "delta_em", "value": "0.06"} in rows

    state = promote_mod.promote(project_dir=str(tmp_path), args=["--fail"], return_state=True)
    assert state.is_failed()
    assert "has no alias 'champion'" in _flow_run(state.state_details.flow_run_id).state.message


def test_each_reproduced_pipeline_is_tracked_from_its_own_params_file():
    """A profile's pipeline of its own (pipelines/<name>/dvc.yaml, issue 49) is tracked with its
    params file, so `agentr1 track` reads pipelines/<name>/dvc.lock; the root pipeline as before."""
    from flows.pipeline import params_files

    assert params_files([]) == ["params.yaml"]
    assert params_files(["validate", "train@grpo-0"]) == ["params.yaml"]
    assert params_files(["pipelines/smol/dvc.yaml"]) == ["pipelines/smol/params.yaml"]
    assert params_files(["pipelines/smol/dvc.yaml:sft", "report", "pipelines/smol/dvc.yaml"]) == [
        "pipelines/smol/params.yaml",
        "params.yaml",
    ]
