"""MuSiQue-Ans -> unified schema (answerable questions only).

Official layout (JSON Lines ``musique_ans_v1.0_*.jsonl``, a JSON array, Parquet or hub rows):
``id``, ``question``, ``paragraphs`` = ``[{idx, title, paragraph_text, is_supporting}]``,
``question_decomposition`` = ``[{id, question, answer, paragraph_support_idx}]``, ``answer``,
``answer_aliases``, ``answerable``.

Mapping: id ``musique:<id>``; answers = ``[answer] + answer_aliases`` (deduplicated, in order);
hops = the number of decomposition steps; type ``musique_<prefix>`` from the id prefix
(``2hop__...`` -> ``musique_2hop``, ``3hop1__...`` -> ``musique_3hop1``), or ``chain`` when the id
has none; ``supporting_ids`` = the paragraphs named by ``paragraph_support_idx`` in decomposition
order (a paragraph used by two steps appears once). All paragraphs of a record become passages
(:func:`~agentr1.data.realformat.passage_id`). Records with ``answerable: false`` are skipped and counted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from agentr1.data.realformat import (
    CorpusBuilder,
    Loaded,
    RealDataError,
    Record,
    answer_list,
    log_skipped,
    passage_id,
    question,
    record_id,
    require,
    require_text,
    where_id,
)

SOURCE = "musique"
UNANSWERABLE = "answerable is false"
_PREFIX = re.compile(r"^(\d+hop\d*)__")
log = logging.getLogger(__name__)


def musique_type(qid: str) -> str:
    """``musique_2hop`` / ``musique_3hop1`` ... from the id prefix, else ``chain``."""
    m = _PREFIX.match(qid)
    return f"musique_{m.group(1)}" if m else "chain"


def _paragraphs(rec: Mapping[str, Any], where: str) -> dict[int, tuple[str, str, str]]:
    """``{idx: (passage id, title, text)}`` in file order."""
    out: dict[int, tuple[str, str, str]] = {}
    for i, p in enumerate(require(rec, "paragraphs", list, where)):
        at = f"{where}: paragraphs[{i}]"
        if not isinstance(p, Mapping):
            raise RealDataError(f"{at} must be an object")
        idx = require(p, "idx", int, at) if "idx" in p else i
        title = require_text(p, "title", at)
        text = require_text(p, "paragraph_text", at)
        if idx in out:
            raise RealDataError(f"{at}: duplicate paragraph idx {idx}")
        out[idx] = (passage_id(title, text), title, text)
    return out


def supporting_from_decomposition(
    steps: list[Any], paragraphs: Mapping[int, tuple[str, str, str]], where: str
) -> list[str]:
    """Passage ids of ``paragraph_support_idx`` per step, in step order, each once."""
    sup: list[str] = []
    for j, step in enumerate(steps):
        at = f"{where}: question_decomposition[{j}]"
        if not isinstance(step, Mapping):
            raise RealDataError(f"{at} must be an object")
        idx = require(step, "paragraph_support_idx", int, at)
        if idx not in paragraphs:
            raise RealDataError(f"{at}: field 'paragraph_support_idx' = {idx} names no paragraph")
        if paragraphs[idx][0] not in sup:
            sup.append(paragraphs[idx][0])
    return sup


def load_musique(records: Iterable[Record], limit: int | None = None, origin: str = SOURCE) -> Loaded:
    """Map MuSiQue-Ans records (``(where, record)`` pairs); stop after ``limit`` questions."""
    loaded, corpus = Loaded(), CorpusBuilder()
    for where, rec in records:
        if limit is not None and len(loaded.questions) >= limit:
            break
        where = where_id(where, rec, "id")
        if rec.get("answerable", True) is False:
            loaded.skipped[UNANSWERABLE] += 1
            continue
        raw_id = record_id(rec, where, "id")
        steps = require(rec, "question_decomposition", list, where)
        if not steps:
            raise RealDataError(f"{where}: field 'question_decomposition' is empty")
        paragraphs = _paragraphs(rec, where)
        supporting = supporting_from_decomposition(steps, paragraphs, where)
        aliases = rec.get("answer_aliases") or []
        if not isinstance(aliases, list):
            raise RealDataError(f"{where}: field 'answer_aliases' must be a list")
        answers = answer_list([require_text(rec, "answer", where), *aliases], where, "answer_aliases")
        for pid, title, text in paragraphs.values():
            corpus.add(pid, title, text, where)
        loaded.add_question(
            question(
                f"{SOURCE}:{raw_id}",
                require_text(rec, "question", where),
                answers,
                musique_type(raw_id),
                len(steps),
                supporting,
                SOURCE,
            ),
            where,
        )
    loaded.passages = corpus.passages()
    log_skipped(log, origin, loaded)
    return loaded
