"""The retrieval server (POST /retrieve, GET /health) on loopback and the HTTP client."""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import logging
import re
import socket
import threading
import time
from pathlib import Path

import pytest
import requests
import urllib3

from agentr1.config import BM25Config
from agentr1.retrieval.base import Hit, Retriever, RetrieverError
from agentr1.retrieval.bm25 import BM25Retriever
from agentr1.retrieval.client import HTTPRetriever, hit_from_item
from agentr1.retrieval.server import RetrievalServer

CORPUS = [
    {"id": "p1", "title": "Zorvath Kell", "text": "Zorvath Kell was born in Miravel and founded Quindar Works."},
    {"id": "p2", "title": "Miravel", "text": "Miravel is a river city in the province of Ostrin."},
    {"id": "p3", "title": "Quindar Works", "text": "Quindar Works is a company that makes brass gears."},
    {"id": "p4", "title": "Ostrin", "text": "Ostrin is a mountainous province; its capital is Belmor."},
]
REPO_ROOT = Path(__file__).resolve().parents[1]
QUERIES = ["Who founded Quindar Works?", "Miravel river", "capital of Ostrin", "nothing matches zzz"]


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever.build(CORPUS, BM25Config())


@pytest.fixture()
def server(retriever):
    srv = RetrievalServer(
        retriever,
        "127.0.0.1",
        0,
        max_queries=4,
        max_topk=5,
        default_topk=2,
        info={"backend": "bm25", "passages": len(CORPUS)},
    )
    with srv:
        yield srv


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_binds_loopback_and_reports_health(server):
    assert server.url.startswith("http://127.0.0.1:")
    health = requests.get(server.url + "/health", timeout=5).json()
    assert health == {
        "status": "ok",
        "max_queries": 4,
        "max_topk": 5,
        "default_topk": 2,
        "max_query_chars": 4096,
        "backend": "bm25",
        "passages": 4,
    }


def test_retrieve_search_r1_shape_equals_in_process(server, retriever):
    body = requests.post(
        server.url + "/retrieve", json={"queries": QUERIES, "topk": 3, "return_scores": True}, timeout=5
    ).json()
    expected = retriever.search(QUERIES, 3)
    assert len(body["result"]) == len(QUERIES)
    for items, hits in zip(body["result"], expected):
        assert [it["document"]["id"] for it in items] == [h.id for h in hits]
        assert [it["score"] for it in items] == pytest.approx([h.score for h in hits])
    first = body["result"][0][0]["document"]
    assert first == {
        "id": "p1",
        "contents": '"Zorvath Kell"\n' + CORPUS[0]["text"],
        "title": "Zorvath Kell",
        "text": CORPUS[0]["text"],
    }
    assert body["result"][3] == []


def test_retrieve_without_scores_returns_bare_documents_and_default_topk(server, retriever):
    body = requests.post(server.url + "/retrieve", json={"queries": ["Ostrin province Miravel"]}, timeout=5).json()
    docs = body["result"][0]
    assert len(docs) == 2  # default_topk
    assert [d["id"] for d in docs] == [h.id for h in retriever.search(["Ostrin province Miravel"], 2)[0]]
    assert all(set(d) == {"id", "contents", "title", "text"} for d in docs)


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"queries": []}, 422, "non-empty list"),
        ({"queries": "one string"}, 422, "non-empty list"),
        ({"topk": 3}, 422, "non-empty list"),
        ({"queries": ["a"] * 5}, 422, "at most 4 queries"),
        ({"queries": ["a", 3]}, 422, r"queries\[1\] must be a string"),
        ({"queries": ["a"], "topk": 0}, 422, "from 1 to 5"),
        ({"queries": ["a"], "topk": 6}, 422, "from 1 to 5"),
        ({"queries": ["a"], "topk": "3"}, 422, "from 1 to 5"),
        ({"queries": ["a"], "topk": True}, 422, "from 1 to 5"),
        ({"queries": ["a"], "return_scores": "yes"}, 422, "return_scores"),
        (["a", "b"], 400, "JSON object"),
    ],
)
def test_bad_requests_get_4xx_with_a_message(server, payload, status, message):
    resp = requests.post(server.url + "/retrieve", json=payload, timeout=5)
    assert resp.status_code == status
    assert re.search(message, resp.json()["error"])


def test_malformed_body_and_unknown_routes(server):
    resp = requests.post(
        server.url + "/retrieve", data=b"{not json", timeout=5, headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["error"]
    assert requests.get(server.url + "/retrieve", timeout=5).status_code == 405
    assert requests.get(server.url + "/nope", timeout=5).status_code == 404
    assert requests.post(server.url + "/search", json={"queries": ["a"]}, timeout=5).status_code == 404


def test_client_matches_in_process_results_and_batches(server, retriever):
    client = HTTPRetriever(server.url, timeout_s=5, retries=0, max_batch=3)
    queries = QUERIES + ["Belmor", "gears"]  # 6 queries: two requests of at most 3
    assert client.search(queries, 2) == retriever.search(queries, 2)  # JSON floats round-trip exactly
    assert client.health()["status"] == "ok"


@pytest.fixture()
def wire(monkeypatch) -> list[str]:
    """Every HTTP attempt urllib3 makes (its retries included), as ``"METHOD url"``."""
    calls: list[str] = []
    original = urllib3.connectionpool.HTTPConnectionPool._make_request

    def counted(self, conn, method, url, *args, **kwargs):
        calls.append(f"{method} {url}")
        return original(self, conn, method, url, *args, **kwargs)

    monkeypatch.setattr(urllib3.connectionpool.HTTPConnectionPool, "_make_request", counted)
    return calls


def test_client_does_not_retry_a_rejected_request(server, wire):
    client = HTTPRetriever(server.url, timeout_s=5, retries=3, backoff_s=0.0)
    with pytest.raises(RetrieverError, match="rejected.*from 1 to 5"):
        client.search(["a"], 9)
    assert wire == ["POST /retrieve"]


class Broken(Retriever):
    def search(self, queries, k):
        raise RetrieverError("index exploded")


def test_server_error_is_500_and_the_client_does_not_retry_it(wire):
    with RetrievalServer(Broken(), "127.0.0.1", 0) as srv:
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["a"]}, timeout=5)
        assert resp.status_code == 500 and "index exploded" in resp.json()["error"]
        wire.clear()
        with pytest.raises(RetrieverError, match=r"HTTP 500: .*index exploded.*; 1 attempt\(s\)"):
            HTTPRetriever(srv.url, timeout_s=5, retries=2, backoff_s=0.0).search(["a"], 1)
        assert wire == ["POST /retrieve"]  # the same request would fail the same way


class Flaky(http.server.BaseHTTPRequestHandler):
    """Answers ``fail`` POSTs with 503, then a one-hit /retrieve body; counts them in ``seen``."""

    fail = 0
    seen: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append(self.path)
        if len(type(self).seen) <= type(self).fail:
            status, body = 503, b'{"error": "busy"}'
        else:
            status, body = (
                200,
                json.dumps({"result": [[{"document": {"id": "1", "title": "t", "text": "x"}, "score": 2.0}]]}).encode(),
            )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def flaky():
    Flaky.fail, Flaky.seen = 0, []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield Flaky, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_client_retries_503_and_posts_again(flaky):
    handler, url = flaky
    handler.fail = 2
    hits = HTTPRetriever(url, timeout_s=5, retries=2, backoff_s=0.01).search(["q"], 1)
    assert hits == [[Hit("1", "t", "x", 2.0)]]
    assert handler.seen == ["/retrieve"] * 3  # POST retried: /retrieve only reads the index
    handler.fail, handler.seen[:] = 10, []
    with pytest.raises(RetrieverError, match=r"HTTP 503: .*busy.*; 2 attempt\(s\)") as err:
        HTTPRetriever(url, timeout_s=5, retries=1, backoff_s=0.0).search(["q"], 1)
    assert handler.seen == ["/retrieve"] * 2 and url in str(err.value)


def test_client_retry_policy_comes_from_its_parameters():
    policy = (
        HTTPRetriever("http://127.0.0.1:9", retries=4, backoff_s=0.5)._session().get_adapter("http://x").max_retries
    )
    assert (policy.total, policy.backoff_factor, policy.raise_on_status) == (4, 0.5, False)
    assert set(policy.allowed_methods) == {"GET", "POST"} and set(policy.status_forcelist) == {502, 503, 504}


def test_client_against_a_closed_port_fails_fast_with_the_fix(wire):
    url = f"http://127.0.0.1:{free_port()}"
    client = HTTPRetriever(url, timeout_s=2, retries=2, backoff_s=0.01)
    t0 = time.monotonic()
    with pytest.raises(RetrieverError) as err:
        client.search(["anything"], 3)
    assert time.monotonic() - t0 < 5  # bounded: 3 refused connections and 0.02 s of backoff
    assert wire == ["POST /retrieve"] * 3
    assert url in str(err.value) and "agentr1 serve-retriever" in str(err.value) and "3 attempt(s)" in str(err.value)


def test_server_stops_and_releases_the_port(retriever):
    srv = RetrievalServer(retriever, "127.0.0.1", 0).start()
    url = srv.url
    assert requests.get(url + "/health", timeout=5).status_code == 200
    srv.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "/health", timeout=2)


def test_hit_from_a_search_r1_document_without_title_fields():
    hit = hit_from_item({"document": {"id": "7", "contents": '"Some Title"\nbody text\nmore'}, "score": 1.5})
    assert hit == Hit("7", "Some Title", "body text\nmore", 1.5)
    assert hit_from_item({"id": "8", "contents": "no title line"}) == Hit("8", "no title line", "", 0.0)
    assert json.loads(json.dumps(hit.to_dict())) == {
        "id": "7",
        "title": "Some Title",
        "text": "body text\nmore",
        "score": 1.5,
    }


# ------------------------------------------------------------------ hardening: raw HTTP on sockets
SERVER_LOG = "agentr1.retrieval.server"


def exchange(
    srv, data: bytes, *, method: str = "GET", half_close: bool = True, timeout: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes on a fresh connection; parse one HTTP response -> (status, headers, body)."""
    with socket.create_connection(srv.httpd.server_address[:2], timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()


def post(body: bytes, *headers: bytes, length: bytes | None = None) -> bytes:
    """A raw ``POST /retrieve`` with ``body``; ``length`` overrides the Content-Length header."""
    length = str(len(body)).encode() if length is None else length
    head = [
        b"POST /retrieve HTTP/1.1",
        b"Host: t",
        b"Content-Type: application/json",
        *([b"Content-Length: " + length] if length != b"" else []),
        *headers,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def wait_idle(srv, timeout: float = 5.0) -> None:
    """Until the server has closed every connection (its log lines for them are written)."""
    end = time.monotonic() + timeout
    while srv.open_connections and time.monotonic() < end:
        time.sleep(0.01)
    assert srv.open_connections == 0


HUGE_TOPK = b'{"queries": ["a"], "topk": ' + b"1" * 5000 + b"}"
BAD_REQUESTS = {
    # name: (raw request, expected status, regex the error message matches)
    "deep_nesting": (post(b"[" * 100_000), 413, "100001 JSON values; at most 20"),  # counted before decoding
    "nesting_within_the_value_bound": (post(b"[" * 12 + b"]" * 12), 400, "nested 12 deep"),
    "topk_of_5000_digits": (post(HUGE_TOPK), 422, "topk must be an integer.*5000-digit"),
    "topk_huge_float": (post(b'{"queries": ["a"], "topk": 1e999}'), 422, "topk must be an integer"),
    "topk_long_float": (post(b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b".5}"), 422, "topk must be an integer"),
    "topk_boolean": (post(b'{"queries": ["a"], "topk": true}'), 422, "topk must be an integer"),
    "nan_literal": (post(b'{"queries": ["a"], "topk": NaN}'), 400, "NaN"),
    "infinity_literal": (post(b'{"queries": ["a"], "return_scores": -Infinity}'), 400, "Infinity"),
    "invalid_utf8": (post(b'{"queries": ["\xff\xfe\xc3"]}'), 400, "UTF-8"),
    "lone_surrogate_query": (post(b'{"queries": ["\\ud800 x"]}'), 422, r"queries\[0\].*surrogate"),
    "non_object_with_huge_int": (post(b"[" + b"7" * 5000 + b"]"), 400, "JSON object"),
    "cl_superscript_digit": (post(b"{}", length=b"\xb2"), 400, "Content-Length"),
    "cl_arabic_indic_digits": (post(b"{}", length="١٢".encode()), 400, "Content-Length"),
    "cl_garbage": (post(b"{}", length=b"12abc"), 400, "Content-Length"),
    "cl_negative": (post(b"{}", length=b"-5"), 400, "Content-Length"),
    "cl_5000_digits": (post(b"{}", length=b"9" * 5000), 413, "exceeds"),
    "cl_conflicting": (post(b"{}", b"Content-Length: 3"), 400, "Content-Length"),
    "cl_missing": (post(b"{}", length=b""), 411, "Content-Length"),
    "chunked": (post(b"2\r\n{}\r\n0\r\n\r\n", b"Transfer-Encoding: chunked", length=b""), 411, "Content-Length"),
    "truncated_body": (post(b'{"queries": ["a"]', length=b"40"), 400, "ended after 17 of 40 bytes"),
    "http_0_9": (b"GET /health\r\n\r\n", 400, "HTTP/0.9"),
    "garbage_request_line": (b"\x00\x01\x02\r\n\r\n", 400, "(?i)bad request (line|syntax)"),
    "blank_request_line": (b"   \t \r\n\r\n", 400, "request line"),
    "header_too_long": (b"GET /health HTTP/1.1\r\nX: " + b"x" * 70_000 + b"\r\n\r\n", 431, "too long"),
    "unknown_method": (b"BREW /retrieve HTTP/1.1\r\nHost: t\r\n\r\n", 405, "POST /retrieve"),
    "bad_method_token": (b"G(T /health HTTP/1.1\r\nHost: t\r\n\r\n", 400, "method"),
    # issue 26 item 9: framing the server used to misread or accept
    "te_space_before_colon": (
        post(b"{}", b"Transfer-Encoding : chunked"),
        400,
        "whitespace between the name 'Transfer-Encoding' and the colon",
    ),
    "obs_fold_header": (post(b'{"queries": ["a"]}', b"X-Note: one", b" two"), 400, "obs-fold"),
    "nul_in_header": (post(b'{"queries": ["a"]}', b"X-Note: a\x00b"), 400, "control character"),
    "te_and_content_length": (post(b"{}", b"Transfer-Encoding: chunked"), 400, "both Transfer-Encoding and"),
    "unknown_body_key": (
        post(b'{"queries": ["a"], "top_k": 3}'),
        422,
        "unknown key 'top_k': the allowed keys are queries, topk, return_scores",
    ),
    # issue 26 item 3: a valid body of many tiny values is refused before it is decoded
    "many_tiny_values": (post(b'{"queries": [' + b",".join([b"[]"] * 50_000) + b"]}"), 413, "JSON values"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_bad_request_gets_json_4xx_and_one_log_line(server, name, caplog, capfd):
    raw, status, message = BAD_REQUESTS[name]
    caplog.set_level(logging.INFO, logger=SERVER_LOG)
    got, headers, body = exchange(server, raw)
    assert got == status, body[:300]
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert re.search(message, error) and len(error) < 300
    wait_idle(server)
    lines = [r for r in caplog.records if r.name == SERVER_LOG]
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage()[:200] for r in lines]
    assert str(status) in lines[0].getMessage() and len(lines[0].getMessage()) < 600
    assert "Traceback" not in capfd.readouterr().err
    assert requests.get(server.url + "/health", timeout=5).status_code == 200


class Garbled(Retriever):
    """A retriever whose answer is not hits: the handler fails after the search."""

    def search(self, queries, k):
        return [[object()] for _ in queries]


def test_unexpected_handler_exception_is_json_500_with_one_log_line(caplog, capfd):
    caplog.set_level(logging.INFO, logger=SERVER_LOG)
    with RetrievalServer(Garbled(), "127.0.0.1", 0) as srv:
        status, headers, body = exchange(srv, post(b'{"queries": ["a"]}'))
        assert status == 500 and headers["content-type"] == "application/json"
        assert "AttributeError" in json.loads(body)["error"]
        wait_idle(srv)
        lines = [r for r in caplog.records if r.name == SERVER_LOG]
        assert len(lines) == 1 and "AttributeError" in lines[0].getMessage() and lines[0].levelno == logging.ERROR
        assert "Traceback" not in capfd.readouterr().err
        assert requests.get(srv.url + "/health", timeout=5).status_code == 200


def test_retriever_failure_is_one_log_line(caplog, capfd):
    caplog.set_level(logging.INFO, logger=SERVER_LOG)
    with RetrievalServer(Broken(), "127.0.0.1", 0) as srv:
        assert exchange(srv, post(b'{"queries": ["a"]}'))[0] == 500
        wait_idle(srv)
    lines = [r for r in caplog.records if r.name == SERVER_LOG]
    assert len(lines) == 1 and "index exploded" in lines[0].getMessage() and lines[0].exc_info is None
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
@pytest.mark.parametrize(("path", "allow"), [("/retrieve", "POST"), ("/health", "GET")])
def test_other_methods_get_json_405_with_allow(server, method, path, allow):
    with socket.create_connection(server.httpd.server_address[:2], timeout=5) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        assert resp.status == 405 and resp.getheader("Allow") == allow
        assert resp.getheader("Content-Type") == "application/json"
        body = resp.read()
        if method == "HEAD":  # no body: the next response on this connection starts right away
            assert body == b""
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            after = http.client.HTTPResponse(sock, method="GET")
            after.begin()
            assert after.status == 200 and json.loads(after.read())["status"] == "ok"
        else:
            assert f"{allow} {path}" in json.loads(body)["error"]


def test_query_length_is_capped(retriever):
    with RetrievalServer(retriever, "127.0.0.1", 0, max_query_chars=64) as srv:
        ok = requests.post(srv.url + "/retrieve", json={"queries": ["q" * 64]}, timeout=5)
        assert ok.status_code == 200
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["Miravel", "q" * 65]}, timeout=5)
        assert resp.status_code == 422
        assert re.search(r"queries\[1\] has 65 characters.*at most 64", resp.json()["error"])
        assert srv.health()["max_query_chars"] == 64


def test_error_messages_never_echo_unbounded_input(server):
    resp = requests.post(server.url + "/retrieve", json={"queries": ["a"], "topk": "x" * 1_000_000}, timeout=30)
    assert resp.status_code == 422 and len(resp.content) < 400, resp.content[:200]
    resp = requests.get(server.url + "/" + "n" * 60_000, timeout=5)
    assert resp.status_code == 404 and len(resp.content) < 400
    resp = requests.post(server.url + "/retrieve", json={"queries": [["nested"] * 100_000]}, timeout=5)
    assert resp.status_code == 413 and len(resp.content) < 400  # counted before decoding (issue 26 item 3)
    resp = requests.post(server.url + "/retrieve", json={"queries": [["nested"] * 3]}, timeout=5)
    assert resp.status_code == 422 and len(resp.content) < 400


def test_a_slow_client_is_cut_off_at_the_request_deadline(retriever):
    """One byte every 0.1 s kept the connection forever (the timeout was per read)."""
    with RetrievalServer(retriever, "127.0.0.1", 0, request_deadline_s=0.5) as srv:
        with socket.create_connection(srv.httpd.server_address[:2], timeout=5) as sock:
            t0 = time.monotonic()
            request = b"POST /retrieve HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"z" * 100
            try:
                for byte in request:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.1)
            except OSError:  # the server gave up on us: good
                pass
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            assert resp.status == 408 and "0.5" in json.loads(resp.read())["error"]
            assert time.monotonic() - t0 < 3
        # a body that never completes gets the same answer
        status, _, body = exchange(srv, post(b'{"queries"', length=b"50"), half_close=False)
        assert status == 408
        assert requests.get(srv.url + "/health", timeout=5).status_code == 200


def test_connections_beyond_the_cap_get_503(retriever):
    with RetrievalServer(retriever, "127.0.0.1", 0, max_connections=2) as srv:
        addr = srv.httpd.server_address[:2]
        held = [socket.create_connection(addr, timeout=5) for _ in range(2)]
        try:
            for sock in held:
                sock.sendall(b"GET /hea")  # a request under way: the connection holds its slot
            end = time.monotonic() + 5
            while srv.open_connections < 2 and time.monotonic() < end:
                time.sleep(0.01)
            status, headers, body = exchange(srv, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            assert status == 503 and "max_connections" in json.loads(body)["error"]
            assert headers["content-type"] == "application/json" and headers["retry-after"]
        finally:
            for sock in held:
                sock.close()
        wait_idle(srv)
        assert requests.get(srv.url + "/health", timeout=5).status_code == 200


def test_server_limits_are_validated_params(repo_root):
    from pydantic import ValidationError

    from agentr1.config import ServerConfig, load_config

    scfg = load_config(repo_root / "params.yaml").retrieval.server
    assert scfg.host == "127.0.0.1"
    assert (scfg.max_query_chars, scfg.request_deadline_s, scfg.max_connections) == (4096, 10.0, 128)
    for field in ("max_query_chars", "request_deadline_s", "max_connections"):
        with pytest.raises(ValidationError):
            ServerConfig(**{field: 0})


def test_run_server_passes_the_limits(retriever, monkeypatch):
    from agentr1.config import load_config
    from agentr1.retrieval import factory
    from agentr1.retrieval import server as server_module

    cfg = load_config(REPO_ROOT / "params.yaml")
    cfg.retrieval.server.max_query_chars = 77
    cfg.retrieval.server.request_deadline_s = 1.5
    cfg.retrieval.server.max_connections = 9
    seen = {}

    def fake_serve(self):
        seen.update(
            host=self.httpd.server_address[0],
            chars=self.max_query_chars,
            deadline=self.request_deadline_s,
            conns=self.max_connections,
        )
        raise KeyboardInterrupt

    monkeypatch.setattr(factory, "load_index", lambda *a: retriever)
    monkeypatch.setattr(server_module.RetrievalServer, "serve_forever", fake_serve)
    monkeypatch.setattr(server_module.signal, "signal", lambda *a: None)
    server_module.run_server(cfg, argparse.Namespace(host=None, port=0))
    assert seen == {"host": "127.0.0.1", "chars": 77, "deadline": 1.5, "conns": 9}


# ------------------------------------------------------------------ issue 26: bounded work, HTTP details
class Counting(Retriever):
    """Counts the queries it searched; ``delay`` seconds per search call."""

    def __init__(self, delay: float = 0.0):
        self.delay, self.searched = delay, 0

    def search(self, queries, k):
        time.sleep(self.delay)
        self.searched += len(queries)
        return [[Hit("p1", "T", "text", 1.0)] for _ in queries]


def test_work_over_the_request_budget_is_refused_before_any_search():
    """Item 2: one 2.1 MB request (512 queries of 4,096 characters, topk 50) took 13.5 s of server CPU."""
    retriever = Counting()
    with RetrievalServer(retriever, "127.0.0.1", 0) as srv:
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["word " * 819] * 512, "topk": 50}, timeout=60)
        assert resp.status_code in (413, 422) and "retrieval.server.max_" in resp.json()["error"], resp.text[:300]
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["word " * 819] * 17, "topk": 50}, timeout=60)
        assert resp.status_code == 422 and "retrieval.server.max_request_chars" in resp.json()["error"]
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["q"] * 100, "topk": 50}, timeout=10)
        assert resp.status_code == 422 and "= 5000 results; at most 4096" in resp.json()["error"]
        assert retriever.searched == 0
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["word " * 819] * 16, "topk": 50}, timeout=60)
        assert resp.status_code == 200  # the largest request within the budget is served


def test_an_answer_over_the_response_cap_is_refused_before_it_is_serialized():
    with RetrievalServer(Counting(), "127.0.0.1", 0, max_response_bytes=1000) as srv:
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["q"] * 20}, timeout=10)
        assert resp.status_code == 422 and "retrieval.server.max_response_bytes" in resp.json()["error"]


def test_work_is_dropped_when_the_client_hangs_up(caplog):
    """Item 2: after the client hung up, the server kept computing ~6 s."""
    caplog.set_level(logging.INFO, logger=SERVER_LOG)
    retriever = Counting(delay=0.3)
    with RetrievalServer(retriever, "127.0.0.1", 0) as srv:
        body = json.dumps({"queries": [f"query {i}" for i in range(320)]}).encode()  # 5 chunks of 64
        with socket.create_connection(srv.httpd.server_address[:2], timeout=5) as sock:
            sock.sendall(post(body))
            time.sleep(0.1)
        time.sleep(2.0)
        assert retriever.searched <= 128, retriever.searched
        wait_idle(srv)
    assert any("client gone" in r.getMessage() for r in caplog.records if r.name == SERVER_LOG)


def test_an_absolute_form_target_is_served(server):
    """Item 9: RFC 9112 3.2.2: a server must accept the absolute form (it used to answer 404)."""
    host, port = server.httpd.server_address[:2]
    raw = post(b'{"queries": ["Miravel river"], "topk": 1}').replace(
        b"POST /retrieve ", f"POST http://{host}:{port}/retrieve ".encode()
    )
    status, _, body = exchange(server, raw)
    assert status == 200 and json.loads(body)["result"][0][0]["id"] == "p2"
    status, _, body = exchange(server, f"GET http://{host}:{port}/health?x=1 HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    assert status == 200 and json.loads(body)["status"] == "ok"
