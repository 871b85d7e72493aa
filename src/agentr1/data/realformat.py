"""Shared plumbing for the real-dataset loaders (HotpotQA, 2Wiki, MuSiQue, FlashRAG).

One module of more than 500 lines on purpose: every loader relies on one contract, an error naming ``where``
(file and record or line, from :func:`read_records` through every field check) and text made NFC and control-free
(:func:`clean_value`, :func:`reject_control`) before :func:`passage_id` hashes it or :class:`CorpusBuilder` and
:func:`match_context` compare it; split into reading, hygiene and contexts, that ordering would span modules.

* :func:`read_records` reads a local file in any of the layouts the datasets ship in: one JSON
  array, JSON Lines (whatever the file suffix says; 2Wiki ships JSON Lines named ``.json``) or
  Parquet (hub downloads). It yields ``(where, record)`` pairs; ``where`` names the file and the
  record (``data/dev.json record 4`` / ``data/dev.jsonl line 5``: the path as given) so every
  error can point at it.
* :func:`passage_id` gives corpus passages stable ids: ``p:`` + the first 16 hex digits of
  sha1(title NUL text) of the NFC text. The id does not name the source: the same paragraph
  brought by HotpotQA and by a FlashRAG file is one passage with one id (the corpus keeps it
  once), and ids do not depend on record order.
* :class:`CorpusBuilder` collects passages in first-appearance order, one per
  :func:`~agentr1.data.schema.passage_key` (title and text): a passage equal to one already there
  (e.g. a FlashRAG/Search-R1 corpus line equal to a context paragraph) is dropped and counted.
* :func:`parse_context` / :func:`supporting_titles` read the two layouts of HotpotQA-style
  contexts and supporting facts (official lists of pairs, Hugging Face dicts of columns);
  :func:`load_context_records` is the whole loader of such records (HotpotQA and 2Wiki).

Text hygiene, at load (before any id is hashed, any duplicate dropped or any title matched):

* a file must be UTF-8 (RFC 8259's encoding for JSON): a UTF-16/UTF-32 file (with or without a
  byte-order mark) and bytes that are not UTF-8 are refused with the file, the line and the fix;
* :func:`clean_value` walks every record: every string is normalized to Unicode NFC (so an
  ``e`` + combining accent equals the precomposed ``é``: same id, same title, same dedup key), a
  lone surrogate (an escaped ``\\ud800`` that ``json`` accepts but no UTF-8 file can hold) is refused
  with the field named, and so is nesting deeper than :data:`MAX_DEPTH` (or deeper than the JSON
  parser's recursion limit: no ``RecursionError``);
* the fields that reach the prompt (ids, questions, answers, titles, paragraph texts, supporting
  titles) are refused when they hold a control character other than tab, newline and carriage
  return (:func:`reject_control`: ANSI escapes, NUL, ...) -- the rule the ``validate`` stage
  applies to the processed data (``no_control_chars``), applied where the file and line are known.

Every malformed input raises :class:`RealDataError` (a ``ValueError``) whose message names the
file, the record and the field.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import html
import json
import re
import stat
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.data.schema import HTML_REFERENCE, NO_GOLD, Passage, Question, passage_key

Record = tuple[str, Mapping[str, Any]]  # (where, record)

MAX_DEPTH = 64  # nesting levels a record may have (the datasets' records have fewer than 8)
# the control characters (Unicode Cc) text may not hold: all but tab, newline and carriage return
# (the rule of validation.control_chars)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_FIX_TEXT = "correct or drop the record in the source file"
# byte-order marks of the encodings the loaders refuse (UTF-32 first: its LE mark starts with UTF-16's)
_OTHER_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32", "little-endian"),
    (codecs.BOM_UTF32_BE, "UTF-32", "big-endian"),
    (codecs.BOM_UTF16_LE, "UTF-16", "little-endian"),
    (codecs.BOM_UTF16_BE, "UTF-16", "big-endian"),
)


class RealDataError(ValueError):
    """Real-dataset input that cannot be used (missing or unreadable file, unknown layout, record
    without a required field, hub load failure); the message names file, record and field."""


REPEATED_ID = "repeated question id with the same content (a copy)"


@dataclass
class Loaded:
    """What one loader returns: mapped questions (``split`` still empty), the passages their
    contexts contributed, how many records were skipped (by reason) and how many were kept with
    a caveat (``notes``, by reason; e.g. FlashRAG records whose supporting ids are unknown), and
    where each kept question's record is (``where``: question id -> (file and line or record, the
    question))."""

    questions: list[dict[str, Any]] = field(default_factory=list)
    passages: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    where: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)

    def add_question(self, q: dict[str, Any], where: str) -> None:
        """Keep question ``q`` read at ``where``. Its id seen before in this file: a copy with the
        same content is dropped and counted under :data:`REPEATED_ID`; other content is a
        :class:`RealDataError` naming both records."""
        if q["id"] in self.where:
            first, kept = self.where[q["id"]]
            if kept != q:
                raise RealDataError(
                    f"{where}: question id {q['id']!r} repeats {first} with other content: "
                    "give each question its own id, or remove one of the two records"
                )
            self.skipped[REPEATED_ID] += 1
            return
        self.where[q["id"]] = (where, q)
        self.questions.append(q)


# ------------------------------------------------------------------------------- reading files
def _describe(path: Path) -> str:
    """How errors name the file: its path as given (the source labels of :mod:`.multihop` name the
    config key, not the path again)."""
    return str(path)


def file_problem(path: Path) -> str | None:
    """None when ``path`` is a regular file (after symbolic links), else what it is instead, for
    an error that says so (a directory, a link loop or ``/dev/zero`` is no missing file)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"a broken symbolic link (to {str(path.readlink())!r})" if path.is_symlink() else "file not found"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop (it resolves to itself), not a data file"
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"{kind}, not a data file: name a JSON, JSON Lines or .parquet file"


def read_records(path: str | Path) -> Iterator[Record]:
    """Yield ``(where, record)`` for each record of a JSON array, JSON Lines or Parquet file.

    The layout is detected from the content (first non-blank character ``[`` = JSON array,
    ``{`` = JSON Lines), not from the suffix, except ``.parquet``. Blank lines in JSON Lines are
    ignored and the last line may lack its newline. The file must be UTF-8 (a UTF-8 byte-order
    mark is allowed); every record passes through :func:`clean_value` (NFC, no lone surrogate,
    bounded nesting).
    """
    path = Path(path)
    problem = file_problem(path)
    if problem is not None:
        raise RealDataError(f"{path}: {problem}")
    name = _describe(path)
    if path.suffix == ".parquet":
        yield from _read_parquet(path, name)
        return
    with path.open("rb") as fh:
        raw_head = fh.read(4096)
    _check_encoding(path, raw_head)
    head = raw_head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
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


def _check_encoding(path: Path, head: bytes) -> None:
    """Refuse a UTF-16/UTF-32 file: by its byte-order mark, or (without one) by the NUL bytes that
    such files have in every ASCII character and that UTF-8 JSON text never holds."""
    fix = f"convert it to UTF-8 (e.g. `iconv -f {{enc}} -t UTF-8 {path} > {path.stem}.utf8{path.suffix}`)"
    for bom, enc, order in _OTHER_BOMS:
        if head.startswith(bom):
            raise RealDataError(
                f"{path}: the file is {enc} ({order} byte-order mark {bom.hex(' ')}), "
                f"but JSON files must be UTF-8: {fix.format(enc=enc)}"
            )
    if b"\x00" in head:
        enc = "UTF-16LE" if head[1:2] == b"\x00" else "UTF-16BE" if head[:1] == b"\x00" else "UTF-16"
        raise RealDataError(
            f"{path}: the file holds NUL bytes: it looks like {enc} without a byte-order mark "
            f"(or a binary file), but JSON files must be UTF-8: {fix.format(enc=enc)}"
        )


def _utf8(data: bytes, path: Path, lineno: int | None = None) -> str:
    """``data`` decoded as UTF-8, or a :class:`RealDataError` naming the line and byte that are not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = lineno if lineno is not None else data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise RealDataError(
            f"{path}: line {line} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at byte {column} of the line: "
            f"{exc.reason}); JSON files must be UTF-8: re-save the file as UTF-8 (e.g. `iconv -f latin1 -t UTF-8`, "
            "if it is Latin-1) or fix that byte"
        ) from None


def _json(text: str, path: Path, lineno: int | None = None) -> Any:
    """``json.loads(text)`` of the whole file (``lineno`` None) or of JSON Lines line ``lineno``; a
    syntax error or nesting beyond the parser's recursion limit is a :class:`RealDataError`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if lineno is None:
            raise RealDataError(f"{path}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
        raise RealDataError(
            f"{path}: line {lineno} is not valid JSON (column {exc.colno}: {exc.msg}); JSON Lines "
            "needs one complete object per line"
        ) from None
    except RecursionError:
        what = "the file" if lineno is None else f"line {lineno}"
        raise RealDataError(
            f"{path}: {what} is nested too deeply for the JSON parser (about a thousand levels or more; a record "
            f"has fewer than 8): the file is damaged or not a dataset file; use the dataset's own file"
        ) from None


def _read_parquet(path: Path, name: str) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise RealDataError(
            f"{path}: not a readable parquet file ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}): re-download or re-export it"
        ) from None
    for i, rec in enumerate(rows):
        yield f"{name} row {i}", clean_value(rec, f"{name} row {i}")


def _read_json_array(path: Path, name: str) -> Iterator[Record]:
    raw = path.read_bytes()
    text = _utf8(raw, path).removeprefix("\ufeff")
    data = _json(text, path)
    if not isinstance(data, list):  # head sniffing saw "[" but the decoder may disagree on a damaged file
        raise RealDataError(f"{path}: expected a JSON array of records (got a {type(data).__name__})")
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise RealDataError(f"{path}: record {i} is a {type(rec).__name__}, expected an object")
        yield f"{name} record {i}", clean_value(rec, f"{name} record {i}")


def _read_json_lines(path: Path, name: str) -> Iterator[Record]:
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = _utf8(raw, path, lineno)
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            rec = _json(line, path, lineno)
            if not isinstance(rec, dict):
                raise RealDataError(f"{path}: line {lineno} is a {type(rec).__name__}, expected an object")
            yield f"{name} line {lineno}", clean_value(rec, f"{name} line {lineno}")


# ------------------------------------------------------------------------------- text hygiene
def clean_text(text: str, where: str, name: str) -> str:
    """``text`` in Unicode NFC; a lone surrogate is a :class:`RealDataError` naming ``where`` and
    field ``name`` (it cannot be written as UTF-8: the parquet write would fail far from here)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RealDataError(
            f"{where}: field {name!r} holds a lone surrogate U+{ord(text[exc.start]):04X} at character {exc.start} "
            f"(an escaped \\u{ord(text[exc.start]):04x} without its pair is not text): {_FIX_TEXT}"
        ) from None
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def clean_value(value: Any, where: str, name: str = "", depth: int = 0) -> Any:
    """``value`` (a record, a list, a string, ...) with every string passed through :func:`clean_text`
    (mapping keys left as they are); nesting deeper than :data:`MAX_DEPTH` is a :class:`RealDataError`."""
    if isinstance(value, str):
        return clean_text(value, where, name or "record")
    if isinstance(value, (Mapping, list, tuple)) and depth >= MAX_DEPTH:
        raise RealDataError(
            f"{where}: field {name or 'record'!r} is nested more than {MAX_DEPTH} levels deep "
            f"(a record has fewer than 8): {_FIX_TEXT}"
        )
    if isinstance(value, Mapping):
        return {k: clean_value(v, where, f"{name}.{k}" if name else str(k), depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_value(v, where, f"{name}[{i}]", depth + 1) for i, v in enumerate(value)]
    return value


def unescape_entities(text: str) -> str:
    """``text`` with its HTML character references (``&amp;``, ``&quot;``, ``&#39;``, ``&#x27;``)
    decoded once, as HotpotQA's raw files keep them in titles (``Dolenz, Jones, Boyce &amp; Hart``)
    where other sources spell the name plainly. :func:`parse_context` and :func:`supporting_titles`
    decode every title and text with it, before control characters are refused and titles
    deduplicated, so every context-style loader (HotpotQA, 2Wiki, FlashRAG's ``metadata.context``)
    gives passages and supporting facts in one spelling. Only complete
    references (with their ``;``) are decoded: ``html.unescape`` alone would also read the
    legacy forms without one (``&para`` in ``&paragraph``), which plain text can hold."""
    return HTML_REFERENCE.sub(lambda m: html.unescape(m.group(0)), text)


def reject_control(text: str, where: str, name: str) -> str:
    """``text``, unless it holds a control character (Unicode Cc: U+0000-U+001F, U+007F-U+009F)
    other than tab, newline and carriage return: then a :class:`RealDataError` naming the field,
    the character and its place."""
    m = _CONTROL.search(text)
    if m is None:
        return text
    ch, kind = m.group(0), " (an ANSI escape sequence)" if m.group(0) == "\x1b" else ""
    raise RealDataError(
        f"{where}: field {name!r} holds the control character U+{ord(ch):04X}{kind} at character {m.start()}: "
        f"text may hold no control characters but tab and newline; {_FIX_TEXT}"
    )


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
    """A required non-blank string field, stripped, without control characters (:func:`reject_control`)."""
    value = require(rec, name, str, where).strip()
    if not value:
        raise RealDataError(f"{where}: field {name!r} is empty")
    return reject_control(value, where, name)


def record_id(rec: Mapping[str, Any], where: str, *names: str) -> str:
    """The first present id field among ``names`` (string or integer), as a string."""
    for name in names:
        if rec.get(name) is not None:
            value = rec[name]
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
                raise RealDataError(f"{where}: field {name!r} must be a non-empty string")
            return reject_control(str(value).strip(), where, name)
    raise RealDataError(f"{where}: required field {' or '.join(repr(n) for n in names)} is missing")


def answer_list(values: Iterable[Any], where: str, name: str) -> list[str]:
    """Non-empty, stripped, order-preserving deduplicated answer strings (no control characters)."""
    out: list[str] = []
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise RealDataError(f"{where}: field {name!r}[{i}] must be a string (got {type(v).__name__})")
        v = reject_control(v.strip(), where, f"{name}[{i}]")
        if v and v not in out:
            out.append(v)
    if not out:
        raise RealDataError(f"{where}: field {name!r} holds no non-empty answer")
    return out


# ---------------------------------------------------------------------------------- passages
PASSAGE_PREFIX = "p"


def passage_id(title: str, text: str) -> str:
    """Stable passage id of a (title, text) pair: ``p:`` + 16 hex digits of sha1(title NUL text),
    both in Unicode NFC (:func:`~agentr1.data.schema.passage_key`); equal passages of any source
    get the same id."""
    title, text = passage_key(title, text)
    digest = hashlib.sha1(f"{title}\x00{text}".encode()).hexdigest()[:16]
    return f"{PASSAGE_PREFIX}:{digest}"


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
    """Passages in first-appearance order, one per id and one per (title, text)
    (:func:`~agentr1.data.schema.passage_key`)."""

    def __init__(self) -> None:
        self._passages: dict[str, dict[str, Any]] = {}
        self._by_key: dict[tuple[str, str], str] = {}

    def add(self, pid: str, title: str, text: str, where: str = "") -> str:
        """Add a passage unless it is already there; returns the id the corpus keeps for it (``pid``,
        or the id of an earlier passage with the same title and text). An id already used by a
        different passage is an error."""
        old = self._passages.get(pid)
        if old is not None:
            if old["title"] != title or old["text"] != text:
                raise RealDataError(
                    f"{where or 'corpus'}: passage id {pid!r} is already used by a different passage "
                    f"(title {old['title']!r} vs {title!r})"
                )
            return pid
        key = passage_key(title, text)
        if key in self._by_key:
            return self._by_key[key]
        self._by_key[key] = pid
        self._passages[pid] = Passage(pid, title, text).to_dict()
        return pid

    def extend(self, passages: Iterable[Mapping[str, Any]], where: str = "") -> int:
        """Add ``passages``; returns how many were already in the corpus (kept once)."""
        before, n = len(self._passages), 0
        for p in passages:
            self.add(p["id"], p["title"], p["text"], where)
            n += 1
        return n - (len(self._passages) - before)

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
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RealDataError(f"{where}: field {name!r} is a string but not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise RealDataError(f"{where}: field {name!r} holds JSON nested too deeply to parse: {_FIX_TEXT}") from None
        return clean_value(decoded, where, name)  # its escapes may spell NFD text or a lone surrogate
    return value


def parse_context(value: Any, where: str, name: str = "context") -> list[tuple[str, str]]:
    """``[(title, text)]`` from either context layout, HTML references decoded (:func:`unescape_entities`).

    Official: ``[[title, [sentence, ...]], ...]``. Hugging Face: ``{"title": [...],
    "sentences": [[...], ...]}`` (FlashRAG's 2Wiki files name the second column ``content``).
    Either may arrive JSON-encoded in a string column (some hub copies store it so).
    """
    value = _decoded(value, where, name)
    if isinstance(value, Mapping):
        titles = value.get("title")
        sents = value.get("sentences", value.get("content"))
        if not isinstance(titles, list) or not isinstance(sents, list):
            raise RealDataError(f"{where}: field {name!r} must hold lists 'title' and 'sentences' (or 'content')")
        if len(titles) != len(sents):
            raise RealDataError(f"{where}: field {name!r} has {len(titles)} titles but {len(sents)} sentence lists")
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
        if not isinstance(title, str) or not unescape_entities(title).strip():
            raise RealDataError(f"{where}: field {name!r}[{i}] has no title")
        if isinstance(sents, str):
            sents = [sents]
        if not isinstance(sents, list) or not all(isinstance(s, str) for s in sents):
            raise RealDataError(f"{where}: field {name!r}[{i}] ({title!r}) sentences must be strings")
        text = reject_control(unescape_entities(join_sentences(sents)), where, f"{name}[{i}] sentences")
        out.append((reject_control(unescape_entities(title).strip(), where, f"{name}[{i}] title"), text))
    return out


def supporting_titles(value: Any, where: str, name: str = "supporting_facts") -> list[str]:
    """Titles of the supporting facts (HTML references decoded), in order of first appearance (one per paragraph).

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
        if not isinstance(t, str) or not unescape_entities(t).strip():
            raise RealDataError(f"{where}: field {name!r}[{i}] has no title")
        t = reject_control(unescape_entities(t).strip(), where, f"{name}[{i}] title")
        if t not in out:
            out.append(t)
    if not out:
        raise RealDataError(f"{where}: field {name!r} is empty")
    return out


@dataclass
class ContextMatch:
    """A record's context passages (``[(id, title, text)]``) and its supporting passage ids."""

    passages: list[tuple[str, str, str]]
    supporting_ids: list[str]
    missing_titles: list[str]


def match_context(context: list[tuple[str, str]], titles: list[str]) -> ContextMatch:
    """Give context paragraphs passage ids and resolve supporting titles to them.

    A title that occurs more than once in a context resolves to its first paragraph (in the
    real data such repeats carry the same text).
    """
    passages, by_title = [], {}
    for title, text in context:
        pid = passage_id(title, text)
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

    A record whose supporting paragraph is absent from its own context (HotpotQA fullwiki:
    retrieved contexts) has no gold passage in the corpus: it is kept with ``supporting_ids: []``
    and counted under :data:`~agentr1.data.schema.NO_GOLD` in ``loaded.notes`` (the rule of
    :func:`~agentr1.data.schema.gold_unknown`); its context paragraphs still join the corpus.
    Returns whether the gold passages were found.
    """
    match = match_context(context, titles)
    for pid, title, body in match.passages:
        corpus.add(pid, title, body, where)
    found = not match.missing_titles
    if not found:
        loaded.notes[NO_GOLD] += 1
    loaded.add_question(question(qid, text, answers, qtype, hops, match.supporting_ids if found else [], source), where)
    return found


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
