"""A stage's MLflow run under kills and a locked store (issue 31, items 7 and 8).

Item 7: a killed stage leaves its run RUNNING; the next start of a run of the same name marks it
KILLED when its process is provably gone, and ``train --resume`` continues it so that one run
ends FINISHED with every step once (or, when it is gone from the store, a new run gets every
step of the training state).

Item 8: another writer holds the SQLite store (``BEGIN EXCLUSIVE`` from a second connection)
during ``train`` / ``evaluate``. MLflow's SQLite store waits 20 s for a lock before it fails
(``PRAGMA busy_timeout``); the ``short_busy_wait`` fixture makes that 0.1 s, so a lock of about
a second plays the part of the 45 s lock of the issue (longer than the store's own wait) and the
tests take seconds. Shorter than ``tracking.retry_timeout_s``: the stage rides it out and its run
is complete. Longer: the stage keeps its work (every output written, exit without an error), its
run ends FAILED and names ``agentr1 track``.
"""

from __future__ import annotations

import json
import logging
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import tiny_world as tw
from agentr1 import stages
from agentr1.config import config_from_dict
from agentr1.data.schema import Dataset, write_dataset
from agentr1.models import save_checkpoint

torch = pytest.importorskip("torch")
torch.set_num_threads(1)


# ----------------------------------------------------------------------------------- fixtures
@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh SQLite store for the test (the env var wins over tracking.uri); the stages run in
    ``tmp_path`` (no git checkout, no dvc.lock: nothing of the repository's is read)."""
    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setenv("AGENTR1_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    return db


@pytest.fixture
def short_busy_wait():
    """MLflow's SQLite sessions wait 0.1 s for a lock instead of 20 s (module docstring)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def shorten(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("PRAGMA BUSY_TIMEOUT"):
            statement = "PRAGMA busy_timeout = 100;"
        return statement, parameters

    event.listen(Engine, "before_cursor_execute", shorten, retval=True)
    yield
    event.remove(Engine, "before_cursor_execute", shorten)


class StoreLock:
    """``BEGIN EXCLUSIVE`` on ``db`` from another connection, in a thread, until :meth:`release`
    (or ``hold_s``)."""

    def __init__(self, db: Path, hold_s: float = 60.0) -> None:
        self.db, self.hold_s = db, hold_s
        self.held, self.done = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        con = sqlite3.connect(self.db, timeout=10, isolation_level=None, check_same_thread=False)
        try:
            con.execute("BEGIN EXCLUSIVE")
            self.held.set()
            self.done.wait(self.hold_s)
            con.execute("COMMIT")
        finally:
            con.close()

    def acquire(self) -> StoreLock:
        self.thread.start()
        assert self.held.wait(10), "could not lock the store"
        return self

    def release(self) -> None:
        self.done.set()
        self.thread.join(10)


def _cfg(root: Path, **tracking):
    """The tiny world (train/dev/test questions, BM25 index, an untrained tiny "cold start"),
    two RL steps, a checkpoint after every step, tracking on without traces."""
    processed, index = root / "processed", root / "index"
    write_dataset(
        Dataset(
            questions={
                "train": tw.questions("train"),
                "dev": tw.questions("dev")[:2],
                "test": tw.questions("test")[:3],
            },
            corpus=tw.corpus(),
        ),
        processed,
    )
    tw.retriever().save(index)
    tok = tw.tokenizer([q["question"] for q in tw.questions()])
    save_checkpoint(tw.model(tok), tok, root / "sft")
    return config_from_dict(
        {
            "data": {"processed_dir": str(processed)},
            "retrieval": {"index_dir": str(index)},
            "env": {"max_turns": 2, "search": {"topk": 2, "passage_max_chars": 120}},
            "rollout": {"max_turn_tokens": 6, "max_total_tokens": 1024, "batch_size": 8},
            "sft": {"out_dir": str(root / "sft")},
            "tracking": {"trace_sample": 0, "parent_run": True, **tracking},
            "runs": tw.RUNS,
            "train": {
                "steps": 2,
                "batch_questions": 2,
                "group_size": 2,
                "micro_batch_size": 2,
                "out_dir": str(root / "runs"),
                "dev": {"every": 2, "examples": 2},
                "checkpoint": {"every": 1},
            },
            "evaluate": {
                "out_dir": str(root / "eval"),
                "splits": ["test"],
                "max_examples": 2,
                "batch_size": 2,
                "bootstrap": {"samples": 100},
            },
        }
    )


def _client():
    import os

    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])


def _runs(cfg, name: str) -> list:
    client = _client()
    exp = client.get_experiment_by_name(f"{cfg.tracking.experiment_prefix}-{cfg.profile}")
    return client.search_runs([exp.experiment_id], filter_string=f"tags.`agentr1.run_name` = '{name}'")


def _steps(run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in _client().get_metric_history(run_id, key))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _as_after_kill_9(run_id: str) -> None:
    """Leave ``run_id`` as a ``kill -9`` of its process leaves it: RUNNING, owned by a dead pid."""
    client = _client()
    client.update_run(run_id, status="RUNNING")
    client.set_tag(run_id, "agentr1.pid", str(_dead_pid()))
    client.set_tag(run_id, "agentr1.pid_start", "0")


def _kill_after_step(monkeypatch, at: int) -> None:
    """The next training is interrupted right after step ``at`` is logged, before its checkpoint."""
    from agentr1.rl.trainer import Trainer

    orig = Trainer.train_step

    def step(self, k):
        out = orig(self, k)
        if k == at:
            monkeypatch.setattr(Trainer, "train_step", orig)
            raise KeyboardInterrupt("killed")
        return out

    monkeypatch.setattr(Trainer, "train_step", step)


TRAIN = SimpleNamespace(run="grpo", resume=False)
RESUME = SimpleNamespace(run="grpo", resume=True)


# ------------------------------------------------------------------- item 7: kills and resumes
KILLED_CHILD = """
import os, signal, sys
from agentr1.config import Config
from agentr1.tracking.mlflow_adapter import stage_run
cfg = Config()
cfg.tracking.parent_run = False
with stage_run(cfg, "evaluate", run_name="evaluate@grpo") as run:
    print(run.run_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_stage_start_ends_the_runs_that_killed_processes_left_running(store, tmp_path):
    from agentr1.config import Config
    from agentr1.tracking.mlflow_adapter import stage_run

    child = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    orphan = child.stdout.split()[0]
    client = _client()
    assert client.get_run(orphan).info.status == "RUNNING"  # what kill -9 leaves
    assert client.get_run(orphan).data.tags["agentr1.pid"].isdigit()  # who ran it
    # a run whose process is alive (this one's sleeping child) and one of another host are left alone
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    cfg = Config()
    cfg.tracking.parent_run = False
    try:
        exp = client.get_experiment_by_name(f"agentr1-{cfg.profile}").experiment_id
        alive = client.create_run(
            exp,
            run_name="evaluate@grpo",
            tags={
                "agentr1.run_name": "evaluate@grpo",
                "agentr1.host": client.get_run(orphan).data.tags["agentr1.host"],
                "agentr1.pid": str(sleeper.pid),
            },
        ).info.run_id
        elsewhere = client.create_run(
            exp,
            run_name="evaluate@grpo",
            tags={"agentr1.run_name": "evaluate@grpo", "agentr1.host": "another-host", "agentr1.pid": str(_dead_pid())},
        ).info.run_id
        with stage_run(cfg, "evaluate", run_name="evaluate@grpo") as run:
            assert run.enabled
        assert client.get_run(orphan).info.status == "KILLED"
        assert "was gone" in client.get_run(orphan).data.tags["agentr1.ended_by"]
        assert client.get_run(alive).info.status == "RUNNING" and client.get_run(elsewhere).info.status == "RUNNING"
        assert client.get_run(run.run_id).info.status == "FINISHED"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_resume_continues_the_killed_run_and_logs_every_step_once(store, tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    _kill_after_step(monkeypatch, 2)  # step 2 is logged, the state is at step 1
    with pytest.raises(KeyboardInterrupt):
        stages.run("train", cfg, TRAIN)
    (killed,) = _runs(cfg, "train@grpo")
    run_id = killed.info.run_id
    assert _steps(run_id, "rollout/reward") == [1, 2]
    _as_after_kill_9(run_id)

    stages.run("train", cfg, RESUME)  # retrains step 2 from the state at step 1
    (run,) = _runs(cfg, "train@grpo")  # the same run, not a second one
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert _steps(run_id, "rollout/reward") == [1, 2]  # every step, once
    assert _steps(run_id, "dev/em") == [0, 2]
    assert "summary/reward_last3" in run.data.metrics and "agentr1.checkpoint_sha256" in run.data.tags
    assert json.loads((tmp_path / "runs" / "grpo" / "mlflow_run.json").read_text())["run_id"] == run_id


def test_resume_at_the_last_step_into_a_new_run_when_the_old_one_is_gone(store, tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    import agentr1.stages.train as train_stage

    orig = train_stage.curve_csv

    def killed(history):  # trained to the end (the state is at step 2), killed writing the outputs
        monkeypatch.setattr(train_stage, "curve_csv", orig)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(train_stage, "curve_csv", killed)
    with pytest.raises(KeyboardInterrupt):
        stages.run("train", cfg, TRAIN)
    (first,) = _runs(cfg, "train@grpo")
    _client().delete_run(first.info.run_id)  # gone from the store (deleted in the UI)

    stages.run("train", cfg, RESUME)  # nothing left to train
    (run,) = _runs(cfg, "train@grpo")
    assert run.info.run_id != first.info.run_id and run.info.status == "FINISHED"
    assert _steps(run.info.run_id, "rollout/reward") == [1, 2]  # replayed from the training state
    assert _steps(run.info.run_id, "dev/em") == [0, 2]


# ------------------------------------------------------------------- item 8: a locked store
def _lock_at_step(monkeypatch, db: Path, step: int, hold_s: float | None = None) -> StoreLock:
    """Lock the store when the trainer records step ``step`` (just before it logs the step's
    metrics); release it after ``hold_s``, or (``None``) once the step is recorded - logged, or
    given up, meanwhile."""
    from agentr1.rl.trainer import Trainer

    orig, lock = Trainer._record, StoreLock(db, hold_s or 60.0)

    def record(self, k, metrics):
        if k != step:
            return orig(self, k, metrics)
        lock.acquire()
        try:
            return orig(self, k, metrics)
        finally:
            if hold_s is None:
                lock.release()

    monkeypatch.setattr(Trainer, "_record", record)
    return lock


def test_train_keeps_its_work_when_the_store_stays_locked(store, tmp_path, monkeypatch, short_busy_wait, caplog):
    cfg = _cfg(tmp_path, retry_timeout_s=0.5)
    _lock_at_step(monkeypatch, store, 2)  # held through step 2's logging, longer than the retries
    with caplog.at_level(logging.WARNING):
        metrics = stages.run("train", cfg, TRAIN)  # no exception: the training is done and saved
    out = tmp_path / "runs" / "grpo"
    assert metrics["steps"] == 2 and (out / "checkpoint" / "model.safetensors").is_file()
    assert [line.split(",")[0] for line in (out / "curve.csv").read_text().splitlines()[1:]] == ["0", "1", "2"]
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))
    (run,) = _runs(cfg, "train@grpo")
    assert run.info.status == "FAILED"  # not FINISHED: `agentr1 track` logs it again from the outputs
    assert "database is locked" in run.data.tags["agentr1.tracking_error"]
    assert _steps(run.info.run_id, "rollout/reward") == [1]
    final = [r.getMessage() for r in caplog.records if "agentr1 track" in r.getMessage() and str(out) in r.getMessage()]
    assert len(final) == 1 and "train@grpo" in final[0] and "tracking failed" in final[0]


def test_train_rides_out_a_lock_shorter_than_the_retry_budget(store, tmp_path, monkeypatch, short_busy_wait):
    cfg = _cfg(tmp_path, retry_timeout_s=30)
    lock = _lock_at_step(monkeypatch, store, 2, hold_s=1.0)  # 10x the store's own wait
    stages.run("train", cfg, TRAIN)
    lock.release()
    (run,) = _runs(cfg, "train@grpo")
    assert run.info.status == "FINISHED" and "agentr1.tracking_error" not in run.data.tags
    assert _steps(run.info.run_id, "rollout/reward") == [1, 2]


def _lock_after_rollouts(monkeypatch, db: Path, hold_s: float | None = None) -> StoreLock:
    """Lock the store when the evaluation is done and its MLflow part starts; release it after
    ``hold_s`` or (``None``) when that part ends."""
    import agentr1.stages.evaluate as evaluate

    lock, log_outputs = StoreLock(db, hold_s or 60.0), evaluate.log_outputs

    def logged(*args, **kwargs):
        lock.acquire()
        try:
            return log_outputs(*args, **kwargs)
        finally:
            if hold_s is None:
                lock.release()

    monkeypatch.setattr(evaluate, "log_outputs", logged)
    return lock


def test_evaluate_keeps_a_finished_evaluation_when_the_store_stays_locked(
    store, tmp_path, monkeypatch, short_busy_wait, caplog
):
    cfg = _cfg(tmp_path, retry_timeout_s=0.5)
    _lock_after_rollouts(monkeypatch, store)
    with caplog.at_level(logging.WARNING):
        metrics = stages.run("evaluate", cfg, SimpleNamespace(policy="cold_start"))
    out = tmp_path / "eval" / "cold_start"
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(metrics))
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 2
    timing = json.loads((out / "timing.json").read_text())
    assert "database is locked" in timing["mlflow"]["error"] and "version" not in timing["mlflow"]
    (run,) = _runs(cfg, "evaluate_baseline@cold_start")
    assert run.info.status == "FAILED" and "database is locked" in run.data.tags["agentr1.tracking_error"]
    assert not _client().search_model_versions(f"name = '{cfg.tracking.registered_model}'")  # nothing half-registered
    assert any("agentr1 track" in r.getMessage() and str(out) in r.getMessage() for r in caplog.records)


def test_evaluate_rides_out_a_lock_shorter_than_the_retry_budget(store, tmp_path, monkeypatch, short_busy_wait):
    cfg = _cfg(tmp_path, retry_timeout_s=30)
    lock = _lock_after_rollouts(monkeypatch, store, hold_s=1.0)
    stages.run("evaluate", cfg, SimpleNamespace(policy="cold_start"))
    lock.release()
    timing = json.loads((tmp_path / "eval" / "cold_start" / "timing.json").read_text())
    assert "error" not in timing["mlflow"] and timing["mlflow"]["version"]
    (run,) = _runs(cfg, "evaluate_baseline@cold_start")
    assert run.info.status == "FINISHED"
    client = _client()
    assert client.get_model_version_by_alias(cfg.tracking.registered_model, "cold_start").run_id == run.info.run_id


def test_retry_gives_up_at_the_deadline_and_only_on_store_errors():
    from mlflow.exceptions import MlflowException

    from agentr1.tracking.retry import Deadline, TrackingFailed, is_transient, retrying

    calls = []

    def locked():
        calls.append(time.monotonic())
        raise MlflowException("(sqlite3.OperationalError) database is locked", error_code="TEMPORARILY_UNAVAILABLE")

    t0 = time.monotonic()
    with pytest.raises(TrackingFailed, match="metrics of run r1: .*database is locked.* after [0-9]+ attempts"):
        retrying(locked, what="metrics of run r1", deadline=Deadline(0.6))
    assert 0.5 <= time.monotonic() - t0 < 3 and len(calls) >= 2
    with pytest.raises(TrackingFailed):  # not transient: no retry
        retrying(
            lambda: (_ for _ in ()).throw(MlflowException("RESOURCE_DOES_NOT_EXIST")), what="x", deadline=Deadline(5)
        )
    with pytest.raises(TypeError):  # not the store's: raised as is
        retrying(lambda: (_ for _ in ()).throw(TypeError("bad metric")), what="x", deadline=Deadline(5))
    assert is_transient(MlflowException("Max retries exceeded with url: /api/2.0/mlflow/runs/log-batch"))
    assert is_transient(ConnectionRefusedError(111, "refused"))
    assert not is_transient(ValueError("database is locked"))
