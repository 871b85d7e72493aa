"""Retrieval over HTTP in the Search-R1 shape (``agentr1 serve-retriever``): the retrieval app.

``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents", "title", "text"}, "score": s}, ...], ...]}``, one
list per query, best first; with ``return_scores`` false each entry is the bare document, as
Search-R1's server does. ``contents`` is Search-R1's ``"Title"`` newline text, so its clients and
verl's search tool work unchanged; ``title``/``text`` spare new clients the parsing. ``topk`` may
be omitted (``retrieval.server.default_topk``). ``GET /health`` reports the index and the limits.

The work a request may ask for is bounded before any search runs (``retrieval.server`` in
params.yaml; a 422 names the limit and the fix): at most ``max_queries`` queries, each of at
most ``max_query_chars`` characters and together at most ``max_request_chars``; ``topk`` from 1
to ``max_topk`` and ``queries x topk`` at most ``max_results``; no key besides ``queries``,
``topk`` and ``return_scores``. An answer that would exceed ``max_response_bytes`` is refused
(422) before it is serialized. The queries are searched in chunks (:data:`CHUNK_QUERIES` queries
or :data:`CHUNK_CHARS` characters); between chunks the server checks that the client is still
connected and drops the work when it is not (nobody would read the answer).

The HTTP side - framing, the body cap (``max_body_bytes``), the JSON value bound
(``max_queries`` + 16 values), deadlines, the connection cap, status codes and the one log line per
refused request - is :mod:`agentr1.retrieval.jsonhttp`. The server binds 127.0.0.1 unless ``--host``
says otherwise (it has no authentication). The retrievers are safe to call from several threads.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentr1.data.schema import encodes_utf8
from agentr1.retrieval.base import Hit, Retriever, RetrieverError
from agentr1.retrieval.corpus import search_r1_contents
from agentr1.retrieval.jsonbody import clip, describe, json_kind
from agentr1.retrieval.jsonhttp import HTTPLimits, JSONHTTPServer, RequestError

log = logging.getLogger(__name__)

ROUTES = {"/health": "GET", "/retrieve": "POST"}  # path -> the one method it answers
BODY_KEYS = ("queries", "topk", "return_scores")
CHUNK_QUERIES = 64  # queries searched between two checks that the client is still there
CHUNK_CHARS = 8192  # ... or this many query characters, whichever comes first
CLIENT_GONE = 499  # the app's status for work dropped because the client left (nothing is sent)
_HIT_OVERHEAD_BYTES = 96  # the JSON keys, quotes and score of one answered document


@dataclass(frozen=True)
class RetrieveLimits:
    """The work bounds of ``/retrieve`` (module docstring); every one must be > 0."""

    max_queries: int = 512
    max_topk: int = 50
    default_topk: int = 3
    max_query_chars: int = 4096
    max_request_chars: int = 65536
    max_results: int = 4096
    max_response_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        bad = [name for name, value in vars(self).items() if not value > 0]
        if bad:
            raise ValueError(f"{', '.join(bad)} must be > 0")


def parse_request(body: Any, limits: RetrieveLimits) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body -> (queries, topk, return_scores); :class:`RequestError` (400
    not an object, 422 a bad or over-budget value) naming the field, the limit and the fix."""
    if not isinstance(body, dict):
        raise RequestError(400, 'the body must be a JSON object like {"queries": ["..."], "topk": 3}')
    unknown = sorted(k for k in body if k not in BODY_KEYS)
    if unknown:
        raise RequestError(
            422,
            f"unknown key {describe(unknown[0])}"
            f"{f' (+{len(unknown) - 1} more)' if len(unknown) > 1 else ''}: the allowed keys "
            f"are {', '.join(BODY_KEYS)}",
        )
    queries = body.get("queries")
    if not isinstance(queries, list) or not queries:
        raise RequestError(422, "queries must be a non-empty list of strings")
    if len(queries) > limits.max_queries:
        raise RequestError(
            422, f"at most {limits.max_queries} queries per request (got {len(queries)}): split the batch"
        )
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RequestError(422, f"queries[{i}] must be a string (got {json_kind(q)})")
        if len(q) > limits.max_query_chars:
            raise RequestError(
                422,
                f"queries[{i}] has {len(q)} characters; at most {limits.max_query_chars} "
                "(retrieval.server.max_query_chars): shorten it",
            )
        if not encodes_utf8(q):
            raise RequestError(422, f"queries[{i}] holds a lone surrogate (\\ud800-\\udfff): not Unicode text")
    chars = sum(map(len, queries))
    if chars > limits.max_request_chars:
        raise RequestError(
            422,
            f"the queries hold {chars} characters together; at most {limits.max_request_chars} "
            "per request (retrieval.server.max_request_chars): split the batch",
        )
    topk = body.get("topk")
    if topk is None:
        topk = limits.default_topk
    elif isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= limits.max_topk:
        raise RequestError(422, f"topk must be an integer from 1 to {limits.max_topk} (got {describe(topk)})")
    if len(queries) * topk > limits.max_results:
        raise RequestError(
            422,
            f"{len(queries)} queries x topk {topk} = {len(queries) * topk} results; at most "
            f"{limits.max_results} per request (retrieval.server.max_results): send fewer queries "
            "or a smaller topk",
        )
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(422, f"return_scores must be true or false (got {describe(return_scores)})")
    return queries, topk, return_scores


def document(hit: Hit) -> dict[str, Any]:
    """A hit as a Search-R1 corpus document (plus ``title``/``text``)."""
    return {"id": hit.id, "contents": search_r1_contents(hit.title, hit.text), "title": hit.title, "text": hit.text}


def format_result(hits: list[list[Hit]], return_scores: bool) -> dict[str, Any]:
    """The ``/retrieve`` answer body for ``hits``."""
    if return_scores:
        return {"result": [[{"document": document(h), "score": h.score} for h in per_q] for per_q in hits]}
    return {"result": [[document(h) for h in per_q] for per_q in hits]}


def answer_bytes(hits: list[list[Hit]]) -> int:
    """About the size of :func:`format_result` of ``hits`` in UTF-8 (title and text appear twice)."""
    return sum(
        len(h.id.encode()) + 2 * len(h.title.encode()) + 2 * len(h.text.encode()) + _HIT_OVERHEAD_BYTES
        for per_q in hits
        for h in per_q
    )


def chunks(queries: list[str]) -> list[tuple[int, int]]:
    """``(start, end)`` slices of ``queries`` of at most :data:`CHUNK_QUERIES` queries and, unless one
    query alone is longer, :data:`CHUNK_CHARS` characters."""
    out, start, chars = [], 0, 0
    for i, q in enumerate(queries):
        if i > start and (i - start >= CHUNK_QUERIES or chars + len(q) > CHUNK_CHARS):
            out.append((start, i))
            start, chars = i, 0
        chars += len(q)
    out.append((start, len(queries)))
    return out


class RetrievalServer:
    """A :class:`Retriever` behind ``POST /retrieve`` + ``GET /health``.

    ``start()`` serves from a daemon thread (tests: ``port=0`` picks a free port, see :attr:`url`),
    ``serve_forever()`` blocks (the CLI), ``stop()`` shuts down and closes the socket. Usable as a
    context manager. The limits are ``retrieval.server``'s (see the module docstring).
    """

    routes = ROUTES

    def __init__(
        self,
        retriever: Retriever,
        host: str = "127.0.0.1",
        port: int = 0,
        max_queries: int = 512,
        max_topk: int = 50,
        default_topk: int = 3,
        info: Mapping[str, Any] | None = None,
        *,
        max_query_chars: int = 4096,
        request_deadline_s: float = 10.0,
        max_connections: int = 128,
        idle_timeout_s: float = 60.0,
        max_request_chars: int = 65536,
        max_results: int = 4096,
        max_response_bytes: int = 8 << 20,
        max_body_bytes: int = 1 << 20,
    ) -> None:
        self.work = RetrieveLimits(
            max_queries,
            max_topk,
            min(default_topk, max_topk),
            max_query_chars,
            max_request_chars,
            max_results,
            max_response_bytes,
        )
        self.limits = HTTPLimits(
            max_body_bytes=max_body_bytes,
            max_json_values=max_queries + 16,
            request_deadline_s=request_deadline_s,
            idle_timeout_s=idle_timeout_s,
            max_connections=max_connections,
        )
        self.log = log
        self.retriever = retriever
        self.info = dict(info or {})
        self.httpd = JSONHTTPServer((host, port), self)
        self._thread: threading.Thread | None = None

    # the limits by name (``agentr1 serve-retriever`` and the tests read them)
    max_queries = property(lambda self: self.work.max_queries)
    max_topk = property(lambda self: self.work.max_topk)
    default_topk = property(lambda self: self.work.default_topk)
    max_query_chars = property(lambda self: self.work.max_query_chars)
    request_deadline_s = property(lambda self: self.limits.request_deadline_s)
    max_connections = property(lambda self: self.limits.max_connections)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def open_connections(self) -> int:
        """Connections being served now (not those being refused with 503)."""
        return self.httpd.open_connections

    def health(self) -> dict[str, Any]:
        w = self.work
        return {
            "status": "ok",
            "max_queries": w.max_queries,
            "max_topk": w.max_topk,
            "default_topk": w.default_topk,
            "max_query_chars": w.max_query_chars,
            **self.info,
        }

    def handle(self, path: str, body: Any, cancelled: Callable[[], bool]) -> tuple[int, dict[str, Any]]:
        """The HTTP layer's entry point (:class:`agentr1.retrieval.jsonhttp.JSONApp`)."""
        if path == "/health":
            return 200, self.health()
        return self.retrieve(body, cancelled)

    def retrieve(self, body: Any, cancelled: Callable[[], bool] = lambda: False) -> tuple[int, dict[str, Any]]:
        """Answer one parsed ``/retrieve`` body: (HTTP status, JSON body); :data:`CLIENT_GONE` when
        ``cancelled()`` turned true between two chunks of the search."""
        try:
            queries, topk, return_scores = parse_request(body, self.work)
        except RequestError as exc:
            return exc.status, {"error": str(exc)}
        t0 = time.perf_counter()
        hits: list[list[Hit]] = []
        try:
            for n, (start, end) in enumerate(chunks(queries)):
                if n and cancelled():
                    log.debug("client gone after %d of %d queries", start, len(queries))
                    return CLIENT_GONE, {}
                hits += self.retriever.search(queries[start:end], topk)
        except Exception as exc:  # the client must get an answer, never a dropped connection
            log.debug("retrieval failed", exc_info=True)  # the handler logs the one line; the traceback at DEBUG
            return 500, {"error": f"retrieval failed: {type(exc).__name__}: {clip(str(exc), 200)}"}
        size = answer_bytes(hits)
        if size > self.work.max_response_bytes:
            return 422, {
                "error": f"the answer would be about {size} bytes; at most {self.work.max_response_bytes} "
                "(retrieval.server.max_response_bytes): send fewer queries or a smaller topk"
            }
        log.debug("%d queries, top-%d in %.1f ms", len(queries), topk, 1000 * (time.perf_counter() - t0))
        return 200, format_result(hits, return_scores)

    def start(self) -> RetrievalServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="retrieval-server", daemon=True
            )
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

    def __enter__(self) -> RetrievalServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


HOST_FIX = (
    "pass --host an address of this machine (or set retrieval.server.host): 127.0.0.1, the default, serves "
    "only this machine; 0.0.0.0 every interface (no authentication)"
)


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be served on (it does not resolve to an IPv4 address), with the fix; ``None``
    when it resolves. Checked before the index loads, so a typo fails in a moment."""
    try:
        socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"--host {host!r} does not resolve to an IPv4 address ({exc.strerror}): {HOST_FIX}"
    except (UnicodeError, ValueError) as exc:  # an empty label, a NUL, a label over 63 characters
        return f"--host {host[:80]!r} is not a host name ({exc}): {HOST_FIX}"
    return None


def bind_error(host: str, port: int, exc: OSError) -> str:
    """The message for a failed bind of ``host:port``: which of ``--port``/``--host`` to change."""
    if exc.errno == errno.EADDRINUSE:
        return f"cannot bind {host}:{port}: the port is in use: pick another --port (0 = any free one) or stop the other server"
    if exc.errno == errno.EACCES:
        return f"cannot bind {host}:{port} ({exc.strerror}): ports below 1024 need privileges: pick --port 1024..65535"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f"cannot bind {host}:{port}: {host!r} is no address of this machine ({exc.strerror}): {HOST_FIX}"
    return f"cannot bind {host}:{port} ({exc.strerror or exc}): check --host and --port"


def run_server(cfg: Any, args: Any) -> None:
    """``agentr1 serve-retriever [--host H] [--port P]``: serve ``retrieval.index_dir`` until Ctrl-C."""
    from agentr1.errors import StageError
    from agentr1.retrieval.factory import load_index

    scfg = cfg.retrieval.server
    host = getattr(args, "host", None) or scfg.host
    port = getattr(args, "port", None)
    port = scfg.port if port is None else port
    problem = host_problem(host)
    if problem:
        raise StageError(problem)
    try:
        retriever = load_index(cfg.retrieval.index_dir, cfg.retrieval)
    except RetrieverError as exc:
        raise StageError(str(exc)) from None
    passages = len(getattr(retriever, "passages", ()))
    info = {"backend": cfg.retrieval.backend, "passages": passages, "index_dir": str(cfg.retrieval.index_dir)}
    try:
        server = RetrievalServer(
            retriever,
            host,
            port,
            scfg.max_queries,
            scfg.max_topk,
            scfg.default_topk,
            info,
            max_query_chars=scfg.max_query_chars,
            request_deadline_s=scfg.request_deadline_s,
            max_connections=scfg.max_connections,
            max_request_chars=scfg.max_request_chars,
            max_results=scfg.max_results,
            max_response_bytes=scfg.max_response_bytes,
            max_body_bytes=scfg.max_body_bytes,
        )
    except OSError as exc:
        raise StageError(bind_error(host, port, exc)) from None
    if not _is_loopback(host):
        log.warning("binding %s: the retriever is reachable from other machines (no authentication)", host)
    log.info(
        "serving %d passages (%s) at %s  (POST /retrieve, GET /health; at most %d connections; Ctrl-C stops)",
        passages,
        cfg.retrieval.backend,
        server.url,
        scfg.max_connections,
    )
    if threading.current_thread() is threading.main_thread():  # SIGTERM (kill, Prefect, DVC) = Ctrl-C
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.stop()
