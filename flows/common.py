"""Shared pieces of the Prefect flows: a subprocess runner that streams to the Prefect logger,
the definition of a *transient* failure, and the artifact builders (metrics, MLflow run links).

The flows orchestrate; they never re-implement a stage. Everything they run is a command a user
could type (``dvc repro``, ``dvc exp run --queue``, ``dvc push``, ``agentr1 promote``).
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentr1.tracking.redact import redact_uri
from agentr1.tracking.uri import sqlite_path

log = logging.getLogger("agentr1.flows")

# Output lines kept for the error message of a failed command.
ERROR_TAIL_LINES = 40

# A failure is *transient* when retrying the same command can succeed without anyone changing
# anything: another process holds DVC's repo lock or the SQLite store, or the network / an
# S3-compatible or MLflow server hiccupped. Everything else (bad params, a failed validation, a
# bug, a stage killed by our own timeout) is deterministic and is NOT retried: it would fail again
# and only delay the report.
#
# The patterns are exact error phrases, matched line by line on the command's *stderr* only, so
# ordinary stage output ("step 503/1000", "eval n=504", "timeout_s must be > 0") never matches:
# a bare number or the word "timeout" is not an error. Lines logged at DEBUG/INFO/WARNING level
# are skipped too (a warning about a retry that then succeeded is not why the command failed).
# Deliberately NOT transient: "Name or service not known" (a misspelled host fails the same way
# every time) and HTTP 500 (a server bug, not an overload).
TRANSIENT_PATTERNS: tuple[str, ...] = (
    # DVC: repository lock held by another dvc process
    r"\bUnable to acquire lock\b",
    r"\bLockError\b",
    # SQLite (MLflow backend store, DVC's state db): another writer holds the file
    r"\bdatabase is locked\b",
    # botocore / urllib3 / requests / OS socket errors
    r"\bEndpointConnectionError\b",
    r"\bCould not connect to the endpoint URL\b",
    r"\b(Connect|Read) timeout on endpoint URL\b",
    r"\b(ConnectTimeoutError|ReadTimeoutError|ConnectTimeout|ReadTimeout)\b",
    r"\bConnection (refused|reset by peer|aborted)",
    r"\b(ConnectionRefusedError|ConnectionResetError|ConnectionAbortedError|RemoteDisconnected)\b",
    r"\bRemote end closed connection without response\b",
    r"\bTemporary failure in name resolution\b",
    r"\b(Read|Connection) timed out\b",
    # HTTP 502/503/504 (and 429) in an error phrase, never a bare number
    r"\b50[234] (Server Error|Bad Gateway|Service Unavailable|Gateway Time-?out)\b",
    r"\b429 (Client Error|Too Many Requests)\b",
    r"\bHTTP Error (429|50[234])\b",
    r"\b(status|status code|status_code|error code)[ =:]+(429|50[234])\b",
    r"\btoo many (429|50[234]) error responses\b",
    # S3 / AWS error codes: botocore's "An error occurred (<code>) when calling ..."
    r"An error occurred \((50[234]|SlowDown|ServiceUnavailable|RequestTimeout|Throttling"
    r"|ThrottlingException|TooManyRequestsException|RequestLimitExceeded|InternalError)\)",
)
_TRANSIENT_RE = re.compile("|".join(f"(?:{p})" for p in TRANSIENT_PATTERNS))
# "2026-12-01 12:00:00,123 INFO name: ...", "INFO: ...", "[WARNING] ...": a log record, not the error
_NON_ERROR_LOG_RE = re.compile(r"^\s*(?:[\d:,.T+\-]+\s+){0,2}\[?(?:DEBUG|INFO|WARNING|WARN)\]?[\s:]")


class CommandError(RuntimeError):
    """A command exited non-zero. ``str()`` carries the command, exit code and the output tail
    (stderr first), so the Prefect flow run's failure message shows the stage's own error."""

    def __init__(self, cmd: Sequence[str], returncode: int, cwd: str, stderr_tail: str, output_tail: str) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.cwd = cwd
        self.stderr_tail = stderr_tail
        self.output_tail = output_tail
        shown = stderr_tail.strip() or output_tail.strip() or "(no output)"
        super().__init__(f"`{' '.join(self.cmd)}` failed with exit code {returncode} (in {cwd}):\n{shown}")

    @property
    def transient(self) -> bool:
        # stderr only: stdout is the stage's ordinary output (progress, metrics)
        return is_transient(self.stderr_tail)


def is_transient(text: str) -> bool:
    """True when a line of ``text`` (a command's stderr) is a known lock or network error
    (``TRANSIENT_PATTERNS``); DEBUG/INFO/WARNING log lines are ignored."""
    return any(_TRANSIENT_RE.search(line) and not _NON_ERROR_LOG_RE.match(line) for line in text.splitlines())


def retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry a failed task only on a transient CommandError
    (or a plain OSError such as a dropped connection); fail fast on everything else."""
    try:
        state.result()
    except CommandError as exc:
        return exc.transient
    except (ConnectionError, TimeoutError):
        return True
    except Exception:  # noqa: BLE001 - deterministic failure: no retry
        return False
    return False


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The Prefect run logger inside a flow/task run, else a plain module logger."""
    try:
        from prefect import get_run_logger

        return get_run_logger()
    except Exception:  # noqa: BLE001 - MissingContextError outside a run
        return log


def command_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for child commands: ours, with this interpreter's bin folder first on PATH
    (so `dvc` and `agentr1` of the worker's venv are found even if PATH lacks it), plus extras."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("GX_ANALYTICS_ENABLED", "false")
    if extra:
        env.update(extra)
    return env


@dataclass
class CommandResult:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_command(
    cmd: Sequence[str],
    cwd: str | os.PathLike[str] = ".",
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    logger: logging.Logger | logging.LoggerAdapter | None = None,
    check: bool = True,
) -> CommandResult:
    """Run ``cmd`` in ``cwd``, streaming each stdout/stderr line to the (Prefect) logger as it
    arrives. Raises :class:`CommandError` on a non-zero exit (``check=True``) and on timeout.

    The child runs in its own process group so a timeout or a cancelled flow run kills the whole
    tree (``dvc repro`` spawns the stage command, which may spawn more).
    """
    logger = logger or run_logger()
    cmd = [str(c) for c in cmd]
    cwd = str(cwd)
    logger.info("$ %s  (cwd=%s)", " ".join(cmd), cwd)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=command_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        bufsize=1,
        start_new_session=True,
    )
    out_lines: list[str] = []
    err_lines: list[str] = []
    tail: collections.deque[str] = collections.deque(maxlen=ERROR_TAIL_LINES)
    err_tail: collections.deque[str] = collections.deque(maxlen=ERROR_TAIL_LINES)
    lock = threading.Lock()

    def pump(stream: Any, store: list[str], is_err: bool) -> None:
        for raw in iter(stream.readline, ""):
            line = raw.rstrip("\n")
            with lock:
                store.append(line)
                tail.append(line)
                if is_err:
                    err_tail.append(line)
            if line.strip():
                logger.info("%s%s", "[stderr] " if is_err else "", line)
        stream.close()

    threads = [
        threading.Thread(target=pump, args=(proc.stdout, out_lines, False), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, err_lines, True), daemon=True),
    ]
    for t in threads:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except BaseException:  # cancellation / KeyboardInterrupt: do not leave orphans behind
        _kill_group(proc)
        raise
    for t in threads:
        t.join(timeout=10)
    seconds = time.monotonic() - t0
    result = CommandResult(cmd, proc.returncode, "\n".join(out_lines), "\n".join(err_lines), seconds)
    if timed_out:
        err_tail.append(f"timed out after {timeout_s:.0f} s and was killed")
        raise CommandError(
            cmd, proc.returncode if proc.returncode is not None else -9, cwd, "\n".join(err_tail), "\n".join(tail)
        )
    logger.info("exit %d after %.1f s: %s", proc.returncode, seconds, " ".join(cmd))
    if check and proc.returncode != 0:
        raise CommandError(cmd, proc.returncode, cwd, "\n".join(err_tail), "\n".join(tail))
    return result


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------------ metrics
Scalar = int | float | bool | str | None


def flatten(data: Any, prefix: str = "", max_depth: int | None = None) -> dict[str, Scalar]:
    """Nested dict -> ``{"a.b.c": leaf}`` keeping scalar leaves (lists of scalars are joined)."""
    out: dict[str, Scalar] = {}

    def walk(node: Any, path: list[str]) -> None:
        if isinstance(node, Mapping):
            if max_depth is not None and len(path) >= max_depth:
                return
            for k, v in node.items():
                walk(v, path + [str(k)])
        elif isinstance(node, (list, tuple)):
            if all(isinstance(x, (int, float, str, bool)) or x is None for x in node):
                out[".".join(path)] = ", ".join(str(x) for x in node)
        else:
            out[".".join(path)] = node

    walk(data, [prefix] if prefix else [])
    return out


def fmt(value: Scalar) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


def read_dvc_metrics(project_dir: str | os.PathLike[str], fallback: Iterable[str] = ()) -> dict[str, Any]:
    """The pipeline's metrics files, ``{path: parsed JSON}``, from ``dvc metrics show --json``
    (so every stage's declared metrics appear, present and future). If DVC cannot answer, the
    ``fallback`` paths are read directly."""
    try:
        res = run_command(["dvc", "metrics", "show", "--json"], project_dir, logger=log)
        parsed = json.loads(res.stdout or "{}")
        files: dict[str, Any] = {}
        for rev in parsed.values():
            for path, entry in (rev.get("data") or {}).items():
                if isinstance(entry, Mapping) and "data" in entry:
                    files[path] = entry["data"]
        if files:
            return dict(sorted(files.items()))
    except (CommandError, json.JSONDecodeError, OSError) as exc:
        log.warning("dvc metrics show failed (%s); reading the known metrics files", exc)
    files = {}
    for rel in fallback:
        p = Path(project_dir) / rel
        if p.is_file():
            try:
                files[rel] = json.loads(p.read_text())
            except json.JSONDecodeError as exc:
                files[rel] = {"error": f"unreadable JSON: {exc}"}
    return files


def metrics_table(files: Mapping[str, Any], max_depth: int | None = None) -> list[dict[str, str]]:
    """Rows ``{file, metric, value}`` of every scalar leaf (for a Prefect table artifact)."""
    rows = []
    for path, data in files.items():
        for key, value in flatten(data, max_depth=max_depth).items():
            rows.append({"file": path, "metric": key, "value": fmt(value)})
    return rows


# ------------------------------------------------------------------------------------ MLflow
def tracking_store(project_dir: str | os.PathLike[str], tracking_uri: str | None = None) -> str | None:
    """The MLflow store of the project's stages, by :func:`agentr1.tracking.uri.resolve_tracking_uri`
    with the project's ``params.yaml``: the flow parameter, else ``MLFLOW_TRACKING_URI``, else
    ``tracking.uri`` (a relative ``sqlite:///`` path resolved against the project). None, with a
    warning, when the params cannot be read (there is then no store to name)."""
    from agentr1.config import ConfigError, load_config
    from agentr1.tracking.uri import resolve_tracking_uri

    try:
        cfg = load_config(Path(project_dir) / "params.yaml")
    except ConfigError as exc:
        log.warning("no MLflow links: %s", exc)
        return None
    return resolve_tracking_uri(cfg, tracking_uri, project_dir)


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    if tracking_uri.startswith(("http://", "https://")):
        return f"{redact_uri(tracking_uri).rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"runs:/{run_id}"


def mlflow_runs_since(
    tracking_uri: str | None, since_ms: int, max_runs: int = 50
) -> tuple[list[dict[str, str]], str | None]:
    """MLflow runs started at or after ``since_ms`` (the stages this flow ran), as link rows.
    Returns ``(rows, note)``; never raises: a missing or unreachable store becomes the note."""
    if not tracking_uri:
        return [], "no MLflow tracking URI configured (set MLFLOW_TRACKING_URI or the flow's tracking_uri)"
    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():  # reading must not create an empty store
        return [], f"no MLflow store at {db} yet (no stage has logged to it)"
    if tracking_uri.startswith(("http://", "https://")):
        # MLflow's HTTP client retries for minutes; a short health probe keeps the flow quick
        import urllib.request

        try:
            urllib.request.urlopen(f"{tracking_uri.rstrip('/')}/health", timeout=5).close()
        except Exception as exc:  # noqa: BLE001
            return (
                [],
                f"could not read MLflow runs from {redact_uri(tracking_uri)}: server unreachable ({redact_uri(str(exc))})",
            )
    try:
        from mlflow import MlflowClient
        from mlflow.entities import ViewType

        client = MlflowClient(tracking_uri=tracking_uri)
        exps = client.search_experiments(view_type=ViewType.ACTIVE_ONLY)
        if not exps:
            return [], f"no experiments in {redact_uri(tracking_uri)}"
        runs = client.search_runs(
            [e.experiment_id for e in exps],
            filter_string=f"attributes.start_time >= {int(since_ms)}",
            max_results=max_runs,
            order_by=["attributes.start_time ASC"],
        )
    except Exception as exc:  # noqa: BLE001 - links are a convenience; never fail the flow
        return (
            [],
            f"could not read MLflow runs from {redact_uri(tracking_uri)}: {type(exc).__name__}: {redact_uri(str(exc))}",
        )
    names = {e.experiment_id: e.name for e in exps}
    rows = []
    for r in runs:
        rows.append(
            {
                "run": r.info.run_name or r.info.run_id,
                "stage": r.data.tags.get("agentr1.stage", ""),
                "experiment": names.get(r.info.experiment_id, r.info.experiment_id),
                "status": r.info.status,
                "url": run_url(tracking_uri, r.info.experiment_id, r.info.run_id),
            }
        )
    note = None if rows else f"no MLflow runs started during this flow run in {redact_uri(tracking_uri)}"
    return rows, note


# ------------------------------------------------------------------------------------ markdown
def md_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "_none_\n"
    columns = list(columns or rows[0].keys())

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def md_link(url: str, text: str) -> str:
    return f"[{text}]({url})" if url.startswith(("http://", "https://")) else f"{text} (`{url}`)"
