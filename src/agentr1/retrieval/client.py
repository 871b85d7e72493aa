"""HTTP client for a retrieval server speaking the Search-R1 ``POST /retrieve`` API.

It works against ``agentr1 serve-retriever`` and against Search-R1/verl retrieval servers (it
always asks for scores and reads the ``document`` fields ``id``, ``title``, ``text``, falling back
to splitting Search-R1's ``contents`` = ``"Title"`` newline text when ``title``/``text`` are
absent). Retries are urllib3's :class:`~urllib3.util.Retry` mounted on each thread's
``requests.Session``: connection failures, timeouts and 502/503/504 answers (a proxy or the
server's connection cap, which sends ``Retry-After``; honoured) are retried up to ``retries`` times
in all, for GET and POST alike (``POST /retrieve`` only reads the index, so it is idempotent). The
waits follow urllib3's schedule with ``backoff_factor = backoff_s``: none before the first retry,
then ``backoff_s * 2 ** (k - 1)`` before retry k >= 2 (capped at urllib3's 120 s). A 4xx answer
and a 500 (the server's retriever raised: the same request fails the same way) are not retried.
What finally fails is a :class:`RetrieverError` naming the URL, the attempts and the fix.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError
from urllib3.exceptions import TimeoutError as Urllib3Timeout
from urllib3.util import Retry

from agentr1.retrieval.base import Hit, Retriever, RetrieverError, check_search_args


def _split_contents(contents: str) -> tuple[str, str]:
    title, _, text = contents.partition("\n")
    return title.strip().strip('"'), text


RETRY_STATUSES = (502, 503, 504)  # transient: a proxy in between, or the server's connection cap
RETRY_METHODS = ("GET", "POST")  # /health and /retrieve: both idempotent


def hit_from_item(item: Any) -> Hit:
    """One result entry (``{"document": {...}, "score": s}`` or a bare document) -> :class:`Hit`."""
    doc, score = (
        (item["document"], item.get("score", 0.0)) if isinstance(item, dict) and "document" in item else (item, 0.0)
    )
    if not isinstance(doc, dict):
        raise RetrieverError(f"unexpected document in the server's answer: {doc!r:.200}")
    title, text = doc.get("title"), doc.get("text")
    if title is None or text is None:
        title, text = _split_contents(str(doc.get("contents", "")))
    return Hit(id=str(doc.get("id", "")), title=str(title), text=str(text), score=float(score or 0.0))


class HTTPRetriever(Retriever):
    """:class:`Retriever` over ``POST {url}/retrieve`` with timeouts and bounded retries."""

    def __init__(
        self, url: str, timeout_s: float = 10.0, retries: int = 2, backoff_s: float = 0.2, max_batch: int = 512
    ) -> None:
        if retries < 0 or timeout_s <= 0 or backoff_s < 0 or max_batch < 1:
            raise ValueError("need timeout_s > 0, retries >= 0, backoff_s >= 0, max_batch >= 1")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_batch = max_batch
        self._local = threading.local()  # one requests.Session (keep-alive pool) per thread

    def _retry(self) -> Retry:
        """The retry policy (module docstring): ``total = retries`` bounds connect, read and status
        retries together; an exhausted status retry returns the last answer (``raise_on_status``
        off) so its status and body reach the error message."""
        return Retry(
            total=self.retries,
            backoff_factor=self.backoff_s,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=RETRY_METHODS,
            raise_on_status=False,
            raise_on_redirect=False,
        )

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            adapter = HTTPAdapter(max_retries=self._retry())
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        return session

    def _down(self, attempts: int, why: str) -> RetrieverError:
        return RetrieverError(
            f"retrieval server at {self.url} is not answering ({why}; {attempts} attempt(s)): start it with "
            "`agentr1 serve-retriever` or unset retrieval.url to search in-process"
        )

    def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        try:
            resp = self._session().request(method, self.url + path, json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:
            # urllib3 gives up with MaxRetryError once every retry is spent; anything else is not retried
            spent = exc.args[0] if exc.args and isinstance(exc.args[0], MaxRetryError) else None
            attempts = self.retries + 1 if spent is not None else 1
            timed_out = isinstance(exc, requests.Timeout) or isinstance(getattr(spent, "reason", None), Urllib3Timeout)
            why = f"timed out after {self.timeout_s}s" if timed_out else f"{type(exc).__name__}: {exc}"
            raise self._down(attempts, why) from None
        if resp.status_code >= 500:
            retries = getattr(resp.raw, "retries", None)
            attempts = 1 + len(retries.history) if retries is not None else 1
            raise self._down(attempts, f"HTTP {resp.status_code}: {resp.text[:200]}")
        if resp.status_code >= 400:
            raise RetrieverError(
                f"retrieval server at {self.url} rejected the request (HTTP {resp.status_code}): {resp.text[:500]}"
            )
        try:
            return resp.json()
        except ValueError:
            raise RetrieverError(f"retrieval server at {self.url} answered non-JSON: {resp.text[:200]!r}") from None

    def health(self) -> dict:
        """``GET /health`` (raises :class:`RetrieverError` when the server is down)."""
        return self._request("GET", "/health")

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` hits per query from the server (in batches of at most ``max_batch`` queries)."""
        check_search_args(queries, k)
        out: list[list[Hit]] = []
        for i in range(0, len(queries), self.max_batch):
            batch = list(queries[i : i + self.max_batch])
            answer = self._request("POST", "/retrieve", {"queries": batch, "topk": k, "return_scores": True})
            result = answer.get("result") if isinstance(answer, dict) else None
            if not isinstance(result, list) or len(result) != len(batch):
                raise RetrieverError(
                    f"retrieval server at {self.url} answered {len(batch)} queries with "
                    f"an unexpected body: {str(answer)[:200]}"
                )
            out.extend([hit_from_item(item) for item in per_query] for per_query in result)
        return out
