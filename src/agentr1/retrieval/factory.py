"""Pick the retriever the params ask for: build one over a corpus, or load the built index / the server.

``retrieval.backend`` names an index backend of :data:`agentr1.registry.RETRIEVERS` (``bm25``,
``dense`` or a plug-in's; the contract is :class:`~agentr1.retrieval.base.IndexBackend`).

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
from agentr1.registry import RETRIEVERS
from agentr1.retrieval.base import Retriever, RetrieverError
from agentr1.retrieval.corpus import read_meta


def build_retriever(
    retrieval_cfg: RetrievalConfig, corpus_rows: Iterable[Mapping[str, Any]], seed: int = 0
) -> Retriever:
    """Index ``corpus_rows`` (``id, title, text``) with ``retrieval_cfg.backend``; returns an in-memory
    retriever with a ``save(directory)`` method."""
    return RETRIEVERS.get(retrieval_cfg.backend).index_corpus(corpus_rows, retrieval_cfg, seed)


def load_index(index_dir: str | Path, retrieval_cfg: RetrievalConfig) -> Retriever:
    """Load the index in ``index_dir``; it must have been built for ``retrieval_cfg.backend``."""
    meta = read_meta(index_dir)  # RetrieverError "run `agentr1 index`" when missing
    built = meta.get("backend")
    if built != retrieval_cfg.backend:
        raise RetrieverError(
            f"the index in {index_dir} was built with backend {built!r} but retrieval.backend is "
            f"{retrieval_cfg.backend!r}: rerun `agentr1 index` (or `dvc repro index`)"
        )
    return RETRIEVERS.get(built).open_index(index_dir, retrieval_cfg, meta)


def load_retriever(cfg: Config | RetrievalConfig) -> Retriever:
    """The configured retriever: the HTTP client when ``retrieval.url`` is set, else the local index."""
    rcfg = cfg.retrieval if isinstance(cfg, Config) else cfg
    if rcfg.url:
        from agentr1.retrieval.client import HTTPRetriever

        server = rcfg.server
        return HTTPRetriever(
            rcfg.url,
            timeout_s=server.timeout_s,
            retries=server.retries,
            backoff_s=server.backoff_s,
            max_batch=server.max_queries,
        )
    return load_index(rcfg.index_dir, rcfg)
