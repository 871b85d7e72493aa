"""Seeded fuzzing of the retrieval server over raw sockets: garbled HTTP always gets an answer.

Every request below is random but reproducible (``SEED``): random methods, paths, versions,
headers, Content-Lengths and bodies (valid, garbled, truncated, too deep, huge numbers, NaN,
invalid UTF-8, lone surrogates, a query that makes the retriever fail on purpose). Each must get a
parseable HTTP response with a JSON body (``HEAD``: none), no 5xx other than the deliberate
retriever failure (500) and HTTP/2+ request lines (505), and the server must still answer
``/health`` afterwards. Bounded: socket timeouts of 5 s, a 0.5 s request deadline, 30 s in all.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import socket
import threading
import time

import pytest

from agentr1.config import BM25Config
from agentr1.retrieval.base import Retriever, RetrieverError
from agentr1.retrieval.bm25 import BM25Retriever
from agentr1.retrieval.server import RetrievalServer

SEED = 20240611
SEQUENTIAL = 240
CONCURRENT = 50
FAIL_QUERY = "make the retriever fail"

CORPUS = [
    {"id": "p1", "title": "Zorvath Kell", "text": "Zorvath Kell was born in Miravel and founded Quindar Works."},
    {"id": "p2", "title": "Miravel", "text": "Miravel is a river city in the province of Ostrin."},
]

METHODS = [
    "GET",
    "POST",
    "POST",
    "POST",
    "HEAD",
    "PUT",
    "DELETE",
    "PATCH",
    "OPTIONS",
    "TRACE",
    "CONNECT",
    "get",
    "BREW",
    "G(T",
    "\x00",
    "P\xd8ST",
    "POST" * 40,
]
PATHS = [
    "/retrieve",
    "/retrieve",
    "/retrieve",
    "/health",
    "/",
    "/retrieve?x=1",
    "//retrieve",
    "*",
    "/%00",
    "http://h/retrieve",
    "/health/../retrieve",
    "/\xff\xfe",
    "/" + "a" * 5000,
]
VERSIONS = [
    "HTTP/1.1",
    "HTTP/1.1",
    "HTTP/1.1",
    "HTTP/1.0",
    "HTTP/2.0",
    "HTTP/1.x",
    "HTTP/1",
    "http/1.1",
    "HTTP/1.1 extra",
    "",
    "HTTP/99999999999.1",
    "HTTP/1.\xb2",
]
JUNK_HEADERS = [
    "X-Junk: \x01\x02",
    "no colon here",
    " folded continuation",
    "Content-Type: text/plain",
    "Transfer-Encoding: chunked",
    "Expect: 100-continue",
    "Connection: close",
    "Connection: keep-alive",
    "Content-Length: 3",
    "X-Long: " + "v" * 70_000,
    "Host: " + "\xe9" * 10,
    ":",
    "X-Empty:",
]


class FailOnPurpose(Retriever):
    """The tiny BM25 retriever, except that it raises on ``FAIL_QUERY``."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    def search(self, queries, k):
        if FAIL_QUERY in queries:
            raise RetrieverError("failing on purpose")
        return self.inner.search(queries, k)


def json_value(rng: random.Random, depth: int = 0) -> str:
    """Random JSON-ish text: mostly valid, sometimes not (NaN, huge numbers, bad escapes)."""
    pick = rng.randrange(16 if depth < 3 else 10)
    if pick == 0:
        return str(rng.randint(-3, 60))
    if pick == 1:
        return rng.choice(["1" * rng.choice([30, 4000, 5000]), "1e999", "-0.0", "3.0", "9" * 400 + ".5"])
    if pick == 2:
        return rng.choice(["true", "false", "null", "NaN", "Infinity", "-Infinity", "nul", "tru"])
    if pick in (3, 4, 5):
        return json.dumps(rng.choice(["Miravel river", "Zorvath", "", "q" * rng.choice([10, 5000]), FAIL_QUERY]))
    if pick == 6:
        return rng.choice(['"\\ud800"', '"\\udfff x"', '"\\u00zz"', '"unterminated', '"tab\there"', '"\\x41"'])
    if pick in (7, 8, 9):
        return json.dumps(rng.choice(["", "Ostrin", "é" * 30]))
    if pick in (10, 11, 12):
        return "[" + ",".join(json_value(rng, depth + 1) for _ in range(rng.randrange(5))) + "]"
    return (
        "{"
        + ",".join(
            f'"{rng.choice(["queries", "topk", "return_scores", "x"])}": {json_value(rng, depth + 1)}'
            for _ in range(rng.randrange(4))
        )
        + "}"
    )


def random_body(rng: random.Random) -> bytes:
    pick = rng.randrange(12)
    if pick >= 10:  # a valid request
        return json.dumps(
            {
                "queries": rng.sample(["Miravel river", "Zorvath Kell", "gears"], rng.randint(1, 3)),
                "topk": rng.randint(1, 5),
                "return_scores": rng.random() < 0.5,
            }
        ).encode()
    if pick <= 3:  # a well-formed /retrieve body with random values
        fields = {
            "queries": "[" + ",".join(json_value(rng, 2) for _ in range(rng.randrange(1, 6))) + "]",
            "topk": json_value(rng, 3),
            "return_scores": rng.choice(["true", "false", json_value(rng, 3)]),
        }
        keep = [k for k in fields if rng.random() < 0.8]
        return ("{" + ",".join(f'"{k}": {fields[k]}' for k in keep) + "}").encode("utf-8", "surrogatepass")
    if pick == 4:
        return json_value(rng).encode("utf-8", "surrogatepass")
    if pick == 5:
        return rng.choice([b"[" * rng.choice([500, 100_000]), b"{" * 50_000, b'{"a":' * 20_000])
    if pick == 6:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if pick == 7:
        return b'{"queries": ["\xff\xfe\xc3\x28"]}'
    if pick == 8:
        return b""
    return json.dumps({"queries": [FAIL_QUERY], "topk": 1}).encode()


def random_request(rng: random.Random, *, allow_truncated_wait: bool = False) -> tuple[bytes, dict]:
    """Raw request bytes and what the client does with them: ``half_close`` (send EOF after)."""
    framed = rng.random() < 0.4  # a well-framed POST /retrieve: the fuzz reaches validation and the retriever
    if framed:
        method, path, version = "POST", "/retrieve", "HTTP/1.1"
    else:
        method, path, version = rng.choice(METHODS), rng.choice(PATHS), rng.choice(VERSIONS)
    line = " ".join(part for part in (method, path, version) if part)
    headers = ["Host: fuzz"] + ([] if framed else rng.sample(JUNK_HEADERS, rng.randrange(3)))
    body = random_body(rng) if method != "GET" or rng.random() < 0.2 else b""
    length = (
        "exact"
        if framed
        else rng.choice(["exact"] * 6 + ["missing", "short", "long", "negative", "garbage", "digits", "huge", "twice"])
    )
    value = {
        "exact": str(len(body)),
        "short": str(max(len(body) - 3, 0)),
        "long": str(len(body) + 7),
        "negative": "-1",
        "garbage": rng.choice(["ten", "1 2", "0x10", "", "+5"]),
        "digits": rng.choice(["\xb2", "\u0661\u0662", "\uff11"]),
        "huge": "9" * rng.choice([20, 5000]),
        "twice": str(len(body)),
    }.get(length)
    if value is not None:
        headers.append(f"Content-Length: {value}")
    if length == "twice":
        headers.append(f"Content-Length: {len(body) + 1}")
    head = (line + "\r\n" + "\r\n".join(headers) + "\r\n\r\n").encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        head = rng.choice([b"\r\n", b"\r\n\r\n"]) + head  # empty lines before the request line are allowed
    if not framed and rng.random() < 0.05:
        head = head[: rng.randrange(1, len(head))]  # cut in the request line or the headers
        body = b""
    # "long" bodies and cut heads wait for more input unless the client half-closes
    half_close = not allow_truncated_wait or rng.random() < 0.7
    return head + body, {
        "method": method,
        "version": version,
        "half_close": half_close,
        "fails": FAIL_QUERY.encode() in body,
    }


def exchange(addr, data: bytes, plan: dict) -> tuple[int, bytes]:
    """Send ``data``; parse one response (status, body)."""
    with socket.create_connection(addr, timeout=5) as sock:
        try:
            sock.sendall(data)
            if plan["half_close"]:
                sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server answered and closed before reading everything: read its answer
            pass
        resp = http.client.HTTPResponse(sock, method=plan["method"])
        resp.begin()
        return resp.status, resp.read()


def check(status: int, body: bytes, plan: dict, data: bytes) -> None:
    where = f"{data[:160]!r} -> {status} {body[:200]!r}"
    if plan["method"] == "HEAD" and status != 503:
        assert body == b"", where
    else:
        answer = json.loads(body)
        assert isinstance(answer, dict) and ("error" in answer) != (status < 300), where
    if status >= 500:
        allowed = {500} if plan["fails"] else set()
        if plan["version"].startswith("HTTP/") and plan["version"][5:6].isdigit() and plan["version"][5:6] != "1":
            allowed.add(505)
        assert status in allowed, where


@pytest.mark.timeout(60)
def test_garbled_requests_always_get_a_json_answer(caplog, capfd):
    caplog.set_level(logging.INFO, logger="agentr1.retrieval.server")
    inner = BM25Retriever.build(CORPUS, BM25Config())
    rng = random.Random(SEED)
    t0 = time.monotonic()
    with RetrievalServer(
        FailOnPurpose(inner),
        "127.0.0.1",
        0,
        max_queries=4,
        max_topk=5,
        max_query_chars=1000,
        request_deadline_s=0.5,
        max_connections=CONCURRENT + 14,
    ) as srv:
        addr = srv.httpd.server_address[:2]
        statuses = []
        for _ in range(SEQUENTIAL):
            data, plan = random_request(rng)
            try:
                status, body = exchange(addr, data, plan)
            except (http.client.HTTPException, OSError) as exc:
                if not data.strip(b"\r\n"):
                    continue  # nothing but empty lines: no request, no answer
                raise AssertionError(f"{data[:160]!r}: no parseable answer ({exc!r})") from None
            check(status, body, plan, data)
            statuses.append(status)

        plans = [random_request(random.Random(SEED + i), allow_truncated_wait=True) for i in range(CONCURRENT)]
        results: list = [None] * CONCURRENT

        def worker(i: int) -> None:
            try:
                results[i] = exchange(addr, *plans[i])
            except BaseException as exc:  # reported below, in the test thread
                results[i] = exc

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(CONCURRENT)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=15)
        for (data, plan), result in zip(plans, results):
            assert isinstance(result, tuple), f"{data[:160]!r}: no parseable answer ({result!r})"
            check(*result, plan, data)
            statuses.append(result[0])

        health = http.client.HTTPConnection(*addr, timeout=5)
        health.request("GET", "/health")
        assert health.getresponse().status == 200
        health.close()
    assert len(statuses) >= 200 + CONCURRENT - 10
    assert len(set(statuses)) >= 8  # the fuzz reached many answers, not one refusal over and over
    assert 200 in statuses and 500 in statuses
    assert time.monotonic() - t0 < 30
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.exc_info]
    assert all("failing on purpose" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
