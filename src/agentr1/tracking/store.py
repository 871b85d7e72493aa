"""Open the MLflow tracking store safely: check it before MLflow touches it, and create a new
SQLite store atomically.

One module of more than 400 lines on purpose: :func:`check_store` is its one entry, and every kind of store it
dispatches to ends the same way, usable or a :class:`StageError` naming the redacted store and its fix; most lines
are SQLite, whose check and atomic create share the ``ok``/``missing``/``half`` states (re-read under the create
lock) and the ``.creating-*`` temporary names, so the two cannot be split apart.

Why: MLflow turns a bad store into a raw SQLAlchemy traceback after minutes of retries (its
engine retries ten times with exponential backoff, about 100 s), and its REST client retries a
failing server for about 250 s per call. A ``kill -9`` while MLflow creates a SQLite store's
schema leaves a half-created file that every later command fails on ("table ... already
exists"). Here each case is a :class:`StageError` naming the store and the fix, within about
``tracking.connect_timeout_s``:

* SQLite (:func:`check_sqlite`): a directory at the path, a file that is not a SQLite database
  (garbage, truncated: header and ``PRAGMA quick_check`` with the stdlib ``sqlite3``). A missing or
  empty file is created by :func:`create_sqlite`: MLflow builds the schema into a temporary file
  beside the target, which is then published with ``os.link`` (atomic; it fails when another
  creator won, whose file is then used) under a file lock (``filelock``), so a kill at any moment
  leaves either no store or a complete one. A store an older version left half-created (tables,
  an incomplete ``alembic_version``, no data) is moved aside to ``<db>.broken-<time>`` and created
  again; one that holds data is never touched.
* A server (:func:`check_server`): ``GET /health`` and one cheap API call (``experiments/get-by-name``)
  through MLflow's own REST client (so credentials in the URI or ``MLFLOW_TRACKING_USERNAME`` /
  ``_TOKEN`` are used as MLflow uses them), each bounded by the timeout, without retries; and
  MLflow's HTTP client bounded for the rest of the process (:func:`bound_http_client`).
* Other databases (:func:`check_driver`): the SQLAlchemy dialect's DBAPI module must import; else
  the pip package to install is named.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agentr1.errors import StageError
from agentr1.tracking.redact import redact_uri
from agentr1.tracking.uri import sqlite_path

if TYPE_CHECKING:
    from agentr1.config.tracking import TrackingConfig

log = logging.getLogger(__name__)

SQLITE_HEADER = b"SQLite format 3\x00"
CREATE_LOCK_TIMEOUT_S = 300.0  # another process creating the store (a few seconds normally)
# tables whose rows are a user's data: a store holding any is never moved aside
DATA_TABLES = ("runs", "registered_models", "model_versions", "logged_models", "trace_info", "datasets")
# the DBAPI module a SQLAlchemy dialect imports -> the pip package that provides it
DRIVER_PACKAGES = {
    "psycopg2": "psycopg2-binary",
    "psycopg": "psycopg[binary]",
    "pg8000": "pg8000",
    "asyncpg": "asyncpg",
    "MySQLdb": "mysqlclient",
    "pymysql": "pymysql",
    "mysql": "mysql-connector-python",
    "mariadb": "mariadb",
    "pyodbc": "pyodbc",
    "pymssql": "pymssql",
}
DB_SCHEMES = ("postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy stores besides sqlite
# MLflow's HTTP client: (environment variable, TrackingConfig field); a user's own setting wins
HTTP_ENV = (
    ("MLFLOW_HTTP_REQUEST_TIMEOUT", "http_timeout_s"),
    ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "http_retries"),
    ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "http_backoff_factor"),
)


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


# ------------------------------------------------------------------------------------- entry
def check_store(uri: str, timeout_s: float = 5.0, create: bool = True) -> bool:
    """Check the store ``uri`` names (module docstring) and, with ``create``, create a missing
    SQLite store. Returns whether the store exists now (False only for a SQLite store that is
    missing, empty or half-created when ``create`` is False). :class:`StageError` naming the
    store and the fix when it cannot be used."""
    if is_server(uri):
        check_server(uri, timeout_s)
        return True
    db = sqlite_path(uri)
    if db is None:
        check_driver(uri)
        return True
    state = check_sqlite(db, uri, timeout_s)
    if state == "ok":
        if create:
            _clear_leftovers(db)
        return True
    if not create:
        return False
    create_sqlite(db, uri, timeout_s)
    return True


def bound_http_client(tracking: TrackingConfig) -> None:
    """Bound MLflow's own HTTP client for the rest of the process (its defaults: 120 s per request
    and 7 retries with backoff, about 250 s against a failing server) from ``tracking.http_*``;
    an environment variable the user set wins."""
    for env, field in HTTP_ENV:
        if env not in os.environ:
            os.environ[env] = str(int(getattr(tracking, field)))  # MLflow parses them as int


def db_errors() -> tuple[type[Exception], ...]:
    """What MLflow's SQL stores raise unwrapped (SQLAlchemy, alembic, sqlite3 errors)."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    try:
        from alembic.util.exc import CommandError
    except ImportError:  # alembic ships with mlflow's SQL stores; be safe
        return (SQLAlchemyError, sqlite3.Error)
    return (SQLAlchemyError, sqlite3.Error, CommandError)


def store_error(uri: str, exc: Exception) -> StageError:
    """A :class:`StageError` for an error MLflow raised while opening ``uri``: the store, the
    cause (redacted, one line) and the fix."""
    cause = redact_uri(" ".join(str(exc).split()))[:400]
    db = sqlite_path(uri)
    fix = (
        f"if {db} is damaged or from another MLflow version, back it up and run `mlflow db upgrade "
        f"{redact_uri(uri)}`, or move it aside to start a new store"
        if db is not None
        else "check the store and its server's log, or point MLFLOW_TRACKING_URI / tracking.uri at another store"
    )
    return StageError(
        f"MLflow tracking store {redact_uri(uri)} could not be opened ({type(exc).__name__}: {cause}): {fix}"
    )


# ------------------------------------------------------------------------------------ SQLite
def _fix(db: Path) -> str:
    return (
        f"move it aside (`mv {db} {db}.bad`) to start a new store, restore it from a backup, or point "
        f"tracking.uri / MLFLOW_TRACKING_URI at another sqlite:///<file> or server"
    )


def check_sqlite(db: Path, uri: str, timeout_s: float = 5.0) -> str:
    """The state of SQLite store ``db``: ``ok`` (a complete store, or one with data: MLflow
    decides), ``missing`` (no file, an empty file or one without tables) or ``half`` (only
    MLflow's tables, an incomplete schema and no data: safe to recreate). :class:`StageError` for
    a directory, a file that is not a sound SQLite database, another program's database, or
    data without a schema version. Reads only (a hot journal is rolled back)."""
    name = f"MLflow tracking store {redact_uri(uri)}"
    if db.is_dir():
        raise StageError(
            f"{name}: {db} is a directory, not a database file: set tracking.uri (or "
            f"MLFLOW_TRACKING_URI) to a file, e.g. sqlite:///{db / 'mlflow.db'}"
        )
    if not db.exists():
        return "missing"
    if not db.is_file():
        raise StageError(f"{name}: {db} is not a regular file: point tracking.uri at a database file")
    try:
        with db.open("rb") as fh:
            header = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StageError(f"{name}: cannot read {db} ({exc}): fix its permissions") from None
    if not header:
        return "missing"  # an empty file: sqlite's own view of a new database
    if header != SQLITE_HEADER:
        raise StageError(f"{name}: {db} is not a SQLite database (its header is not 'SQLite format 3'): {_fix(db)}")
    try:
        con = sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=timeout_s)
    except sqlite3.Error as exc:
        raise StageError(f"{name}: cannot open {db} ({exc}): check its permissions") from None
    try:
        return _schema_state(con, db, name)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return "ok"  # another writer holds it: an existing store, MLflow waits for it
        raise StageError(f"{name}: {db} cannot be read ({exc}): {_fix(db)}") from None
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        raise StageError(f"{name}: {db} is damaged or truncated ({exc}): {_fix(db)}") from None
    finally:
        con.close()


def _schema_state(con: sqlite3.Connection, db: Path, name: str) -> str:
    """:func:`check_sqlite`'s answer for the open, sound SQLite file ``db``: which tables and which
    schema version it holds, and whether it holds data."""
    problems = [row[0] for row in con.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise StageError(f"{name}: {db} is damaged (PRAGMA quick_check: {'; '.join(problems[:3])}): {_fix(db)}")
    tables = {
        row[0]
        for row in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        )
    }
    if not tables:
        return "missing"
    known = _mlflow_tables()
    if not tables & known:
        raise StageError(
            f"{name}: {db} is a SQLite database but not an MLflow store (tables: "
            f"{', '.join(sorted(tables)[:5])}): point tracking.uri / MLFLOW_TRACKING_URI at "
            f"another file (e.g. sqlite:///mlflow/mlflow.db); it is left as it is"
        )
    revision = None
    if "alembic_version" in tables:
        row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        revision = row[0] if row else None
    if revision is not None and revision == _head_revision():
        return "ok"
    foreign = {t for t in tables - known if not t.startswith("_alembic_tmp_")}
    if not _has_data(con, tables):
        return "ok" if foreign else "half"
    if revision is None:  # runs or models, but no schema version: no migration can fix it
        raise StageError(
            f"{name}: {db} holds runs or models but no schema version (alembic_version), so "
            f"MLflow cannot open or upgrade it; it is left as it is: back it up, then move it aside "
            f"(`mv {db} {db}.bad`) to start a new store, or point tracking.uri at another store"
        )
    return "ok"  # an older schema with data: MLflow's upgrade path (`mlflow db upgrade`), errors named


def _has_data(con: sqlite3.Connection, tables: set[str]) -> bool:
    """Any run, model, trace or dataset, or an experiment besides MLflow's ``Default`` (id 0)."""
    if "experiments" in tables and con.execute("SELECT 1 FROM experiments WHERE experiment_id != 0 LIMIT 1").fetchone():
        return True
    return any(con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() for t in DATA_TABLES if t in tables)


def _mlflow_tables() -> set[str]:
    """Every table of this MLflow's schema, and alembic's bookkeeping table."""
    from mlflow.store.db.utils import Base  # imports every ORM model (MLflow's own _all_tables_exist)

    return set(Base.metadata.tables) | {"alembic_version"}


def _head_revision() -> str:
    """The schema revision this MLflow creates (its newest alembic migration)."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def create_sqlite(db: Path, uri: str, timeout_s: float = 5.0) -> None:
    """Create SQLite store ``db`` atomically (module docstring), under a lock beside it; a
    half-created one is moved aside first (warned). Nothing happens when another process
    created a sound store meanwhile."""
    from filelock import FileLock, Timeout

    name = f"MLflow tracking store {redact_uri(uri)}"
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StageError(f"{name}: cannot create {db.parent} ({exc}): fix the path or its permissions") from None
    lock = FileLock(str(db) + ".init-lock", timeout=CREATE_LOCK_TIMEOUT_S)
    try:
        with lock:
            state = check_sqlite(db, uri, timeout_s)  # again: another creator may have won
            if state == "ok":
                return
            _remove_temps(db)
            if state == "half":
                aside = db.with_name(f"{db.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
                os.replace(db, aside)
                for side in ("-journal", "-wal", "-shm"):
                    Path(str(db) + side).unlink(missing_ok=True)
                log.warning(
                    "%s: %s held a half-created schema and no data (an interrupted first command): "
                    "moved it to %s and creating the store again",
                    name,
                    db,
                    aside,
                )
            _publish(_build(db), db)
    except Timeout:
        raise StageError(
            f"{name}: another process has been creating {db} for {CREATE_LOCK_TIMEOUT_S:.0f} s "
            f"(lock {lock.lock_file}): wait for it, or stop it and run again"
        ) from None
    except OSError as exc:
        raise StageError(f"{name}: cannot create {db} ({exc}): fix the path or its permissions") from None


def _remove_temps(db: Path) -> None:
    """Remove the temporary files of killed creators (call with the creation lock held)."""
    for stale in db.parent.glob(f".{db.name}.creating-*"):
        stale.unlink(missing_ok=True)


def _clear_leftovers(db: Path) -> None:
    """A creator killed between publishing the store and removing its temporary file left that
    file: removed when no creation is under way (the lock is free), else left for later."""
    if not any(db.parent.glob(f".{db.name}.creating-*")):
        return
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(db) + ".init-lock", timeout=0):
            _remove_temps(db)
    except (Timeout, OSError):
        pass


def _build(db: Path) -> Path:
    """A complete MLflow schema in a temporary file beside ``db`` (MLflow's own store init)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.utils import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH

    tmp = db.with_name(f".{db.name}.creating-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    store = SqlAlchemyStore(f"sqlite:///{tmp}", DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    store.engine.dispose()  # every connection closed: the file is complete on its own
    return tmp


def _publish(tmp: Path, db: Path) -> None:
    """Put ``tmp`` at ``db`` in one step: ``os.link`` when ``db`` is absent (fails when it
    appeared), ``os.replace`` over an empty file (held under the lock); ``tmp`` removed."""
    try:
        if db.exists():
            os.replace(tmp, db)
        else:
            try:
                os.link(tmp, db)
            except FileExistsError:
                pass  # another creator (not using our lock) won: its store is used
    finally:
        for side in ("", "-journal", "-wal", "-shm"):
            Path(str(tmp) + side).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ server
def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """``GET /health`` then ``GET experiments/get-by-name`` answer (200, or the API's own 404 for
    an unknown experiment) within ``timeout_s`` each, through MLflow's REST client without
    retries; else :class:`StageError` naming the (redacted) URI."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    creds = get_default_host_creds(uri)
    shown = redact_uri(uri)
    fix = (
        "Start it (e.g. `mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri "
        "sqlite:///mlflow/mlflow.db`) or point MLFLOW_TRACKING_URI / tracking.uri at a reachable server or a sqlite:/// store."
    )
    probes = (
        ("/health", None, {200}),  # then one cheap API call: 404 is its answer for an unknown name
        ("/api/2.0/mlflow/experiments/get-by-name", {"experiment_name": "Default"}, {200, 404}),
    )
    for endpoint, params, ok in probes:
        try:
            resp = http_request(
                creds,
                endpoint,
                "GET",
                max_retries=0,
                backoff_factor=0,
                backoff_jitter=0,
                timeout=timeout_s,
                raise_on_status=False,
                params=params,
            )
        except Exception as exc:  # noqa: BLE001 - requests/urllib3/MLflow errors alike: the server is unusable
            problem = f"{type(exc).__name__}: {exc}"
            raise StageError(
                f"MLflow tracking server {shown} is unreachable or does not answer within "
                f"{timeout_s:g} s at {endpoint} ({redact_uri(problem)[:300]}). {fix}"
            ) from None
        if resp.status_code in (401, 403):
            raise StageError(
                f"MLflow tracking server {shown} refused the credentials (HTTP {resp.status_code} at "
                f"{endpoint}): set them in the URI (http://user:password@host) or MLFLOW_TRACKING_USERNAME"
                f" / MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
            )
        if resp.status_code not in ok:
            raise StageError(
                f"MLflow tracking server {shown} answers HTTP {resp.status_code} at {endpoint}: the "
                f"server is up but failing (check its log and its backend store). {fix}"
            )


# ---------------------------------------------------------------------------------- other DBs
def check_driver(uri: str) -> None:
    """A ``postgresql://`` / ``mysql://`` / ``mssql://`` store: its SQLAlchemy dialect and DBAPI
    driver import, else :class:`StageError` naming the pip package. Other schemes are MLflow's."""
    scheme = uri.split(":", 1)[0].lower()
    if scheme.split("+", 1)[0] not in DB_SCHEMES:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    shown = redact_uri(uri)
    try:
        dialect = make_url(uri).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise StageError(
            f"MLflow tracking store {shown}: not a usable database URL ({redact_uri(str(exc))}): use "
            f"e.g. postgresql://user:password@host:5432/mlflow"
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        module = (getattr(exc, "name", None) or "").split(".")[0]
        package = DRIVER_PACKAGES.get(module, module or "the database driver")
        raise StageError(
            f"MLflow tracking store {shown}: the {scheme} driver is not installed (cannot import "
            f"{module or exc}): `pip install {package}` in this environment, or use a sqlite:/// store"
        ) from None
