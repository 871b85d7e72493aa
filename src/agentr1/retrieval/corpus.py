"""The passages an index returns, and the small files every index directory shares.

An index directory holds ``meta.json`` (which backend built it, with which settings, over how many
passages), ``passages.parquet`` (``id, title, text`` in index order, so row ``i`` is the passage
behind internal id ``i``) and the backend's own files. Both shared files are written
deterministically: rebuilding an index from the same corpus and params gives identical bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentr1.data.schema import read_table, write_corpus
from agentr1.retrieval.base import Hit, RetrieverError

META_FILE = "meta.json"
PASSAGES_FILE = "passages.parquet"
INDEX_FORMAT = 1


def passage_text(title: str, text: str) -> str:
    """The text a backend indexes for one passage: its title, a newline, its body."""
    return f"{title}\n{text}" if title else text


def search_r1_contents(title: str, text: str) -> str:
    """The ``contents`` field of a Search-R1/FlashRAG corpus row: ``"Title"`` newline text."""
    return f'"{title}"\n{text}'


@dataclass
class PassageStore:
    """Passages in index order; ``hit(i, score)`` turns an internal row number into a :class:`Hit`."""

    ids: list[str]
    titles: list[str]
    texts: list[str]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> PassageStore:
        """Build from corpus rows (``id, title, text``); ids must be unique and the corpus non-empty."""
        ids: list[str] = []
        titles: list[str] = []
        texts: list[str] = []
        for n, row in enumerate(rows):
            try:
                ids.append(str(row["id"]))
                titles.append(str(row.get("title") or ""))
                texts.append(str(row["text"]))
            except KeyError as exc:
                raise RetrieverError(f"corpus row {n} has no {exc.args[0]!r} field (need id, title, text)") from None
        if not ids:
            raise RetrieverError("the corpus is empty: nothing to index (check data.processed_dir/corpus.parquet)")
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))
            raise RetrieverError(f"corpus passage ids must be unique; {dup!r} appears more than once")
        return cls(ids, titles, texts)

    def __len__(self) -> int:
        return len(self.ids)

    def indexed_texts(self) -> list[str]:
        """Title + text of every passage, in index order (what BM25 and the encoder see)."""
        return [passage_text(t, x) for t, x in zip(self.titles, self.texts)]

    def hit(self, row: int, score: float) -> Hit:
        return Hit(id=self.ids[row], title=self.titles[row], text=self.texts[row], score=float(score))

    def save(self, directory: str | Path) -> None:
        rows = ({"id": i, "title": t, "text": x} for i, t, x in zip(self.ids, self.titles, self.texts))
        write_corpus(rows, Path(directory) / PASSAGES_FILE)

    @classmethod
    def load(cls, directory: str | Path) -> PassageStore:
        path = Path(directory) / PASSAGES_FILE
        if not path.exists():
            raise RetrieverError(f"{path} is missing: the index is incomplete; rebuild it with `agentr1 index`")
        rows = read_table(path)
        return cls([r["id"] for r in rows], [r["title"] for r in rows], [r["text"] for r in rows])


def write_meta(directory: str | Path, meta: Mapping[str, Any]) -> None:
    """Write ``meta.json`` (sorted keys, so identical settings give identical bytes)."""
    body = {"format": INDEX_FORMAT, **meta}
    (Path(directory) / META_FILE).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def read_meta(directory: str | Path) -> dict[str, Any]:
    """Read ``meta.json``; a missing or foreign index is a :class:`RetrieverError` naming the fix."""
    path = Path(directory) / META_FILE
    if not path.exists():
        raise RetrieverError(
            f"no retrieval index at {Path(directory)} ({META_FILE} not found): "
            "run `agentr1 index` (or `dvc repro index`) first"
        )
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RetrieverError(f"{path} is not valid JSON ({exc}): rebuild the index with `agentr1 index`") from None
    if meta.get("format") != INDEX_FORMAT:
        raise RetrieverError(
            f"{path} has index format {meta.get('format')!r}, this version reads {INDEX_FORMAT}: "
            "rebuild the index with `agentr1 index`"
        )
    return meta
