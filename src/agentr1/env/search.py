"""The search tool: a query string in, the top-k passages of a :class:`Retriever` out.

Observation text (one line per hit, best first; each passage cut to ``passage_max_chars``)::

    Doc 1 (Title: Ada Vell) Ada Vell is a painter born in Korvash ...
    Doc 2 (Title: Korvash) Korvash is a city ...

``ToolResult.metadata = {"ids": [hit ids, best first], "query": query}`` so the environment can
tell whether a supporting passage was returned (process reward ``successful_search``, paid by
:meth:`SearchTool.success_reward` only then). Options: ``env.search`` (``SearchToolConfig``).

A blank or oversized query, a retriever exception (``RetrieverError``, a timeout, anything) or a
malformed retriever answer gives ``ToolResult(success=False)`` with a message saying what went
wrong; nothing is raised. A batch of searches is ONE ``retriever.search(queries, topk)`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agentr1.config.base import _Section
from agentr1.env.base import CallOutcome, ToolResult
from agentr1.env.tools import Tool
from agentr1.retrieval.base import Hit, Retriever, RetrieverError

NO_RESULTS = "No results found."


class SearchToolConfig(_Section):
    """``env.search``: options of the search tool (:attr:`SearchTool.options`)."""

    topk: int = Field(1, ge=1, le=50)
    max_query_chars: int = Field(256, ge=1)
    passage_max_chars: int = Field(400, ge=16)


def format_passages(hits: Sequence[Hit], passage_max_chars: int) -> str:
    """``Doc i (Title: T) text`` per hit (i from 1), newline-separated; text cut to
    ``passage_max_chars`` characters (an ellipsis marks a cut)."""
    if not hits:
        return NO_RESULTS
    lines = []
    for i, hit in enumerate(hits, start=1):
        text = " ".join(str(hit.text).split())
        if len(text) > passage_max_chars:
            text = text[: max(passage_max_chars - 1, 0)].rstrip() + "…"
        lines.append(f"Doc {i} (Title: {hit.title}) {text}")
    return "\n".join(lines)


class SearchTool(Tool):
    """Search a passage collection; returns the top ``topk`` passages for ``query``."""

    name = "search"
    purpose = "searching for the facts you need"
    example = {"query": "your query"}
    action = "search"
    options = SearchToolConfig
    resources = ("retriever",)

    @classmethod
    def success_reward(cls, outcome: CallOutcome, process_cfg: Any) -> float:
        """``successful_search`` when the call returned a supporting passage, else 0."""
        return float(process_cfg.successful_search) if outcome.found_support else 0.0

    def __init__(
        self,
        retriever: Retriever,
        topk: int = 3,
        max_query_chars: int = 256,
        passage_max_chars: int = 400,
    ) -> None:
        if topk < 1 or max_query_chars < 1 or passage_max_chars < 1:
            raise ValueError("topk, max_query_chars and passage_max_chars must be >= 1")
        self.retriever = retriever
        self.topk = topk
        self.max_query_chars = max_query_chars
        self.passage_max_chars = passage_max_chars
        self.description = (
            "Search the knowledge base. Returns the most relevant passage for the query, with its title. "
            if topk == 1
            else f"Search the knowledge base. Returns the {topk} most relevant passages for the query, each with its title. "
        ) + "Use short, specific queries (a name and what you want to know)."
        self.parameters = {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "The search query.",
                    "maxLength": max_query_chars,
                    "pattern": r"\S",
                }
            },
            "required": ["query"],
            "additionalProperties": False,
        }

    def _query_problem(self, args: Any) -> str | None:
        """Why ``args`` cannot be searched (None = fine). Mirrors the schema for direct callers."""
        if not isinstance(args, dict) or "query" not in args:
            return "search needs a 'query' argument (a non-empty string)"
        query = args["query"]
        if not isinstance(query, str):
            return f"the query must be a string, got {type(query).__name__}"
        if not query.strip():
            return "empty query: give the words to search for"
        if len(query) > self.max_query_chars:
            return f"query too long: {len(query)} characters (limit {self.max_query_chars})"
        return None

    def execute(self, args: dict[str, Any]) -> ToolResult:
        return self.execute_batch([args])[0]

    def execute_batch(self, batch: Sequence[dict[str, Any]]) -> list[ToolResult]:
        results: list[ToolResult | None] = [None] * len(batch)
        todo: list[tuple[int, str]] = []
        for i, args in enumerate(batch):
            problem = self._query_problem(args)
            if problem is not None:
                results[i] = ToolResult(f"search failed: {problem}", False, {"ids": []})
            else:
                todo.append((i, args["query"].strip()))
        if todo:
            queries = [q for _, q in todo]
            for (i, query), result in zip(todo, self._search(queries)):
                result.metadata["query"] = query
                results[i] = result
        return [r for r in results if r is not None]

    def _search(self, queries: list[str]) -> list[ToolResult]:
        """One retriever call for all queries; any failure fails every query of the batch."""

        def fail(msg: str) -> list[ToolResult]:
            return [ToolResult(f"search failed: {msg}", False, {"ids": []}) for _ in queries]

        try:
            hits_per_query = self.retriever.search(queries, self.topk)
        except RetrieverError as exc:
            return fail(f"retriever error: {exc}")
        except TimeoutError as exc:
            return fail(f"retriever timed out: {exc or 'no answer in time'}")
        except ImportError:  # the installation lacks the backend's package: no call could ever succeed
            raise
        except Exception as exc:  # noqa: BLE001 - a broken backend must not kill a rollout batch
            return fail(f"retriever raised {type(exc).__name__}: {exc}")
        try:
            hits_per_query = list(hits_per_query)
            if len(hits_per_query) != len(queries):
                return fail(f"retriever returned {len(hits_per_query)} result lists for {len(queries)} queries")
            out = []
            for hits in hits_per_query:
                hits = list(hits)[: self.topk]
                out.append(
                    ToolResult(
                        format_passages(hits, self.passage_max_chars),
                        True,
                        {"ids": [str(h.id) for h in hits]},
                    )
                )
            return out
        except Exception as exc:  # noqa: BLE001 - malformed hits (wrong types) from a backend
            return fail(f"retriever returned malformed hits ({type(exc).__name__}: {exc})")
