"""FlashRAG / Search-R1 format: import questions and corpora, export a unified Dataset.

Questions (JSON Lines): ``{"id", "question", "golden_answers": [...], "metadata"?: {...}}``.
Corpus (JSON Lines): ``{"id", "contents": "\\"Title\\"\\ntext"}`` -- the first line is the title,
in double quotes (stripped) or not (wiki-18 samples hold both: FlashRAG's and Search-R1's own
readers take the first line as the title either way); ``contents`` without a newline is read as text
with an empty title.

Importing questions (:func:`load_flashrag`): answers = ``golden_answers``. FlashRAG records carry
no supporting passage ids of their own, so they are derived from ``metadata`` where it allows:

1. ``metadata.supporting_ids`` (files written by :func:`export_flashrag`): id, type, hops,
   supporting ids and source are taken verbatim from the record and its metadata.
2. ``metadata.context`` (+ ``supporting_facts``; FlashRAG's HotpotQA and 2Wiki files): the context
   paragraphs become passages (:func:`~agentr1.data.realformat.passage_id`: the same id as the
   same paragraph from any other source); supporting ids are those of the supporting-fact titles
   in first-appearance order -- or an empty list when any of them is missing from the context
   (HotpotQA **fullwiki** contexts often lack the gold paragraphs); hops = the number of distinct
   supporting titles; type = ``metadata.type``.
3. ``metadata.question_decomposition`` with ``support_paragraph`` per step (FlashRAG's MuSiQue):
   the support paragraphs become passages, supporting ids follow the steps; hops = the number of
   steps; type ``chain``; ``answerable: false`` records are skipped.
4. Otherwise (e.g. NQ): supporting ids empty, hops 1, type ``metadata.type`` or ``unknown``.

A question whose supporting passages are unknown (cases 2 to 4) is kept with ``supporting_ids:
[]`` and counted under :data:`~agentr1.data.schema.NO_GOLD`: the one rule of
:func:`~agentr1.data.schema.gold_unknown`, which ``validate`` applies too. Foreign records get the id ``flashrag:<namespace>:<id>``
(FlashRAG ids such as ``dev_0`` repeat across files; the namespace is the file stem) and source
``flashrag``.

Exporting (:func:`export_flashrag`) writes ``<split>.jsonl`` per non-empty split and
``corpus.jsonl``; metadata keeps ``type, hops, supporting_ids, source, split`` so that
:func:`import_flashrag` restores the same Dataset. A passage whose title is empty and whose text
holds a newline would not survive the round trip (its first line would be read as the title: the
format cannot tell).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentr1.config import SPLITS
from agentr1.data.realformat import (
    CorpusBuilder,
    Loaded,
    RealDataError,
    Record,
    answer_list,
    log_skipped,
    match_context,
    parse_context,
    passage_id,
    question,
    read_records,
    record_id,
    reject_control,
    require,
    require_text,
    supporting_titles,
    where_id,
)
from agentr1.data.schema import NO_GOLD, Dataset
from agentr1.io import write_text_atomic

SOURCE = "flashrag"
CORPUS_JSONL = "corpus.jsonl"
UNANSWERABLE = "metadata.answerable is false"
log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ corpus
def parse_contents(contents: str) -> tuple[str, str]:
    """``("Title", text)`` from ``"\\"Title\\"\\ntext"`` or ``"Title\\ntext"`` (the first line is the
    title, its surrounding double quotes stripped); ``("", contents)`` without a newline."""
    first, sep, rest = contents.partition("\n")
    first = first.strip()
    if not sep:
        return "", contents.strip()
    if len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        first = first[1:-1].strip()
    return first, rest.strip()


def format_contents(title: str, text: str) -> str:
    """Inverse of :func:`parse_contents`."""
    return f'"{title}"\n{text}' if title else text


def read_flashrag_corpus(path: str | Path) -> list[dict[str, Any]]:
    """Read a FlashRAG/Search-R1 corpus jsonl into ``{id, title, text}`` rows (ids kept as given)."""
    corpus = CorpusBuilder()
    for where, rec in read_records(path):
        where = where_id(where, rec, "id")
        pid = record_id(rec, where, "id")
        title, text = parse_contents(reject_control(require(rec, "contents", str, where), where, "contents"))
        if not text:
            raise RealDataError(f"{where}: field 'contents' has no text")
        if pid in corpus:
            raise RealDataError(f"{where}: duplicate passage id {pid!r}")
        corpus.add(pid, title, text, where)
    return corpus.passages()


# --------------------------------------------------------------------------------- questions
def _exported(meta: Mapping[str, Any], where: str) -> tuple[str, int, list[str], str]:
    """(type, hops, supporting_ids, source) from metadata written by :func:`export_flashrag`."""
    at = f"{where}: metadata"
    sup = require(meta, "supporting_ids", list, at)
    if not all(isinstance(s, str) and s for s in sup):
        raise RealDataError(f"{at}: field 'supporting_ids' must hold non-empty strings")
    hops = require(meta, "hops", int, at)
    if hops < 1:
        raise RealDataError(f"{at}: field 'hops' must be >= 1 (got {hops})")
    return require_text(meta, "type", at), hops, list(sup), require_text(meta, "source", at)


def _from_context(meta: Mapping[str, Any], where: str, loaded: Loaded, corpus: CorpusBuilder) -> tuple[int, list[str]]:
    """(hops, supporting_ids) from ``metadata.context`` / ``supporting_facts``."""
    context = parse_context(meta["context"], where, "metadata.context")
    facts = meta.get("supporting_facts")
    titles = supporting_titles(facts, where, "metadata.supporting_facts") if facts else []
    match = match_context(context, titles)
    for pid, title, text in match.passages:
        corpus.add(pid, title, text, where)
    if not titles or match.missing_titles:
        loaded.notes[NO_GOLD] += 1
        return max(len(titles), 1), []
    return max(len(titles), 1), match.supporting_ids


def _from_decomposition(steps: Any, where: str, loaded: Loaded, corpus: CorpusBuilder) -> tuple[int, list[str]]:
    """(hops, supporting_ids) from ``metadata.question_decomposition[].support_paragraph``."""
    if not isinstance(steps, list) or not steps:
        raise RealDataError(f"{where}: field 'metadata.question_decomposition' must be a non-empty list")
    sup: list[str] = []
    for j, step in enumerate(steps):
        para = step.get("support_paragraph") if isinstance(step, Mapping) else None
        if not isinstance(para, Mapping):
            loaded.notes[NO_GOLD] += 1
            return len(steps), []
        at = f"{where}: metadata.question_decomposition[{j}].support_paragraph"
        title, text = require_text(para, "title", at), require_text(para, "paragraph_text", at)
        pid = passage_id(title, text)
        corpus.add(pid, title, text, at)
        if pid not in sup:
            sup.append(pid)
    return len(steps), sup


def load_flashrag(
    records: Iterable[Record], limit: int | None = None, origin: str = SOURCE, namespace: str = "data"
) -> Loaded:
    """Map FlashRAG question records (``(where, record)`` pairs); stop after ``limit`` questions.

    ``namespace`` prefixes the ids of foreign records (``flashrag:<namespace>:<id>``); see the
    module docstring for what is derived from ``metadata``.
    """
    loaded, corpus = Loaded(), CorpusBuilder()
    for where, rec in records:
        if limit is not None and len(loaded.questions) >= limit:
            break
        where = where_id(where, rec, "id")
        raw_id = record_id(rec, where, "id")
        text = require_text(rec, "question", where)
        answers = answer_list(require(rec, "golden_answers", list, where), where, "golden_answers")
        meta = rec.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise RealDataError(f"{where}: field 'metadata' must be an object (got {type(meta).__name__})")
        qid, source = f"{SOURCE}:{namespace}:{raw_id}", SOURCE
        qtype = meta.get("type") if isinstance(meta.get("type"), str) and meta.get("type") else "unknown"
        if "supporting_ids" in meta:
            qtype, hops, sup, source = _exported(meta, where)
            qid = raw_id
        elif meta.get("context"):
            hops, sup = _from_context(meta, where, loaded, corpus)
        elif "question_decomposition" in meta:
            if meta.get("answerable", True) is False:
                loaded.skipped[UNANSWERABLE] += 1
                continue
            hops, sup = _from_decomposition(meta["question_decomposition"], where, loaded, corpus)
            qtype = "chain"
        else:
            loaded.notes[NO_GOLD] += 1
            hops, sup = 1, []
        loaded.add_question(question(qid, text, answers, qtype, hops, sup, source), where)
    loaded.passages = corpus.passages()
    log_skipped(log, origin, loaded)
    return loaded


# ---------------------------------------------------------------------------- export / import
def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def export_flashrag(ds: Dataset, out_dir: str | Path) -> list[Path]:
    """Write ``<split>.jsonl`` for each non-empty split and ``corpus.jsonl``; return the paths."""
    out_dir = Path(out_dir)
    written = []
    for split in SPLITS:
        rows = [
            {
                "id": q["id"],
                "question": q["question"],
                "golden_answers": list(q["answers"]),
                "metadata": {
                    "type": q["type"],
                    "hops": q["hops"],
                    "supporting_ids": list(q["supporting_ids"]),
                    "source": q["source"],
                    "split": q["split"],
                },
            }
            for q in ds.split(split)
        ]
        if rows:
            write_text_atomic(out_dir / f"{split}.jsonl", _jsonl(rows))
            written.append(out_dir / f"{split}.jsonl")
    corpus_rows = [{"id": p["id"], "contents": format_contents(p["title"], p["text"])} for p in ds.corpus]
    write_text_atomic(out_dir / CORPUS_JSONL, _jsonl(corpus_rows))
    written.append(out_dir / CORPUS_JSONL)
    return written


def import_flashrag(in_dir: str | Path) -> Dataset:
    """Read a directory of ``<split>.jsonl`` files (split = file name) plus ``corpus.jsonl``.

    Passages derived from question metadata are added after the corpus file's passages.
    """
    in_dir = Path(in_dir)
    files = [(s, in_dir / f"{s}.jsonl") for s in SPLITS if (in_dir / f"{s}.jsonl").is_file()]
    if not files:
        raise RealDataError(f"{in_dir}: no question file ({', '.join(f'{s}.jsonl' for s in SPLITS)})")
    corpus = CorpusBuilder()
    if (in_dir / CORPUS_JSONL).is_file():
        corpus.extend(read_flashrag_corpus(in_dir / CORPUS_JSONL), str(in_dir / CORPUS_JSONL))
    questions: dict[str, list[dict[str, Any]]] = {}
    for split, path in files:
        loaded = load_flashrag(read_records(path), origin=str(path), namespace=split)
        corpus.extend(loaded.passages, str(path))
        questions[split] = [{**q, "split": split} for q in loaded.questions]
    return Dataset(questions=questions, corpus=corpus.passages())
