"""HTTP/1.1 framing and limits for a small JSON service on the standard library's threading server.

:class:`JSONHTTPServer` serves a :class:`JSONApp` (``routes``: path -> the one method it answers,
``limits``, ``log`` and ``handle(path, body, cancelled)``); every answer is JSON (``HEAD``: the
headers only). It is one module of about 500 lines because each limit below is enforced where
the bytes are read, in the one request loop (the retrieval app is :mod:`agentr1.retrieval.server`,
the bounded JSON decoder :mod:`agentr1.retrieval.jsonbody`). What this layer guarantees, whatever
the app:

- **framing** (RFC 9112): a request line (after up to 4 empty lines) of at most 64 KiB, origin-form
  or absolute-form target (``POST http://host/retrieve`` is the path ``/retrieve``); at most 100
  header lines of at most 64 KiB each, each ``name: value`` with a token name, no whitespace
  before the colon, no obs-fold continuation line and no NUL, CR or other control character in
  the value (400 naming the line); a body only with one ASCII-decimal ``Content-Length`` of at most
  ``limits.max_body_bytes`` (411 without one, 413 over it, 400 with ``Transfer-Encoding`` as well);
- **time**: line, headers and body must arrive within ``limits.request_deadline_s`` of the
  request's first byte (408), however slowly they trickle; an idle keep-alive connection closes
  after ``limits.idle_timeout_s``;
- **memory**: the body is parsed by :func:`~agentr1.retrieval.jsonbody.decode_json` within
  ``limits.max_json_values`` values and ``limits.max_json_depth`` nesting, refused before any
  Python object is built;
- **connections**: at most ``limits.max_connections`` served at once; the next ones get a JSON 503
  with ``Retry-After`` from a short-lived thread (at most as many again; beyond those, closed);
- **work**: the app gets ``cancelled()``, true once the client has closed the connection, so a
  long request can stop when nobody waits for its answer.

A refused request gets ``{"error": message}`` (client input clipped to 80 characters) and one log
line on ``app.log`` (500 at ERROR, the other refusals at INFO; tracebacks only at DEBUG). Errors in
the framing close the connection after reading what the client still sends for up to a second, so
the kernel does not reset the connection under the answer in flight.

Why the standard library's ``ThreadingHTTPServer`` and not FastAPI + uvicorn: the services are a
few routes whose cost is the work behind them; the stdlib server adds no import time, runs in a
plain thread with port 0 for tests and stops with ``shutdown()``, and keeps the validation
messages under our control.
"""

from __future__ import annotations

import io
import json
import logging
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

from agentr1.retrieval.jsonbody import BodyError, clip, decode_json, describe

MAX_LINE_BYTES = 65536  # the request line and each header line
MAX_HEADERS = 100
LINGER_S = 1.0  # after an error that closes the connection: how long to read what the client still sends
_METHOD_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token
_HEADER_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*\r?\n")
_ASCII_DIGITS = re.compile(r"[0-9]+")  # not str.isdigit(): that accepts '²' and '١٢', which int() may refuse


class RequestError(ValueError):
    """A request the server refuses: HTTP ``status``, a message for the client, and whether the
    connection must close (the request's framing is in doubt, so the next request cannot be found)."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


@dataclass(frozen=True)
class HTTPLimits:
    """The bounds of :class:`JSONHTTPServer` (module docstring); every one must be > 0."""

    max_body_bytes: int = 1 << 20
    max_json_values: int = 528
    max_json_depth: int = 8
    request_deadline_s: float = 10.0
    idle_timeout_s: float = 60.0
    max_connections: int = 128

    def __post_init__(self) -> None:
        bad = [name for name, value in vars(self).items() if not value > 0]
        if bad:
            raise ValueError(f"{', '.join(bad)} must be > 0")


class JSONApp(Protocol):
    """What :class:`JSONHTTPServer` serves."""

    routes: Mapping[str, str]  # path -> the one method it answers (GET routes take no body)
    limits: HTTPLimits
    log: logging.Logger

    def handle(self, path: str, body: Any, cancelled: Callable[[], bool]) -> tuple[int, Mapping[str, Any]]:
        """(status, JSON answer) for a routed request; ``body`` is the decoded JSON (None for GET)."""


# --------------------------------------------------------------------------- request validation
def content_length(values: list[str], limit: int) -> int:
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
        raise RequestError(
            413,
            f"a body of {clip(digits, 20)} bytes exceeds {limit} "
            "(retrieval.server.max_body_bytes): send fewer queries per request",
            close=True,
        )
    return int(digits)


def check_header_line(line: bytes, number: int) -> None:
    """:class:`RequestError` 400 unless ``line`` is one well-formed ``name: value`` field line
    (RFC 9112 5: no whitespace before the colon, no obs-fold, no NUL or control character)."""
    if line[:1] in (b" ", b"\t"):
        raise RequestError(
            400,
            f"header line {number} continues the previous one (obs-fold): write each header on one line",
            close=True,
        )
    if _HEADER_LINE.fullmatch(line) is None:
        name = line.split(b":", 1)[0]
        if b":" in line and name.rstrip(b" \t") != name:
            why = f"whitespace between the name {clip(ascii(name.strip().decode('latin-1')))} and the colon"
        elif b":" not in line:
            why = "no colon"
        else:
            why = "a control character (NUL, CR, ...) or a bad character in the name"
        raise RequestError(400, f"malformed header line {number}: {why} (RFC 9112 5)", close=True)


def request_path(target: str) -> str:
    """The path of an origin-form (``/retrieve?x``) or absolute-form (``http://h:1/retrieve``) target."""
    if target.startswith("/"):
        return target.split("?", 1)[0]
    parts = urlsplit(target)
    return (parts.path or "/") if parts.scheme in ("http", "https") and parts.netloc else target.split("?", 1)[0]


def client_gone(sock: socket.socket) -> bool:
    """Whether the client closed its side: the socket is readable and a peek reads nothing (a
    client that pipelined its next request is still there). A client that half-closes its
    output while it waits for the answer reads the same, so it is taken as gone too."""
    try:
        poller = select.poll()  # not select(): it fails for a descriptor over 1023
        poller.register(sock, select.POLLIN)
        events = poller.poll(0)
        if not events:
            return False
        if events[0][1] & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
            return True
        return sock.recv(1, socket.MSG_PEEK) == b""  # readable: returns at once
    except (OSError, ValueError):
        return True


# ------------------------------------------------------------------------------ the connection
def linger(sock: socket.socket, seconds: float = LINGER_S) -> None:
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

    def __init__(self, sock: socket.socket, handler: _Handler) -> None:
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        h, limits = self._handler, self._handler.server.app.limits
        if h.deadline is None:
            self._sock.settimeout(limits.idle_timeout_s)
        else:
            left = h.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("request deadline passed")
            self._sock.settimeout(left)
        n = self._sock.recv_into(buffer)
        if n and h.deadline is None:
            h.deadline = time.monotonic() + limits.request_deadline_s
        return n


class _Handler(BaseHTTPRequestHandler):
    """One connection: reads requests within their deadline and routes them to the app of the
    server that owns the socket (``self.server.app``). Every request gets a JSON answer, or the
    connection closes when the client is gone; nothing escapes to socketserver."""

    protocol_version = "HTTP/1.1"  # keep-alive: a client's session reuses its connection
    server_version = "agentr1"
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
                linger(self.connection)

    @property
    def log(self) -> logging.Logger:
        return self.server.app.log

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
                self._fail(
                    408,
                    f"the request did not arrive within {self.server.app.limits.request_deadline_s:g} s "
                    "(retrieval.server.request_deadline_s)",
                    close=True,
                )
            self.close_connection = True
        except OSError as exc:  # the client went away (reset, broken pipe): nobody to answer
            self.log.debug("%s connection lost: %s", self.client_address[0], exc)
            self.close_connection = True
        except Exception as exc:  # a bug: the client still gets an answer, the log one line
            self.log.debug("unexpected error handling %s", ascii(clip(self.requestline)), exc_info=True)
            self._fail(500, f"internal error ({type(exc).__name__}: {clip(str(exc), 200)})", close=True)

    def _read_and_answer(self) -> None:
        line = self._read_request_line()
        if not line:
            self.close_connection = True
            return
        self.raw_requestline = line
        real = self.rfile
        if len(line.split()) == 3:  # a version word: headers follow (HTTP/0.9 has none), checked line by line
            self.rfile = io.BytesIO(self._read_header_block())
        try:
            parsed = self.parse_request()  # http.server's parser answers its own refusals (send_error)
        finally:
            self.rfile = real
        if not parsed:
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

    def _read_header_block(self) -> bytes:
        """The header lines up to the empty line, each checked (:func:`check_header_line`)."""
        lines = []
        while True:
            line = self.rfile.readline(MAX_LINE_BYTES + 1)
            if len(line) > MAX_LINE_BYTES:
                raise RequestError(431, f"a header line is too long (over {MAX_LINE_BYTES} bytes)", close=True)
            if line in (b"\r\n", b"\n", b""):
                return b"".join(lines) + b"\r\n"
            if len(lines) == MAX_HEADERS:
                raise RequestError(431, f"more than {MAX_HEADERS} header lines", close=True)
            check_header_line(line, len(lines) + 1)
            lines.append(line)

    def _read_body(self) -> bytes:
        """Exactly Content-Length bytes of body (framing errors close the connection)."""
        lengths = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") is not None:
            if lengths:
                raise RequestError(
                    400,
                    "both Transfer-Encoding and Content-Length were sent: send the JSON body with Content-Length only",
                    close=True,
                )
            raise RequestError(
                411, "Transfer-Encoding is not supported: send the JSON body with a Content-Length header", close=True
            )
        length = content_length(lengths, self.server.app.limits.max_body_bytes)
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise RequestError(400, f"the body ended after {len(raw)} of {length} bytes", close=True)
        self._body_read = True
        return raw

    def _declares_body(self) -> bool:
        h = self.headers
        return h is not None and (
            h.get("Transfer-Encoding") is not None or (h.get("Content-Length") or "0").strip() != "0"
        )

    # -- routing ------------------------------------------------------------------------------
    def _route(self) -> None:
        app = self.server.app
        path = request_path(self.path)
        if not _METHOD_TOKEN.fullmatch(self.command):
            raise RequestError(400, f"bad method {describe(self.command)}: use {self._usage()}")
        allowed = app.routes.get(path)
        if allowed is None:
            self._error(404, f"no route {clip(path)}: use {self._usage()}")
        elif self.command != allowed:
            hint = " with a JSON body" if allowed == "POST" else ""
            self._error(405, f"use {allowed} {path}{hint}", allow=allowed)
        else:
            body = None
            if allowed == "POST":
                limits = app.limits
                try:
                    body = decode_json(self._read_body(), limits.max_json_values, limits.max_json_depth)
                except BodyError as exc:
                    raise RequestError(exc.status, str(exc)) from None
            self._send(*app.handle(path, body, lambda: client_gone(self.connection)))

    def _usage(self) -> str:
        return " or ".join(f"{method} {path}" for path, method in self.server.app.routes.items())

    # -- answering ----------------------------------------------------------------------------
    def _send(self, status: int, body: Mapping[str, Any], allow: str | None = None) -> None:
        """Answer JSON (``HEAD``: headers only) and log the request's one line; status 499 (the
        app's "client gone") closes the connection without an answer."""
        if status == 499:
            self._answered, self.close_connection = True, True
            self.log.info("%s %s: client gone, work dropped", self.client_address[0], ascii(clip(self.requestline)))
            return
        self._answered = True
        # surrogates a client smuggled in become \\udXXX escapes: still valid JSON
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        if not self._body_read and self._declares_body():
            self.close_connection = True  # the unread body would be taken for the next request
        self._log(status, body)
        self.connection.settimeout(self.server.app.limits.idle_timeout_s)  # not the reader's deadline remainder
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
            self.log.info(
                "%s %s: failed while answering: %s", self.client_address[0], ascii(clip(self.requestline)), message
            )
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
            self.log.debug("%s %s -> %d", self.client_address[0], ascii(clip(self.requestline)), status)
            return
        level = logging.ERROR if status == 500 else logging.INFO
        self.log.log(
            level,
            "%s %s -> %d %s",
            self.client_address[0],
            ascii(clip(self.requestline)),
            status,
            ascii(str(body.get("error", ""))),
        )

    def log_request(self, code: Any = "-", size: Any = "-") -> None:  # _log writes the request's line
        pass

    def log_message(self, fmt: str, *args: Any) -> None:  # anything else http.server says: DEBUG, not stderr
        self.log.debug("%s %s", self.client_address[0], fmt % args)


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


class JSONHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` serving ``app`` (module docstring) on at most
    ``app.limits.max_connections`` connections at once. Errors escaping a handler are logged in
    one line, not printed."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of rollout workers waits, not refused by the kernel

    def __init__(self, address: tuple[str, int], app: JSONApp) -> None:
        self.app = app
        self.open_connections = 0
        self._count_lock = threading.Lock()
        self._refusals = threading.BoundedSemaphore(app.limits.max_connections)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._count_lock:
            admitted = self.open_connections < self.app.limits.max_connections
            self.open_connections += admitted
        if admitted:
            try:
                super().process_request(request, client_address)
            except BaseException:
                self._release()
                raise
        elif self._refusals.acquire(blocking=False):
            try:
                threading.Thread(
                    target=self._refuse, args=(request, client_address), name="http-refuse", daemon=True
                ).start()
            except BaseException:
                self._refusals.release()
                raise
        else:
            self.app.log.info(
                "%s closed at once: %d connections open and as many being refused",
                client_address[0],
                self.open_connections,
            )
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
            message = (
                f"the server is serving its maximum of {self.app.limits.max_connections} connections "
                "(retrieval.server.max_connections): retry shortly"
            )
            self.app.log.info("%s %s -> 503 %s", client_address[0], ascii(clip(line)), message)
            data = json.dumps({"error": message}).encode()
            sock.settimeout(LINGER_S)
            sock.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
                % len(data)
                + (b"" if head.startswith(b"HEAD ") else data)
            )
            linger(sock)
        except OSError:
            pass
        finally:
            self.shutdown_request(sock)
            self._refusals.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        self.app.log.error("%s connection failed: %s: %s", client_address[0], type(exc).__name__, clip(str(exc), 200))
        self.app.log.debug("traceback", exc_info=True)
