"""The unified dataset schema shared by every source (synthetic world, HotpotQA, 2Wiki, MuSiQue).

Questions: ``id, question, answers[list], type, hops, supporting_ids[list], source, split``, plus
           the optional columns of :data:`OPTIONAL_QUESTION_FIELDS` (``expression``: the arithmetic
           expression whose value is the answer, for the calculator questions of ``data.task:
           tools``), written only when some row of the file carries one.
Corpus:    ``id, title, text``.

**Questions whose gold passages are not in the corpus** (:func:`gold_unknown`; one rule for the
loaders, ``validate``, the recall report and the SFT oracle): a question with ``hops >= 1`` whose
supporting passages are not known (a FlashRAG HotpotQA record with a fullwiki context that lacks
its gold paragraphs, an NQ record) is **kept** with ``supporting_ids: []`` whatever its hop count.
The loaders count it per source under :data:`NO_GOLD`; ``validate`` accepts the empty list and
counts such questions per source (``summary.json`` ``records.without_gold``); it is scored on its
answer only (EM/F1: the reward never reads ``supporting_ids``), left out of retrieval recall
(the report's ``no_supporting``) and of the SFT oracle's demonstrations (the oracle cannot script
the searches it does not know). ``hops == 0`` with no ids is a question that needs no passage
(GSM8K, arithmetic), not one of these.

**Equal passages are one passage** (:func:`passage_key`): two passages with the same title and
text (after Unicode NFC) are the same passage whatever source brought them; the loaders give them
one id and the corpus keeps one, and the recall report credits a hit whose passage equals a
gold passage (:func:`canonical_ids`).

On disk (``data.processed_dir``): ``<split>.parquet`` for each of train/dev/test/ood (a split with
no questions is written empty) and ``corpus.parquet``. Writes are deterministic (fixed schema, row
order as given, no timestamps) so re-running a stage gives byte-identical files.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentr1.config import SPLITS

QUESTION_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("answers", pa.list_(pa.string())),
        ("type", pa.string()),
        ("hops", pa.int32()),
        ("supporting_ids", pa.list_(pa.string())),
        ("source", pa.string()),
        ("split", pa.string()),
    ]
)
CORPUS_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])

# Optional question columns: absent from files (and rows) of datasets that do not use them, so
# those files keep the bytes they had before the column existed.
OPTIONAL_QUESTION_FIELDS = (pa.field("expression", pa.string()),)

QUESTION_FIELDS = tuple(QUESTION_SCHEMA.names)
CORPUS_FILE = "corpus.parquet"
# a complete HTML character reference (&amp; &quot; &#39; &#x27;): passage titles hold none once
# loaded (HotpotQA's raw titles do: agentr1.data.realformat.unescape_entities; validate checks it)
HTML_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


NO_GOLD = "gold passages not in the corpus: kept with supporting_ids [] (scored on the answer, not in recall)"


def gold_unknown(question: Mapping[str, Any]) -> bool:
    """Whether ``question`` is one whose gold passages are not in the corpus: ``hops >= 1`` and
    no ``supporting_ids`` (the rule in the module docstring)."""
    ids = question.get("supporting_ids")
    return (ids is None or len(ids) == 0) and int(question.get("hops") or 0) >= 1


def passage_key(title: str, text: str) -> tuple[str, str]:
    """What makes two passages the same passage: their title and text in Unicode NFC."""
    return unicodedata.normalize("NFC", title), unicodedata.normalize("NFC", text)


def canonical_ids(corpus: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Passage id -> the id of the first passage of ``corpus`` equal to it (:func:`passage_key`);
    an id maps to itself unless an earlier passage has the same title and text."""
    first: dict[tuple[str, str], str] = {}
    out: dict[str, str] = {}
    for p in corpus:
        pid = str(p["id"])
        out[pid] = first.setdefault(passage_key(str(p["title"]), str(p["text"])), pid)
    return out


@dataclass
class Question:
    id: str
    question: str
    answers: list[str]
    type: str
    hops: int
    supporting_ids: list[str]
    source: str
    split: str

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in QUESTION_FIELDS}


@dataclass
class Passage:
    id: str
    title: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text}


@dataclass
class Dataset:
    """All splits plus the corpus, in memory."""

    questions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    corpus: list[dict[str, Any]] = field(default_factory=list)

    def split(self, name: str) -> list[dict[str, Any]]:
        return self.questions.get(name, [])


def _rows(items: Iterable[Mapping[str, Any] | Question | Passage]) -> list[dict[str, Any]]:
    return [it.to_dict() if hasattr(it, "to_dict") else dict(it) for it in items]


def encodes_utf8(text: str) -> bool:
    """False for a string with a lone surrogate (JSON's ``"\\ud800"``): text that UTF-8, and so Parquet
    and every retriever, cannot take (the one check of it: ``data/`` and the retrieval server)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unencodable(rows: list[dict[str, Any]]) -> str:
    """The first row field holding text that UTF-8 cannot encode (a lone surrogate), in words."""
    for i, r in enumerate(rows):
        for k, v in r.items():
            if any(isinstance(t, str) and not encodes_utf8(t) for t in (v if isinstance(v, list) else [v])):
                return f"row {i} (id {r.get('id')!r}) field {k!r}"
    return "a row"


def _write(rows: list[dict[str, Any]], schema: pa.Schema, path: Path) -> None:
    try:
        table = pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in rows], schema=schema)
    except UnicodeEncodeError as exc:  # a lone surrogate: the loaders refuse them, a plug-in may not
        from agentr1.errors import StageError

        raise StageError(
            f"{path.name}: {_unencodable(rows)} holds a lone surrogate ({exc.reason}), which no "
            "UTF-8 file can hold: fix the loader or the source record that produced it"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", write_statistics=False)


def question_schema(rows: Iterable[Mapping[str, Any]]) -> pa.Schema:
    """:data:`QUESTION_SCHEMA` plus each optional field that some row sets (not None)."""
    rows = list(rows)
    extra = [f for f in OPTIONAL_QUESTION_FIELDS if any(r.get(f.name) is not None for r in rows)]
    return pa.schema(list(QUESTION_SCHEMA) + extra)


def write_questions(items: Iterable[Mapping[str, Any] | Question], path: str | Path) -> None:
    rows = _rows(items)
    schema = question_schema(rows)
    _write([{**{f.name: None for f in OPTIONAL_QUESTION_FIELDS}, **r} for r in rows], schema, Path(path))


def write_corpus(items: Iterable[Mapping[str, Any] | Passage], path: str | Path) -> None:
    _write(_rows(items), CORPUS_SCHEMA, Path(path))


def read_table(path: str | Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def write_dataset(ds: Dataset, out_dir: str | Path) -> None:
    out_dir = Path(out_dir)
    for split in SPLITS:
        write_questions(ds.split(split), out_dir / f"{split}.parquet")
    write_corpus(ds.corpus, out_dir / CORPUS_FILE)


def read_dataset(processed_dir: str | Path) -> Dataset:
    d = Path(processed_dir)
    if not (d / CORPUS_FILE).exists():
        raise FileNotFoundError(f"{d / CORPUS_FILE} not found: run `agentr1 prepare` (or `dvc repro prepare`) first")
    return Dataset(
        questions={s: read_table(d / f"{s}.parquet") for s in SPLITS if (d / f"{s}.parquet").exists()},
        corpus=read_table(d / CORPUS_FILE),
    )
