"""Retrieval over HTTP in the Search-R1 shape (``agentr1 serve-retriever``).

``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents", "title", "text"}, "score": s}, ...], ...]}``, one
list per query, best first; with ``return_scores`` false each entry is the bare document, as
Search-R1's server does. ``contents`` is Search-R1's ``"Title"`` newline text, so its clients and
verl's search tool work unchanged; ``title``/``text`` spare new clients the parsing. ``topk`` may
be omitted (``retrieval.server.default_topk``). ``GET /health`` reports the index.

Bad requests get a JSON ``{"error": message}``: 400 for a body that is not a JSON object, 411/413
for a missing/oversized body, 422 for a well-formed body with bad values (empty or too many
queries, non-string queries, ``topk`` outside 1..``max_topk``, non-boolean ``return_scores``),
404/405 for unknown routes/methods, 500 when the retriever itself fails.

Why the standard library's ``ThreadingHTTPServer`` and not FastAPI + uvicorn: the server is two
routes whose cost is the search itself; the stdlib server adds no import time (FastAPI + uvicorn +
pydantic models take seconds to import on these machines), runs in a plain thread with port 0 for
tests and stops with ``shutdown()`` (no event loop to manage), and keeps the validation messages
under our control. One thread per connection with HTTP/1.1 keep-alive serves concurrent rollout
workers; the retrievers are safe to call from several threads.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import signal
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentr1.retrieval.base import Hit, Retriever, RetrieverError
from agentr1.retrieval.corpus import search_r1_contents

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024


class RequestError(ValueError):
    """A request the server refuses: HTTP ``status`` and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_request(body: Any, max_queries: int, max_topk: int, default_topk: int) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body -> (queries, topk, return_scores); :class:`RequestError` if bad."""
    if not isinstance(body, dict):
        raise RequestError(400, 'the body must be a JSON object like {"queries": ["..."], "topk": 3}')
    queries = body.get("queries")
    if not isinstance(queries, list) or not queries:
        raise RequestError(422, "queries must be a non-empty list of strings")
    if len(queries) > max_queries:
        raise RequestError(422, f"at most {max_queries} queries per request (got {len(queries)}): split the batch")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RequestError(422, f"queries[{i}] must be a string (got {type(q).__name__})")
    topk = body.get("topk")
    if topk is None:
        topk = default_topk
    elif isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= max_topk:
        raise RequestError(422, f"topk must be an integer from 1 to {max_topk} (got {topk!r})")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(422, f"return_scores must be true or false (got {return_scores!r})")
    return queries, topk, return_scores


def document(hit: Hit) -> dict[str, Any]:
    """A hit as a Search-R1 corpus document (plus ``title``/``text``)."""
    return {"id": hit.id, "contents": search_r1_contents(hit.title, hit.text), "title": hit.title, "text": hit.text}


def format_result(hits: list[list[Hit]], return_scores: bool) -> dict[str, Any]:
    """The ``/retrieve`` answer body for ``hits``."""
    if return_scores:
        return {"result": [[{"document": document(h), "score": h.score} for h in per_q] for per_q in hits]}
    return {"result": [[document(h) for h in per_q] for per_q in hits]}


class _Handler(BaseHTTPRequestHandler):
    """Routes requests to the :class:`RetrievalServer` that owns the socket (``self.server.app``)."""

    protocol_version = "HTTP/1.1"  # keep-alive: a client's session reuses its connection
    timeout = 60  # idle keep-alive connections are closed after this many seconds
    server_version = "agentr1-retriever"

    def log_message(self, fmt: str, *args: Any) -> None:  # route access logs to logging, not stderr
        log.debug("%s " + fmt, self.client_address[0], *args)

    def _send(self, status: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": message})

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        if self.path == "/health":
            self._send(200, self.server.app.health())
        elif self.path == "/retrieve":
            self._error(405, "use POST /retrieve with a JSON body")
        else:
            self._error(404, f"no route {self.path}: use POST /retrieve or GET /health")

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/retrieve":
            self._error(404, f"no route {self.path}: use POST /retrieve or GET /health")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._error(411, "send the JSON body with a Content-Length header")
            self.close_connection = True
            return
        if int(length) > MAX_BODY_BYTES:
            self._error(413, f"body of {length} bytes exceeds {MAX_BODY_BYTES}: send fewer queries per request")
            self.close_connection = True
            return
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._error(400, f"the body is not valid JSON: {exc}")
            return
        status, answer = self.server.app.retrieve(body)
        self._send(status, answer)


class RetrievalServer:
    """A :class:`Retriever` behind ``POST /retrieve`` + ``GET /health``.

    ``start()`` serves from a daemon thread (tests: ``port=0`` picks a free port, see :attr:`url`),
    ``serve_forever()`` blocks (the CLI), ``stop()`` shuts down and closes the socket. Usable as a
    context manager.
    """

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 0, max_queries: int = 512,
                 max_topk: int = 50, default_topk: int = 3, info: Mapping[str, Any] | None = None) -> None:
        self.retriever = retriever
        self.max_queries = max_queries
        self.max_topk = max_topk
        self.default_topk = min(default_topk, max_topk)
        self.info = dict(info or {})
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.app = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "max_queries": self.max_queries, "max_topk": self.max_topk,
                "default_topk": self.default_topk, **self.info}

    def retrieve(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer one parsed ``/retrieve`` body: (HTTP status, JSON body)."""
        try:
            queries, topk, return_scores = parse_request(body, self.max_queries, self.max_topk, self.default_topk)
        except RequestError as exc:
            return exc.status, {"error": str(exc)}
        t0 = time.perf_counter()
        try:
            hits = self.retriever.search(queries, topk)
        except Exception as exc:  # the client must get an answer, never a dropped connection
            log.exception("retrieval failed")
            return 500, {"error": f"retrieval failed: {type(exc).__name__}: {exc}"}
        log.debug("%d queries, top-%d in %.1f ms", len(queries), topk, 1000 * (time.perf_counter() - t0))
        return 200, format_result(hits, return_scores)

    def start(self) -> "RetrievalServer":
        if self._thread is None:
            self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="retrieval-server", daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> "RetrievalServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run_server(cfg: Any, args: Any) -> None:
    """``agentr1 serve-retriever [--host H] [--port P]``: serve ``retrieval.index_dir`` until Ctrl-C."""
    from agentr1.errors import StageError
    from agentr1.retrieval.factory import load_index

    scfg = cfg.retrieval.server
    host = getattr(args, "host", None) or scfg.host
    port = getattr(args, "port", None)
    port = scfg.port if port is None else port
    try:
        retriever = load_index(cfg.retrieval.index_dir, cfg.retrieval)
    except RetrieverError as exc:
        raise StageError(str(exc)) from None
    passages = len(getattr(retriever, "passages", ()))
    info = {"backend": cfg.retrieval.backend, "passages": passages, "index_dir": str(cfg.retrieval.index_dir)}
    try:
        server = RetrievalServer(retriever, host, port, scfg.max_queries, scfg.max_topk, scfg.default_topk, info)
    except OSError as exc:
        raise StageError(f"cannot bind {host}:{port} ({exc}): pick another --port or stop the other server") from None
    if not _is_loopback(host):
        log.warning("binding %s: the retriever is reachable from other machines (no authentication)", host)
    log.info("serving %d passages (%s) at %s  (POST /retrieve, GET /health; Ctrl-C stops)",
             passages, cfg.retrieval.backend, server.url)
    if threading.current_thread() is threading.main_thread():  # SIGTERM (kill, Prefect, DVC) = Ctrl-C
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.stop()
