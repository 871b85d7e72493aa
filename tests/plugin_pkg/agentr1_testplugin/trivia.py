"""A dataset loader: JSON Lines of ``{"id", "question", "answer", "title", "text"}``, one passage
each (the passage that answers it)."""

from __future__ import annotations

from collections.abc import Iterable

from agentr1.data.realformat import CorpusBuilder, Loaded, Record, passage_id, question, require_text

SOURCE = "trivia"


def load_trivia(records: Iterable[Record], limit: int | None = None, origin: str = SOURCE) -> Loaded:
    loaded, corpus = Loaded(), CorpusBuilder()
    for where, rec in records:
        if limit is not None and len(loaded.questions) >= limit:
            break
        title, text = require_text(rec, "title", where), require_text(rec, "text", where)
        pid = passage_id(title, text)
        corpus.add(pid, title, text, where)
        loaded.questions.append(
            question(
                f"{SOURCE}:{require_text(rec, 'id', where)}",
                require_text(rec, "question", where),
                [require_text(rec, "answer", where)],
                "trivia",
                1,
                [pid],
                SOURCE,
            )
        )
    loaded.passages = corpus.passages()
    return loaded
