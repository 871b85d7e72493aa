"""The retriever interface every backend implements (BM25, dense, HTTP client).

An index backend (``retrieval.backend``, registered in :data:`agentr1.registry.RETRIEVERS` under
the entry-point group ``agentr1.retrievers``) is a :class:`Retriever` class that also has the
classmethods of :class:`IndexBackend`: ``index_corpus`` (what ``agentr1 index`` runs; the result
has ``save(directory)``) and ``open_index`` (what every consumer runs on the saved index).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Hit:
    """One retrieved passage."""

    id: str
    title: str
    text: str
    score: float

    def to_dict(self) -> dict:
        return asdict(self)


class RetrieverError(RuntimeError):
    """Retrieval failed (server down, timeout, bad response, missing index). The message says why."""


class Retriever(ABC):
    """``search(queries, k)`` returns, for each query, up to ``k`` hits, best first (batched)."""

    @abstractmethod
    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Return one list of hits per query, each sorted by decreasing score."""


def check_search_args(queries: Sequence[str], k: int) -> None:
    """The arguments of :meth:`Retriever.search`: ``ValueError`` for ``k < 1``, ``TypeError`` for
    one query string instead of a sequence of them (a string would be searched letter by letter)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if isinstance(queries, str):
        raise TypeError("search expects a sequence of query strings, not one string")


class IndexBackend(Protocol):
    """What :mod:`agentr1.retrieval.factory` needs from a registered index backend (a class)."""

    def index_corpus(self, corpus_rows: Iterable[Mapping[str, Any]], retrieval_cfg: Any, seed: int) -> Retriever:
        """Index ``corpus_rows`` (``id, title, text``) with the params ``retrieval_cfg``; the result
        has ``save(directory)``, which writes ``meta.json`` with ``backend`` = the registered name."""
        ...

    def open_index(self, directory: str | Path, retrieval_cfg: Any, meta: Mapping[str, Any]) -> Retriever:
        """Load the index in ``directory`` (its ``meta.json`` is ``meta``), refusing one whose
        stored settings contradict ``retrieval_cfg``."""
        ...
