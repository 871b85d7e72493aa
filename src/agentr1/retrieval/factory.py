"""Pick the retriever the params ask for: build one over a corpus, or load the built index / the server.

``build_retriever(cfg.retrieval, corpus_rows)`` is what ``agentr1 index`` runs;
``load_retriever(cfg)`` is what every consumer (the search tool, evaluation, the server) calls:
with ``retrieval.url`` set it returns an :class:`~agentr1.retrieval.client.HTTPRetriever` for that
server, otherwise it loads ``retrieval.index_dir`` in-process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentr1.config import Config, RetrievalConfig
from agentr1.retrieval.base import Retriever, RetrieverError
from agentr1.retrieval.corpus import read_meta


def build_retriever(retrieval_cfg: RetrievalConfig, corpus_rows: Iterable[Mapping[str, Any]], seed: int = 0) -> Retriever:
    """Index ``corpus_rows`` (``id, title, text``) with ``retrieval_cfg.backend``; returns an in-memory
    retriever with a ``save(directory)`` method."""
    if retrieval_cfg.backend == "bm25":
        from agentr1.retrieval.bm25 import BM25Retriever

        return BM25Retriever.build(corpus_rows, retrieval_cfg.bm25)
    from agentr1.retrieval.dense import DenseRetriever

    return DenseRetriever.build(corpus_rows, retrieval_cfg.dense, seed=seed)


def load_index(index_dir: str | Path, retrieval_cfg: RetrievalConfig) -> Retriever:
    """Load the index in ``index_dir``; it must have been built for ``retrieval_cfg.backend``."""
    meta = read_meta(index_dir)  # RetrieverError "run `agentr1 index`" when missing
    built = meta.get("backend")
    if built != retrieval_cfg.backend:
        raise RetrieverError(
            f"the index in {index_dir} was built with backend {built!r} but retrieval.backend is "
            f"{retrieval_cfg.backend!r}: rerun `agentr1 index` (or `dvc repro index`)"
        )
    if built == "bm25":
        from agentr1.retrieval.bm25 import BM25Retriever, index_settings

        wanted = index_settings(retrieval_cfg.bm25)
        if meta.get("bm25") != wanted:
            raise RetrieverError(
                f"the index in {index_dir} was built with bm25 settings {meta.get('bm25')} but params say "
                f"{wanted}: rerun `agentr1 index` (or `dvc repro index`)"
            )
        return BM25Retriever.load(index_dir)
    from agentr1.retrieval.dense import DenseRetriever

    return DenseRetriever.load(index_dir, retrieval_cfg.dense)


def load_retriever(cfg: Config | RetrievalConfig) -> Retriever:
    """The configured retriever: the HTTP client when ``retrieval.url`` is set, else the local index."""
    rcfg = cfg.retrieval if isinstance(cfg, Config) else cfg
    if rcfg.url:
        from agentr1.retrieval.client import HTTPRetriever

        server = rcfg.server
        return HTTPRetriever(rcfg.url, timeout_s=server.timeout_s, retries=server.retries,
                             backoff_s=server.backoff_s, max_batch=server.max_queries)
    return load_index(rcfg.index_dir, rcfg)
