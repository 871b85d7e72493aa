"""The retriever interface every backend implements (BM25, dense, HTTP client)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass


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
