"""The retrieval server (POST /retrieve, GET /health) on loopback and the HTTP client."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest
import requests

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
QUERIES = ["Who founded Quindar Works?", "Miravel river", "capital of Ostrin", "nothing matches zzz"]


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever.build(CORPUS, BM25Config())


@pytest.fixture()
def server(retriever):
    srv = RetrievalServer(retriever, "127.0.0.1", 0, max_queries=4, max_topk=5, default_topk=2,
                          info={"backend": "bm25", "passages": len(CORPUS)})
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
    assert health == {"status": "ok", "max_queries": 4, "max_topk": 5, "default_topk": 2,
                      "backend": "bm25", "passages": 4}


def test_retrieve_search_r1_shape_equals_in_process(server, retriever):
    body = requests.post(server.url + "/retrieve", json={"queries": QUERIES, "topk": 3, "return_scores": True},
                         timeout=5).json()
    expected = retriever.search(QUERIES, 3)
    assert len(body["result"]) == len(QUERIES)
    for items, hits in zip(body["result"], expected):
        assert [it["document"]["id"] for it in items] == [h.id for h in hits]
        assert [it["score"] for it in items] == pytest.approx([h.score for h in hits])
    first = body["result"][0][0]["document"]
    assert first == {"id": "p1", "contents": '"Zorvath Kell"\n' + CORPUS[0]["text"],
                     "title": "Zorvath Kell", "text": CORPUS[0]["text"]}
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
    resp = requests.post(server.url + "/retrieve", data=b"{not json", timeout=5,
                         headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["error"]
    assert requests.get(server.url + "/retrieve", timeout=5).status_code == 405
    assert requests.get(server.url + "/nope", timeout=5).status_code == 404
    assert requests.post(server.url + "/search", json={"queries": ["a"]}, timeout=5).status_code == 404


def test_client_matches_in_process_results_and_batches(server, retriever):
    client = HTTPRetriever(server.url, timeout_s=5, retries=0, max_batch=3)
    queries = QUERIES + ["Belmor", "gears"]  # 6 queries: two requests of at most 3
    assert client.search(queries, 2) == retriever.search(queries, 2)  # JSON floats round-trip exactly
    assert client.health()["status"] == "ok"


def test_client_does_not_retry_a_rejected_request(server, monkeypatch):
    calls = []
    original = requests.Session.request
    monkeypatch.setattr(requests.Session, "request", lambda self, *a, **kw: calls.append(a) or original(self, *a, **kw))
    client = HTTPRetriever(server.url, timeout_s=5, retries=3, backoff_s=0.0)
    with pytest.raises(RetrieverError, match="rejected.*from 1 to 5"):
        client.search(["a"], 9)
    assert len(calls) == 1


class Broken(Retriever):
    def search(self, queries, k):
        raise RetrieverError("index exploded")


def test_server_error_is_500_and_the_client_retries_it(monkeypatch):
    with RetrievalServer(Broken(), "127.0.0.1", 0) as srv:
        resp = requests.post(srv.url + "/retrieve", json={"queries": ["a"]}, timeout=5)
        assert resp.status_code == 500 and "index exploded" in resp.json()["error"]
        calls = []
        original = requests.Session.request
        monkeypatch.setattr(requests.Session, "request",
                            lambda self, *a, **kw: calls.append(a) or original(self, *a, **kw))
        with pytest.raises(RetrieverError, match="HTTP 500"):
            HTTPRetriever(srv.url, timeout_s=5, retries=2, backoff_s=0.0).search(["a"], 1)
        assert len(calls) == 3


def test_client_against_a_closed_port_fails_fast_with_the_fix(monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    calls = []
    original = requests.Session.request
    monkeypatch.setattr(requests.Session, "request", lambda self, *a, **kw: calls.append(a) or original(self, *a, **kw))
    client = HTTPRetriever(url, timeout_s=2, retries=2, backoff_s=0.01)
    t0 = time.monotonic()
    with pytest.raises(RetrieverError) as err:
        client.search(["anything"], 3)
    assert time.monotonic() - t0 < 5  # bounded: 3 refused connections and 0.03 s of backoff
    assert len(calls) == 3
    assert url in str(err.value) and "agentr1 serve-retriever" in str(err.value)


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
    assert json.loads(json.dumps(hit.to_dict())) == {"id": "7", "title": "Some Title", "text": "body text\nmore",
                                                     "score": 1.5}
