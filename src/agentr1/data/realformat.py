"""Shared plumbing for the real-dataset loaders (HotpotQA, 2Wiki, MuSiQue, FlashRAG).

* :func:`read_records` reads a local file in any of the layouts the datasets ship in: one JSON
  array, JSON Lines (whatever the file suffix says; 2Wiki ships JSON Lines named ``.json``) or
  Parquet (hub downloads). It yields ``(where, record)`` pairs; ``where`` names the file and the
  record (``dev.json record 4`` / ``dev.jsonl line 5``) so every error can point at it.
* :func:`passage_id` gives corpus passages stable ids: ``<source>:`` + the first 16 hex digits of
  sha1(title NUL text). Equal (title, text) pairs get equal ids, so deduplicating by id is
  deduplicating by (title, text), and ids do not depend on record order.
* :class:`CorpusBuilder` collects passages in first-appearance order.
* :func:`parse_context` / :func:`supporting_titles` read the two layouts of HotpotQA-style
  contexts and supporting facts (official lists of pairs, Hugging Face dicts of columns);
  :func:`load_context_records` is the whole loader of such records (HotpotQA and 2Wiki).

Every malformed input raises :class:`RealDataError` (a ``ValueError``) whose message names the
file, the record and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.data.schema import Passage, Question

Record = tuple[str, Mapping[str, Any]]  # (where, record)


class RealDataError(ValueError):
    """Real-dataset input that cannot be used (missing or unreadable file, unknown layout, record
    without a required field, hub load failure); the message names file, record and field."""


@dataclass
class Loaded:
    """What one loader returns: mapped questions (``split`` still empty), the passages their
    contexts contributed, how many records were skipped (by reason) and how many were kept with
    a caveat (``notes``, by reason; e.g. FlashRAG records whose supporting ids are unknown)."""

    questions: list[dict[str, Any]] = field(default_factory=list)
    passages: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)


# ------------------------------------------------------------------------------- reading files
def _describe(path: Path) -> str:
    return path.name if path.name else str(path)


def read_records(path: str | Path) -> Iterator[Record]:
    """Yield ``(where, record)`` for each record of a JSON array, JSON Lines or Parquet file.

    The layout is detected from the content (first non-blank character ``[`` = JSON array,
    ``{`` = JSON Lines), not from the suffix, except ``.parquet``. Blank lines in JSON Lines are
    ignored and the last line may lack its newline.
    """
    path = Path(path)
    if not path.is_file():
        raise RealDataError(f"{path}: file not found")
    name = _describe(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, rec in enumerate(pq.read_table(path).to_pylist()):
            yield f"{name} row {i}", rec
        return
    with path.open(encoding="utf-8") as fh:
        head = fh.read(4096).lstrip("\ufeff \t\r\n")
    if head.startswith("["):
        yield from _read_json_array(path, name)
    elif head.startswith("{"):
        yield from _read_json_lines(path, name)
    elif not head:
        raise RealDataError(f"{path}: file is empty")
    else:
        raise RealDataError(
            f"{path}: unknown format (starts with {head[:20]!r}); expected a JSON array, "
            "JSON Lines (one object per line) or a .parquet file"
        )


def _read_json_array(path: Path, name: str) -> Iterator[Record]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise RealDataError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise RealDataError(f"{path}: record {i} is a {type(rec).__name__}, expected an object")
        yield f"{name} record {i}", rec


def _read_json_lines(path: Path, name: str) -> Iterator[Record]:
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RealDataError(
                    f"{path}: line {lineno} is not valid JSON ({exc.msg}); JSON Lines needs one "
                    "complete object per line"
                ) from None
            if not isinstance(rec, dict):
                raise RealDataError(f"{path}: line {lineno} is a {type(rec).__name__}, expected an object")
            yield f"{name} line {lineno}", rec


# ------------------------------------------------------------------------------ field access
def where_id(where: str, rec: Mapping[str, Any], *id_fields: str) -> str:
    """``where`` plus the record's id when it has one (for error messages)."""
    for f in id_fields:
        if rec.get(f) is not None:
            return f"{where} (id {rec[f]!r})"
    return where


def require(rec: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``rec[name]``, which must be present, not null and of ``kind``."""
    if name not in rec or rec[name] is None:
        raise RealDataError(f"{where}: required field {name!r} is missing")
    value = rec[name]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _kinds(kind):
        want = " or ".join(k.__name__ for k in _kinds(kind))
        raise RealDataError(f"{where}: field {name!r} must be a {want} (got {type(value).__name__})")
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def require_text(rec: Mapping[str, Any], name: str, where: str) -> str:
    """A required non-blank string field, stripped."""
    value = require(rec, name, str, where).strip()
    if not value:
        raise RealDataError(f"{where}: field {name!r} is empty")
    return value


def record_id(rec: Mapping[str, Any], where: str, *names: str) -> str:
    """The first present id field among ``names`` (string or integer), as a string."""
    for name in names:
        if rec.get(name) is not None:
            value = rec[name]
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
                raise RealDataError(f"{where}: field {name!r} must be a non-empty string")
            return str(value).strip()
    raise RealDataError(f"{where}: required field {' or '.join(repr(n) for n in names)} is missing")


def answer_list(values: Iterable[Any], where: str, name: str) -> list[str]:
    """Non-empty, stripped, order-preserving deduplicated answer strings."""
    out: list[str] = []
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise RealDataError(f"{where}: field {name!r}[{i}] must be a string (got {type(v).__name__})")
        v = v.strip()
        if v and v not in out:
            out.append(v)
    if not out:
        raise RealDataError(f"{where}: field {name!r} holds no non-empty answer")
    return out


# ---------------------------------------------------------------------------------- passages
def passage_id(source: str, title: str, text: str) -> str:
    """Stable passage id: ``<source>:`` + 16 hex digits of sha1(title NUL text)."""
    digest = hashlib.sha1(f"{title}\x00{text}".encode("utf-8")).hexdigest()[:16]
    return f"{source}:{digest}"


def join_sentences(sentences: Iterable[str]) -> str:
    """Join a paragraph's sentences into its text.

    HotpotQA sentences carry their own leading space (``" He lives..."``) while 2Wiki's do not,
    so a space is inserted only where neither side already has whitespace.
    """
    text = ""
    for s in sentences:
        if text and s and not text[-1].isspace() and not s[0].isspace():
            text += " "
        text += s
    return text.strip()


class CorpusBuilder:
    """Passages in first-appearance order, deduplicated by id (= by (title, text))."""

    def __init__(self) -> None:
        self._passages: dict[str, dict[str, Any]] = {}

    def add(self, pid: str, title: str, text: str, where: str = "") -> None:
        """Add a passage; an id already present with other content is an error."""
        old = self._passages.get(pid)
        if old is None:
            self._passages[pid] = Passage(pid, title, text).to_dict()
        elif old["title"] != title or old["text"] != text:
            raise RealDataError(
                f"{where or 'corpus'}: passage id {pid!r} is already used by a different passage "
                f"(title {old['title']!r} vs {title!r})"
            )

    def extend(self, passages: Iterable[Mapping[str, Any]], where: str = "") -> None:
        for p in passages:
            self.add(p["id"], p["title"], p["text"], where)

    def __contains__(self, pid: object) -> bool:
        return pid in self._passages

    def __len__(self) -> int:
        return len(self._passages)

    def passages(self) -> list[dict[str, Any]]:
        return list(self._passages.values())


# ------------------------------------------------------------------ HotpotQA-style contexts
def _decoded(value: Any, where: str, name: str) -> Any:
    """``value``, JSON-decoded first when it is a string holding a JSON list or object."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise RealDataError(f"{where}: field {name!r} is a string but not valid JSON ({exc.msg})") from None
    return value


def parse_context(value: Any, where: str, name: str = "context") -> list[tuple[str, str]]:
    """``[(title, text)]`` from either context layout.

    Official: ``[[title, [sentence, ...]], ...]``. Hugging Face: ``{"title": [...],
    "sentences": [[...], ...]}`` (FlashRAG's 2Wiki files name the second column ``content``).
    Either may arrive JSON-encoded in a string column (some hub copies store it so).
    """
    value = _decoded(value, where, name)
    if isinstance(value, Mapping):
        titles = value.get("title")
        sents = value.get("sentences", value.get("content"))
        if not isinstance(titles, list) or not isinstance(sents, list):
            raise RealDataError(
                f"{where}: field {name!r} must hold lists 'title' and 'sentences' (or 'content')"
            )
        if len(titles) != len(sents):
            raise RealDataError(
                f"{where}: field {name!r} has {len(titles)} titles but {len(sents)} sentence lists"
            )
        pairs = list(zip(titles, sents))
    elif isinstance(value, list):
        pairs = []
        for i, item in enumerate(value):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise RealDataError(f"{where}: field {name!r}[{i}] must be a [title, sentences] pair")
            pairs.append((item[0], item[1]))
    else:
        raise RealDataError(
            f"{where}: field {name!r} must be a list of [title, sentences] pairs or a "
            f"{{title, sentences}} mapping (got {type(value).__name__})"
        )
    out = []
    for i, (title, sents) in enumerate(pairs):
        if not isinstance(title, str) or not title.strip():
            raise RealDataError(f"{where}: field {name!r}[{i}] has no title")
        if isinstance(sents, str):
            sents = [sents]
        if not isinstance(sents, list) or not all(isinstance(s, str) for s in sents):
            raise RealDataError(f"{where}: field {name!r}[{i}] ({title!r}) sentences must be strings")
        out.append((title.strip(), join_sentences(sents)))
    return out


def supporting_titles(value: Any, where: str, name: str = "supporting_facts") -> list[str]:
    """Titles of the supporting facts, in order of first appearance (one per paragraph).

    Official: ``[[title, sent_idx], ...]``; Hugging Face: ``{"title": [...], "sent_id": [...]}``.
    Sentence indices are not used (a few official records point past a paragraph's end).
    """
    value = _decoded(value, where, name)
    if isinstance(value, Mapping):
        titles = value.get("title")
        if not isinstance(titles, list):
            raise RealDataError(f"{where}: field {name!r} must hold a list 'title'")
    elif isinstance(value, list):
        titles = []
        for i, item in enumerate(value):
            if not isinstance(item, (list, tuple)) or len(item) < 1:
                raise RealDataError(f"{where}: field {name!r}[{i}] must be a [title, sentence_idx] pair")
            titles.append(item[0])
    else:
        raise RealDataError(
            f"{where}: field {name!r} must be a list of [title, idx] pairs or a {{title, sent_id}} "
            f"mapping (got {type(value).__name__})"
        )
    out: list[str] = []
    for i, t in enumerate(titles):
        if not isinstance(t, str) or not t.strip():
            raise RealDataError(f"{where}: field {name!r}[{i}] has no title")
        if t.strip() not in out:
            out.append(t.strip())
    if not out:
        raise RealDataError(f"{where}: field {name!r} is empty")
    return out


@dataclass
class ContextMatch:
    """A record's context passages (``[(id, title, text)]``) and its supporting passage ids."""

    passages: list[tuple[str, str, str]]
    supporting_ids: list[str]
    missing_titles: list[str]


def match_context(source: str, context: list[tuple[str, str]], titles: list[str]) -> ContextMatch:
    """Give context paragraphs passage ids and resolve supporting titles to them.

    A title that occurs more than once in a context resolves to its first paragraph (in the
    real data such repeats carry the same text).
    """
    passages, by_title = [], {}
    for title, text in context:
        pid = passage_id(source, title, text)
        passages.append((pid, title, text))
        by_title.setdefault(title, pid)
    sup, missing = [], []
    for t in titles:
        if t in by_title:
            if by_title[t] not in sup:
                sup.append(by_title[t])
        else:
            missing.append(t)
    return ContextMatch(passages, sup, missing)


def question(
    qid: str, text: str, answers: list[str], qtype: str, hops: int, supporting_ids: list[str], source: str
) -> dict[str, Any]:
    """A unified-schema question row with its split still unassigned (empty)."""
    return Question(qid, text, answers, qtype, hops, supporting_ids, source, "").to_dict()


def add_context_question(
    loaded: Loaded,
    corpus: CorpusBuilder,
    *,
    source: str,
    qid: str,
    text: str,
    answers: list[str],
    qtype: str,
    hops: int,
    context: list[tuple[str, str]],
    titles: list[str],
    where: str,
) -> bool:
    """Map one HotpotQA/2Wiki-style record: its context paragraphs join the corpus and its
    supporting titles become ``supporting_ids``.

    A record whose supporting paragraph is absent from its own context (HotpotQA fullwiki dev:
    retrieved contexts) is unanswerable from the corpus built here; it is skipped and counted
    under ``"supporting passage not in context"`` and contributes no passage.
    """
    match = match_context(source, context, titles)
    if match.missing_titles:
        loaded.skipped["supporting passage not in context"] += 1
        return False
    for pid, title, body in match.passages:
        corpus.add(pid, title, body, where)
    loaded.questions.append(question(qid, text, answers, qtype, hops, match.supporting_ids, source))
    return True


def load_context_records(
    records: Iterable[Record],
    limit: int | None,
    origin: str,
    *,
    source: str,
    label: str,
    hops: Mapping[str, int],
    logger: Any,
    no_context: str | None = None,
) -> Loaded:
    """Map HotpotQA-style records (HotpotQA, 2Wiki: ``_id``/``id``, ``type``, ``question``,
    ``answer``, ``context``, ``supporting_facts``); stop after ``limit`` questions.

    Question id ``<source>:<_id|id>``; answers ``[answer]``; ``type`` must be a key of ``hops``
    (else a :class:`RealDataError` listing ``label``'s types), which gives the question's hop
    count; context and supporting facts go through :func:`add_context_question`. A record without
    a (non-empty) ``context`` is skipped and counted under ``no_context`` when that reason is
    given, and is an error otherwise."""
    loaded, corpus = Loaded(), CorpusBuilder()
    for where, rec in records:
        if limit is not None and len(loaded.questions) >= limit:
            break
        where = where_id(where, rec, "_id", "id")
        if no_context is not None and not rec.get("context"):
            loaded.skipped[no_context] += 1
            continue
        qtype = require_text(rec, "type", where)
        if qtype not in hops:
            raise RealDataError(f"{where}: field 'type' is {qtype!r}; {label} types are {sorted(hops)}")
        add_context_question(
            loaded,
            corpus,
            source=source,
            qid=f"{source}:{record_id(rec, where, '_id', 'id')}",
            text=require_text(rec, "question", where),
            answers=[require_text(rec, "answer", where)],
            qtype=qtype,
            hops=hops[qtype],
            context=parse_context(require(rec, "context", (list, dict, str), where), where),
            titles=supporting_titles(require(rec, "supporting_facts", (list, dict, str), where), where),
            where=where,
        )
    loaded.passages = corpus.passages()
    log_skipped(logger, origin, loaded)
    return loaded


def log_skipped(logger: Any, origin: str, loaded: Loaded) -> None:
    """One warning per skip reason and per caveat, with its count."""
    for reason, n in sorted(loaded.skipped.items()):
        logger.warning("%s: skipped %d record(s): %s", origin, n, reason)
    for reason, n in sorted(loaded.notes.items()):
        logger.warning("%s: %d record(s) kept with a caveat: %s", origin, n, reason)
