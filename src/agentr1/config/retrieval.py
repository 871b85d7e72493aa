"""``retrieval``: the index (BM25 or dense), its recall report and the retrieval server."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from agentr1.config.base import _Section
from agentr1.registry import RETRIEVERS


class BM25Config(_Section):
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    k1: float = Field(1.2, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    stopwords: str | None = "en"
    stemmer: Literal["english", "none"] = "english"


class DenseConfig(_Section):
    model: str = "all-MiniLM-L6-v2"
    index: Literal["flat", "hnsw", "ivfpq"] = "flat"
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_search: int = Field(64, ge=1)
    ivf_nlist: int = Field(64, ge=1)
    ivf_nprobe: int = Field(8, ge=1)
    pq_m: int = Field(8, ge=1)
    batch_size: int = Field(64, ge=1)
    query_prefix: str = ""
    passage_prefix: str = ""
    device: str = "cpu"


class RetrievalReportConfig(_Section):
    ks: list[int] = Field(default_factory=lambda: [1, 3, 5])
    max_queries_per_split: int | None = Field(None, ge=1)

    @field_validator("ks")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(k < 1 for k in v):
            raise ValueError("ks must be a non-empty list of integers >= 1")
        return sorted(set(v))


class ServerConfig(_Section):
    """``agentr1 serve-retriever`` (host, port and the request limits) and the HTTP client of
    ``retrieval.url`` (timeout_s, retries, backoff_s). Requests over a limit get a JSON 4xx/503."""

    host: str = "127.0.0.1"  # loopback: the server has no authentication
    port: int = Field(8765, ge=0, le=65535)
    timeout_s: float = Field(10.0, gt=0)
    retries: int = Field(2, ge=0, le=10)
    backoff_s: float = Field(0.2, ge=0)
    max_queries: int = Field(512, ge=1)
    max_topk: int = Field(50, ge=1)
    default_topk: int = Field(3, ge=1)  # /retrieve requests that omit topk
    max_query_chars: int = Field(4096, gt=0)  # a longer query gets 422 (bounds the search CPU one query costs)
    request_deadline_s: float = Field(10.0, gt=0)  # request line + headers + body must arrive within this, else 408
    max_connections: int = Field(128, gt=0)  # connections served at once; more get 503 with Retry-After
    # the work and memory one request may cost (issue 26): refused with 413/422 before any search
    max_request_chars: int = Field(65536, gt=0)  # all queries' characters together
    max_results: int = Field(4096, gt=0)  # queries x topk
    max_response_bytes: int = Field(8 << 20, gt=0)  # an answer over this is refused before it is serialized
    max_body_bytes: int = Field(1 << 20, gt=0)  # the request body (and at most max_queries + 16 JSON values in it)


class RetrievalConfig(_Section):
    backend: Annotated[str, AfterValidator(RETRIEVERS.check)] = "bm25"
    index_dir: str = "data/index"
    report_dir: str = "data/retrieval"
    url: str | None = None  # http://host:port of a retrieval server; None = in-process
    bm25: BM25Config = BM25Config()
    dense: DenseConfig = DenseConfig()
    report: RetrievalReportConfig = RetrievalReportConfig()
    server: ServerConfig = ServerConfig()
