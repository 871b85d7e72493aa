"""Retrieval over HTTP in the Search-R1 shape (``agentr1 serve-retriever``).

``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents", "title", "text"}, "score": s}, ...], ...]}``, one
list per query, best first; with ``return_scores`` false each entry is the bare document, as
Search-R1's server does. ``contents`` is Search-R1's ``"Title"`` newline text, so its clients and
verl's search tool work unchanged; ``title``/``text`` spare new clients the parsing. ``topk`` may
be omitted (``retrieval.server.default_topk``). ``GET /health`` reports the index and the limits.

Limits (``retrieval.server`` in params.yaml): at most ``max_queries`` queries per request, each
of at most ``max_query_chars`` characters; ``topk`` from 1 to ``max_topk``; a UTF-8 JSON body of
at most 16 MiB sent with ``Content-Length`` (chunked bodies are not read); a request's line,
headers and body must arrive within ``request_deadline_s`` of its first byte (a per-read timeout
would let a client trickling a byte at a time hold a connection forever); an idle keep-alive
connection is closed after 60 s; at most ``max_connections`` connections are served at once. The
server binds 127.0.0.1 unless ``--host`` says otherwise (it has no authentication).

Every answer is JSON (``HEAD``: the headers only). A refused request gets ``{"error": message}``,
in which client input is clipped to 80 characters, and logs one line (500 at ERROR, the others at
INFO; tracebacks only at DEBUG):

- 400: a bad request line or method token, HTTP/0.9, a Content-Length that is not one ASCII
  decimal number, a body that ends early, is not UTF-8 or is not JSON (``NaN``/``Infinity`` are
  not JSON; nesting too deep), or a JSON body that is not an object;
- 404 unknown route; 405 another method on a route (with ``Allow``); 408 request not complete
  within the deadline; 411 no Content-Length; 413 body over 16 MiB; 414 request line over 64 KiB;
  422 a well-formed body with bad values (empty or too many queries, a query that is not a
  string, too long or not Unicode text, ``topk`` outside 1..``max_topk``, a non-boolean
  ``return_scores``); 431 a header line over 64 KiB or more than 100 headers;
- 500 the retriever failed, or an unexpected error (its exception type is named); 503 (with
  ``Retry-After``) beyond ``max_connections``; 505 an HTTP/2+ request line.

Errors in the request's framing (a bad request line, version or length; 408, 411, 413, 414, 431,
503, 505) close the connection, after reading what the client still sends for up to a second, so the
kernel does not reset the connection under the answer in flight.

Why the standard library's ``ThreadingHTTPServer`` and not FastAPI + uvicorn: the server is two
routes whose cost is the search itself; the stdlib server adds no import time (FastAPI + uvicorn +
pydantic models take seconds to import on these machines), runs in a plain thread with port 0 for
tests and stops with ``shutdown()`` (no event loop to manage), and keeps the validation messages
under our control. One thread per connection with HTTP/1.1 keep-alive serves concurrent rollout
workers; the retrievers are safe to call from several threads.
"""

from __future__ import annotations

import io
import ipaddress
import json
import logging
import math
import re
import signal
import socket
import sys
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
MAX_LINE_BYTES = 65536  # the request line (http.server's own cap on a header line is the same)
IDLE_TIMEOUT_S = 60.0  # a keep-alive connection waiting for its next request; also bounds one write
LINGER_S = 1.0  # after an error that closes the connection: how long to read what the client still sends
CLIP_CHARS = 80  # client input quoted in an error message or a log line is cut to this
ROUTES = {"/health": "GET", "/retrieve": "POST"}  # path -> the one method it answers
_METHOD_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token
_ASCII_DIGITS = re.compile(r"[0-9]+")  # not str.isdigit(): that accepts '²' and '١٢', which int() may refuse


class RequestError(ValueError):
    """A request the server refuses: HTTP ``status``, a message for the client, and whether the
    connection must close (the request's framing is in doubt, so the next request cannot be found)."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


# ------------------------------------------------------------------ bounded views of client input
def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class HugeInt:
    """A JSON integer longer than Python converts (``sys.get_int_max_str_digits()``, 4300 digits):
    kept as its length, so validation refuses it like any out-of-range value."""

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"a {self.digits}-digit integer"


def describe(value: Any) -> str:
    """A short description of a JSON value for an error message: never the whole value."""
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, str):
        return repr(value[:CLIP_CHARS]) + (f"... ({len(value)} chars)" if len(value) > CLIP_CHARS else "")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {round(value.bit_length() * math.log10(2))} digits"
    return clip(repr(value))


def json_kind(value: Any) -> str:
    """The JSON type name of a decoded value."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float, HugeInt)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------- request validation
def content_length(values: list[str], limit: int = MAX_BODY_BYTES) -> int:
    """The body size from the ``Content-Length`` header(s): :class:`RequestError` 411 if absent,
    400 if not one ASCII decimal number (RFC 9112 6.3), 413 if over ``limit``."""
    if not values:
        raise RequestError(411, "send the JSON body with a Content-Length header", close=True)
    texts = {v.strip() for v in values}
    if len(texts) > 1:
        raise RequestError(400, "conflicting Content-Length headers", close=True)
    text = texts.pop()
    if not _ASCII_DIGITS.fullmatch(text):
        raise RequestError(400, f"Content-Length must be a decimal number of bytes (got {describe(text)})", close=True)
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(limit)) or int(digits) > limit:
        raise RequestError(413, f"a body of {clip(digits, 20)} bytes exceeds {limit}: send fewer queries per request",
                           close=True)
    return int(digits)


def _not_json(name: str) -> Any:
    raise RequestError(400, f"the body is not valid JSON: {name} is not a JSON number")


def _json_int(text: str) -> int | HugeInt:
    limit = sys.get_int_max_str_digits()
    return HugeInt(text) if limit and len(text.lstrip("-")) > limit else int(text)


def decode_json(raw: bytes) -> Any:
    """Strict JSON from a UTF-8 body (RFC 8259): :class:`RequestError` 400 if it is not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(400, f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        try:
            return json.loads(text, parse_constant=_not_json)
        except ValueError as exc:  # an integer over Python's digit limit: rare, so only then the slower hook
            if type(exc) is not ValueError or "integer string conversion" not in str(exc):
                raise
            return json.loads(text, parse_constant=_not_json, parse_int=_json_int)
    except RecursionError:
        raise RequestError(400, "the body is not usable JSON: arrays or objects nested too deep") from None
    except json.JSONDecodeError as exc:
        raise RequestError(400, f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def _is_unicode(text: str) -> bool:
    """False for a string with a lone surrogate (JSON's ``"\\ud800"``): not text a retriever can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_request(body: Any, max_queries: int, max_topk: int, default_topk: int,
                  max_query_chars: int = 4096) -> tuple[list[str], int, bool]:
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
            raise RequestError(422, f"queries[{i}] must be a string (got {json_kind(q)})")
        if len(q) > max_query_chars:
            raise RequestError(422, f"queries[{i}] has {len(q)} characters; at most {max_query_chars} "
                                    "(retrieval.server.max_query_chars): shorten it")
        if not _is_unicode(q):
            raise RequestError(422, f"queries[{i}] holds a lone surrogate (\\ud800-\\udfff): not Unicode text")
    topk = body.get("topk")
    if topk is None:
        topk = default_topk
    elif isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= max_topk:
        raise RequestError(422, f"topk must be an integer from 1 to {max_topk} (got {describe(topk)})")
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


# ------------------------------------------------------------------------------ the connection
def _linger(sock: socket.socket, seconds: float = LINGER_S) -> None:
    """Half-close, then discard input until the client closes or ``seconds`` pass: closing with
    unread input makes the kernel send a reset, which can destroy the answer still in flight."""
    try:
        sock.shutdown(socket.SHUT_WR)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(65536):
                return
    except OSError:
        pass


class _DeadlineReader(io.RawIOBase):
    """A connection's input. Before a request's first byte a read waits up to the idle timeout;
    from that byte on, every read waits only until the request's deadline, so the whole request
    (line, headers, body) must arrive within ``request_deadline_s``, however slowly it trickles."""

    def __init__(self, sock: socket.socket, handler: "_Handler") -> None:
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        h = self._handler
        if h.deadline is None:
            self._sock.settimeout(h.server.app.idle_timeout_s)
        else:
            left = h.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("request deadline passed")
            self._sock.settimeout(left)
        n = self._sock.recv_into(buffer)
        if n and h.deadline is None:
            h.deadline = time.monotonic() + h.server.app.request_deadline_s
        return n


class _Handler(BaseHTTPRequestHandler):
    """One connection: reads requests within their deadline and routes them to the
    :class:`RetrievalServer` that owns the socket (``self.server.app``). Every request gets a JSON
    answer, or the connection closes when the client is gone; nothing escapes to socketserver."""

    protocol_version = "HTTP/1.1"  # keep-alive: a client's session reuses its connection
    server_version = "agentr1-retriever"
    disable_nagle_algorithm = True  # headers and body are two writes: no delayed-ACK stall between them

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # replaced by the deadline-aware reader
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self))
        self.deadline: float | None = None
        self._close_with_linger = False

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._close_with_linger:
                _linger(self.connection)

    # -- reading ------------------------------------------------------------------------------
    def handle_one_request(self) -> None:
        """Read and answer one request; every failure is answered here (or the connection closed)."""
        self.deadline = None  # starts at the request's first byte (see _DeadlineReader)
        self._answered = False
        self._body_read = False
        self.command, self.requestline, self.request_version, self.headers = None, "", "HTTP/1.1", None
        try:
            self._read_and_answer()
        except RequestError as exc:
            self._fail(exc.status, str(exc), close=exc.close)
        except TimeoutError:
            if self.deadline is not None:  # a request had begun; an idle keep-alive connection just closes
                self._fail(408, f"the request did not arrive within {self.server.app.request_deadline_s:g} s "
                                "(retrieval.server.request_deadline_s)", close=True)
            self.close_connection = True
        except OSError as exc:  # the client went away (reset, broken pipe): nobody to answer
            log.debug("%s connection lost: %s", self.client_address[0], exc)
            self.close_connection = True
        except Exception as exc:  # a bug: the client still gets an answer, the log one line
            log.debug("unexpected error handling %s", ascii(clip(self.requestline)), exc_info=True)
            self._fail(500, f"internal error ({type(exc).__name__}: {clip(str(exc), 200)})", close=True)

    def _read_and_answer(self) -> None:
        line = self._read_request_line()
        if not line:
            self.close_connection = True
            return
        self.raw_requestline = line
        if not self.parse_request():  # http.server's parser answers its own refusals (send_error)
            if not self._answered:  # a blank line: http.server returns without a word
                self.send_error(400, "bad request line: send 'METHOD /path HTTP/1.1'")
            return
        if self.request_version == "HTTP/0.9":
            self.send_error(400, "HTTP/0.9 requests are not supported: end the request line with HTTP/1.1")
            return
        self._route()
        self.wfile.flush()

    def _read_request_line(self) -> bytes:
        """The request line, skipping up to 4 empty lines before it (RFC 9112 2.2); b'' at the end of input."""
        for _ in range(5):
            line = self.rfile.readline(MAX_LINE_BYTES + 1)
            if len(line) > MAX_LINE_BYTES:
                raise RequestError(414, f"the request line is over {MAX_LINE_BYTES} bytes", close=True)
            if line not in (b"\r\n", b"\n"):
                return line
        return line

    def _read_body(self) -> bytes:
        """Exactly Content-Length bytes of body (framing errors close the connection)."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise RequestError(411, "Transfer-Encoding is not supported: send the JSON body with a Content-Length "
                                    "header", close=True)
        length = content_length(self.headers.get_all("Content-Length") or [])
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise RequestError(400, f"the body ended after {len(raw)} of {length} bytes", close=True)
        self._body_read = True
        return raw

    def _declares_body(self) -> bool:
        h = self.headers
        return h is not None and (h.get("Transfer-Encoding") is not None
                                  or (h.get("Content-Length") or "0").strip() != "0")

    # -- routing ------------------------------------------------------------------------------
    def _route(self) -> None:
        path = self.path.split("?", 1)[0]
        if not _METHOD_TOKEN.fullmatch(self.command):
            raise RequestError(400, f"bad method {describe(self.command)}: use GET /health or POST /retrieve")
        allowed = ROUTES.get(path)
        if allowed is None:
            self._error(404, f"no route {clip(path)}: use POST /retrieve or GET /health")
        elif self.command != allowed:
            hint = " with a JSON body" if allowed == "POST" else ""
            self._error(405, f"use {allowed} {path}{hint}", allow=allowed)
        elif path == "/health":
            self._send(200, self.server.app.health())
        else:
            body = decode_json(self._read_body())
            self._send(*self.server.app.retrieve(body))

    # -- answering ----------------------------------------------------------------------------
    def _send(self, status: int, body: Mapping[str, Any], allow: str | None = None) -> None:
        """Answer JSON (``HEAD``: headers only) and log the request's one line."""
        self._answered = True
        # surrogates a client smuggled in become \\udXXX escapes: still valid JSON
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        if not self._body_read and self._declares_body():
            self.close_connection = True  # the unread body would be taken for the next request
        self._log(status, body)
        self.connection.settimeout(self.server.app.idle_timeout_s)  # not the reader's deadline remainder
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if allow:
            self.send_header("Allow", allow)
        if self.close_connection:
            self.send_header("Connection", "close")
            self._close_with_linger = status >= 400
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, message: str, allow: str | None = None) -> None:
        self._send(status, {"error": clip(message, 300)}, allow)

    def _fail(self, status: int, message: str, close: bool) -> None:
        """Answer an error unless an answer has begun (then the connection can only close)."""
        if close:
            self.close_connection = True
        if self._answered:
            log.info("%s %s: failed while answering: %s", self.client_address[0], ascii(clip(self.requestline)),
                     message)
            self.close_connection = True
            return
        try:
            self._error(status, message)
        except OSError:
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (request line, version, headers) as JSON; the connection closes."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # always answer with a status line
            self.request_version = "HTTP/1.0"
        self._error(int(code), message or HTTPStatus(code).phrase)

    def _log(self, status: int, body: Mapping[str, Any]) -> None:
        """One line per request: DEBUG when answered, ERROR for a 500 (our fault), INFO for the other
        refusals (the client's doing); client text is escaped."""
        if status < 400:
            log.debug("%s %s -> %d", self.client_address[0], ascii(clip(self.requestline)), status)
            return
        level = logging.ERROR if status == 500 else logging.INFO
        log.log(level, "%s %s -> %d %s", self.client_address[0], ascii(clip(self.requestline)), status,
                ascii(str(body.get("error", ""))))

    def log_request(self, code: Any = "-", size: Any = "-") -> None:  # _log writes the request's line
        pass

    def log_message(self, fmt: str, *args: Any) -> None:  # anything else http.server says: DEBUG, not stderr
        log.debug("%s " + fmt, self.client_address[0], *args)


# --------------------------------------------------------------------------------- the listener
def _read_head(sock: socket.socket, seconds: float, limit: int = 8192) -> bytes:
    """What a client sends within ``seconds``, up to the end of its headers or ``limit`` bytes."""
    data, end = b"", time.monotonic() + seconds
    try:
        while b"\r\n\r\n" not in data and len(data) < limit and (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            chunk = sock.recv(limit)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data


class _HTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that serves at most ``app.max_connections`` connections at once; the
    next ones get a JSON 503 from a short-lived thread (at most as many again; beyond those, a
    connection is closed at once). Errors escaping a handler are logged in one line, not printed."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of rollout workers waits, not refused by the kernel

    def __init__(self, address: tuple[str, int], app: "RetrievalServer") -> None:
        self.app = app
        self.open_connections = 0
        self._count_lock = threading.Lock()
        self._refusals = threading.BoundedSemaphore(app.max_connections)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._count_lock:
            admitted = self.open_connections < self.app.max_connections
            self.open_connections += admitted
        if admitted:
            try:
                super().process_request(request, client_address)
            except BaseException:
                self._release()
                raise
        elif self._refusals.acquire(blocking=False):
            try:
                threading.Thread(target=self._refuse, args=(request, client_address), name="retrieval-refuse",
                                 daemon=True).start()
            except BaseException:
                self._refusals.release()
                raise
        else:
            log.info("%s closed at once: %d connections open and as many being refused", client_address[0],
                     self.open_connections)
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._count_lock:
            self.open_connections -= 1

    def _refuse(self, sock: socket.socket, client_address: Any) -> None:
        """Answer JSON 503 without serving the request, then close."""
        try:
            head = _read_head(sock, LINGER_S)
            line = head.split(b"\r\n", 1)[0].decode("iso-8859-1")
            message = (f"the server is serving its maximum of {self.app.max_connections} connections "
                       "(retrieval.server.max_connections): retry shortly")
            log.info("%s %s -> 503 %s", client_address[0], ascii(clip(line)), message)
            data = json.dumps({"error": message}).encode()
            sock.settimeout(LINGER_S)
            sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" % len(data)
                         + (b"" if head.startswith(b"HEAD ") else data))
            _linger(sock)
        except OSError:
            pass
        finally:
            self.shutdown_request(sock)
            self._refusals.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        log.error("%s connection failed: %s: %s", client_address[0], type(exc).__name__, clip(str(exc), 200))
        log.debug("traceback", exc_info=True)


class RetrievalServer:
    """A :class:`Retriever` behind ``POST /retrieve`` + ``GET /health``.

    ``start()`` serves from a daemon thread (tests: ``port=0`` picks a free port, see :attr:`url`),
    ``serve_forever()`` blocks (the CLI), ``stop()`` shuts down and closes the socket. Usable as a
    context manager. The limits are ``retrieval.server``'s (see the module docstring).
    """

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 0, max_queries: int = 512,
                 max_topk: int = 50, default_topk: int = 3, info: Mapping[str, Any] | None = None, *,
                 max_query_chars: int = 4096, request_deadline_s: float = 10.0, max_connections: int = 128,
                 idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        limits = {"max_queries": max_queries, "max_topk": max_topk, "default_topk": default_topk,
                  "max_query_chars": max_query_chars, "request_deadline_s": request_deadline_s,
                  "max_connections": max_connections, "idle_timeout_s": idle_timeout_s}
        bad = [name for name, value in limits.items() if not value > 0]
        if bad:
            raise ValueError(f"{', '.join(bad)} must be > 0")
        self.retriever = retriever
        self.max_queries = max_queries
        self.max_topk = max_topk
        self.default_topk = min(default_topk, max_topk)
        self.max_query_chars = max_query_chars
        self.request_deadline_s = request_deadline_s
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.info = dict(info or {})
        self.httpd = _HTTPServer((host, port), self)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def open_connections(self) -> int:
        """Connections being served now (not those being refused with 503)."""
        return self.httpd.open_connections

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "max_queries": self.max_queries, "max_topk": self.max_topk,
                "default_topk": self.default_topk, "max_query_chars": self.max_query_chars, **self.info}

    def retrieve(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer one parsed ``/retrieve`` body: (HTTP status, JSON body)."""
        try:
            queries, topk, return_scores = parse_request(body, self.max_queries, self.max_topk, self.default_topk,
                                                         self.max_query_chars)
        except RequestError as exc:
            return exc.status, {"error": str(exc)}
        t0 = time.perf_counter()
        try:
            hits = self.retriever.search(queries, topk)
        except Exception as exc:  # the client must get an answer, never a dropped connection
            log.debug("retrieval failed", exc_info=True)  # the handler logs the one line; the traceback at DEBUG
            return 500, {"error": f"retrieval failed: {type(exc).__name__}: {clip(str(exc), 200)}"}
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
        server = RetrievalServer(retriever, host, port, scfg.max_queries, scfg.max_topk, scfg.default_topk, info,
                                 max_query_chars=scfg.max_query_chars, request_deadline_s=scfg.request_deadline_s,
                                 max_connections=scfg.max_connections)
    except OSError as exc:
        raise StageError(f"cannot bind {host}:{port} ({exc}): pick another --port or stop the other server") from None
    if not _is_loopback(host):
        log.warning("binding %s: the retriever is reachable from other machines (no authentication)", host)
    log.info("serving %d passages (%s) at %s  (POST /retrieve, GET /health; at most %d connections; Ctrl-C stops)",
             passages, cfg.retrieval.backend, server.url, scfg.max_connections)
    if threading.current_thread() is threading.main_thread():  # SIGTERM (kill, Prefect, DVC) = Ctrl-C
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.stop()
