"""Opening the MLflow tracking store under faults (issue 31, items 4 and 9): a first store
creation killed at any moment, a store an older version left half-created, and every kind of bad
store (damaged or foreign SQLite files, directories, failing or hanging servers, credentials in
the URI, databases without their driver) is a one-line :class:`StageError` naming the store and
the fix within about ``tracking.connect_timeout_s``."""

from __future__ import annotations

import base64
import http.server
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentr1.errors import StageError
from tracking_helpers import tracking_cfg

TIMEOUT_S = 1.0
BOUND_S = 3 * TIMEOUT_S + 5  # generous: a correctness check, not a benchmark


@pytest.fixture(autouse=True)
def _own_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test names its own store (connect() exports MLFLOW_TRACKING_URI; monkeypatch restores it)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("AGENTR1_ARTIFACT_ROOT", raising=False)
    monkeypatch.setenv("AGENTR1_PIPELINE_ID", "test-pipeline")
    for name in ("TIMEOUT", "MAX_RETRIES", "BACKOFF_FACTOR"):  # connect() sets them: restored after the test
        monkeypatch.setenv(f"MLFLOW_HTTP_REQUEST_{name}", "")
        monkeypatch.delenv(f"MLFLOW_HTTP_REQUEST_{name}")


def _connect(uri: str, tmp_path: Path):
    from agentr1.tracking.mlflow_adapter import connect

    os.environ["MLFLOW_TRACKING_URI"] = uri  # the env wins over tracking.uri, and connect() exports it
    return connect(tracking_cfg(uri, tmp_path / "art", connect_timeout_s=TIMEOUT_S))


def _log_a_run(uri: str, tmp_path: Path) -> None:
    """connect() opens the store and a run with a metric can be logged and read back."""
    client, _, exp_id = _connect(uri, tmp_path)
    run = client.create_run(exp_id)
    client.log_metric(run.info.run_id, "m", 1.5, step=3)
    client.set_terminated(run.info.run_id)
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "m")] == [(3, 1.5)]


def _expect_stage_error(uri: str, tmp_path: Path, *words: str) -> str:
    started = time.monotonic()
    with pytest.raises(StageError) as exc:
        _connect(uri, tmp_path)
    took = time.monotonic() - started
    msg = str(exc.value)
    assert took < BOUND_S, f"{took:.1f} s: {msg}"
    assert "\n" not in msg
    for word in words:
        assert word in msg, msg
    return msg


# ------------------------------------------------------------------ item 4: kill -9 at creation
CREATE = """
import sys
from agentr1.config import Config
from agentr1.tracking.mlflow_adapter import connect
cfg = Config()
cfg.tracking.uri = "sqlite:///" + sys.argv[1]
cfg.tracking.artifact_root = sys.argv[1] + ".artifacts"
connect(cfg)
"""


def _creating(db: Path) -> bool:
    """The first command has begun writing the schema (into the file, or a temporary one beside it)."""
    files = [db, *db.parent.glob(f".{db.name}.creating-*")] if db.parent.is_dir() else []
    for f in files:
        try:
            if f.stat().st_size > 0:
                return True
        except FileNotFoundError:
            pass
    return False


KILL_DELAYS_S = (0.0, 0.2, 0.5, 1.0, 2.0)  # after the first command began writing the schema


def _kill_after(proc: subprocess.Popen, db: Path, delay_s: float) -> None:
    deadline = time.monotonic() + 120
    while not _creating(db) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_kill_during_first_store_creation_leaves_a_usable_store(tmp_path: Path) -> None:
    """``kill -9`` of the first command at several moments of the store's creation (the
    processes run side by side to save their start-up time), then the store opens and logs."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "AGENTR1_ARTIFACT_ROOT")}
    dbs = [tmp_path / f"store{i}" / "mlflow.db" for i in range(len(KILL_DELAYS_S))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CREATE, str(db)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for db in dbs
    ]
    killers = [threading.Thread(target=_kill_after, args=args) for args in zip(procs, dbs, KILL_DELAYS_S)]
    for t in killers:
        t.start()
    for t in killers:
        t.join()
    failed = {}
    for db, delay in zip(dbs, KILL_DELAYS_S):
        try:
            _log_a_run(f"sqlite:///{db}", tmp_path)
        except Exception as exc:  # noqa: BLE001 - collected: every kill point is reported
            failed[delay] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        if list(db.parent.glob(f".{db.name}.creating-*")):  # a killed creator's temp file is cleared
            failed.setdefault(delay, "temporary file left")
    assert not failed, failed


def _half_created(db: Path) -> None:
    """What an interrupted first command of an older agentr1 left: MLflow's initial tables and
    ``datasets`` (a later migration's), no ``alembic_version`` and no rows."""
    import sqlalchemy
    from mlflow.store.db.utils import Base  # with every ORM model's table
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    InitialBase.metadata.create_all(engine)
    Base.metadata.tables["datasets"].create(engine)
    engine.dispose()


def test_half_created_store_is_moved_aside_and_recreated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    db = tmp_path / "mlflow.db"
    _half_created(db)
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    with pytest.raises(Exception, match="already exists"):  # the old failure: MLflow itself cannot open it
        SqlAlchemyStore(f"sqlite:///{copy}", str(tmp_path / "a"))
    before = db.read_bytes()
    with caplog.at_level(logging.WARNING, logger="agentr1.tracking.store"):
        _log_a_run(f"sqlite:///{db}", tmp_path)
    aside = list(tmp_path.glob("mlflow.db.broken-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == before
    assert str(db) in caplog.text and str(aside[0]) in caplog.text


def test_broken_store_with_data_is_never_touched(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    _half_created(db)
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO experiments (experiment_id, name, lifecycle_stage) VALUES (1, 'mine', 'active')")
    before = db.read_bytes()
    _expect_stage_error(f"sqlite:///{db}", tmp_path, str(db), "no schema version", "mv ")
    assert db.read_bytes() == before and not list(tmp_path.glob("mlflow.db.broken-*"))


def test_two_first_commands_at_once_share_one_store(tmp_path: Path) -> None:
    """Three creators of the same new store at once (threads: the lock is a file lock, so
    processes are alike): all succeed, one complete store, no temporary file left."""
    from agentr1.tracking.store import check_sqlite, check_store

    db = tmp_path / "mlflow.db"
    errors: list[BaseException] = []

    def create() -> None:
        try:
            check_store(f"sqlite:///{db}", TIMEOUT_S)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert check_sqlite(db, f"sqlite:///{db}") == "ok"
    assert not list(tmp_path.glob(".mlflow.db.creating-*")) and not list(tmp_path.glob("*.broken-*"))


# ------------------------------------------------------------------------- item 9: bad stores
def test_garbage_store_file(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    db.write_bytes(os.urandom(4096))
    _expect_stage_error(f"sqlite:///{db}", tmp_path, f"sqlite:///{db}", "not a SQLite database", "mv ")


def test_truncated_store_file(tmp_path: Path) -> None:
    full = tmp_path / "full.db"
    with sqlite3.connect(full) as con:
        con.execute("CREATE TABLE experiments (experiment_id INTEGER, name TEXT)")
        con.executemany("INSERT INTO experiments VALUES (?, ?)", [(i, "x" * 400) for i in range(3000)])
    db = tmp_path / "mlflow.db"
    db.write_bytes(full.read_bytes()[: 40 * 1024])
    _expect_stage_error(f"sqlite:///{db}", tmp_path, str(db), "damaged", "mv ")


def test_foreign_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE notes (x TEXT)")
    before = db.read_bytes()
    _expect_stage_error(f"sqlite:///{db}", tmp_path, str(db), "not an MLflow store", "tracking.uri")
    assert db.read_bytes() == before


@pytest.mark.parametrize("kind", ["directory", "root"])
def test_directory_as_store(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "mlflow.db" if kind == "directory" else tmp_path
    path.mkdir(exist_ok=True)
    _expect_stage_error(f"sqlite:///{path}", tmp_path, str(path), "is a directory", "tracking.uri")


@pytest.mark.parametrize("scheme", ["postgresql", "mysql", "mssql"])
def test_database_without_its_driver(tmp_path: Path, scheme: str) -> None:
    from sqlalchemy.engine import make_url

    uri = f"{scheme}://alice:s3cret@127.0.0.1:1/mlflow"
    try:
        make_url(uri).get_dialect().import_dbapi()
        pytest.skip(f"the {scheme} driver is installed here")
    except ImportError:
        pass
    msg = _expect_stage_error(uri, tmp_path, f"{scheme}://***@127.0.0.1:1/mlflow", "pip install")
    assert "s3cret" not in msg


# ---------------------------------------------------------------------------- item 9: servers
class _Handler(http.server.BaseHTTPRequestHandler):
    """``/health`` 200; the API: 500 (``mode`` "500"), no answer (``hang``) or MLflow's 404 for an
    unknown experiment (``ok``), after checking Basic auth when the server wants it."""

    mode = "500"
    auth: str | None = None
    seen: list[str] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append(self.headers.get("Authorization") or "")
        if self.auth and self.headers.get("Authorization") != self.auth:
            self._send(401, b"{}")
        elif self.path == "/health":
            self._send(200, b"OK")
        elif self.mode == "hang":
            self.server.release.wait(30)  # bounded: released when the test ends
        elif self.mode == "ok":
            self._send(404, b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}')
        else:
            self._send(500, b"<html>Internal Server Error</html>")

    do_POST = do_GET

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server():
    servers = []

    def start(mode: str, auth: str | None = None) -> tuple[str, list[str]]:
        handler = type("H", (_Handler,), {"mode": mode, "auth": auth, "seen": []})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        srv.release = threading.Event()
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        return f"127.0.0.1:{srv.server_address[1]}", handler.seen

    yield start
    for srv in servers:
        srv.release.set()
        srv.shutdown()
        srv.server_close()


def test_server_healthy_but_api_failing(server, tmp_path: Path) -> None:
    host, _ = server("500")
    _expect_stage_error(f"http://{host}", tmp_path, f"http://{host}", "HTTP 500", "mlflow server")


def test_server_healthy_but_api_hanging(server, tmp_path: Path) -> None:
    host, _ = server("hang")
    _expect_stage_error(f"http://{host}", tmp_path, f"http://{host}", f"within {TIMEOUT_S:g} s")


def test_credentials_in_the_uri_are_used_and_never_shown(server, tmp_path: Path, caplog) -> None:
    from agentr1.tracking.mlflow_adapter import check_reachable

    auth = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    host, seen = server("ok", auth=auth)
    with caplog.at_level(logging.DEBUG):
        check_reachable(f"http://alice:s3cret@{host}", TIMEOUT_S)  # reachable: the URI's credentials are sent
        assert seen and set(seen) == {auth}
        msg = _expect_stage_error(f"http://alice:wrong@{host}", tmp_path, f"http://***@{host}", "credentials")
    assert "wrong" not in msg and "alice" not in msg and "s3cret" not in caplog.text


def test_mlflow_http_client_is_bounded_unless_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.environment_variables import (
        MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR,
        MLFLOW_HTTP_REQUEST_MAX_RETRIES,
        MLFLOW_HTTP_REQUEST_TIMEOUT,
    )

    from agentr1.config import Config
    from agentr1.tracking.store import bound_http_client

    cfg = Config()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "5")
    bound_http_client(cfg.tracking)
    assert MLFLOW_HTTP_REQUEST_TIMEOUT.get() == cfg.tracking.http_timeout_s
    assert MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.get() == cfg.tracking.http_backoff_factor
    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 5  # the user's own setting wins
