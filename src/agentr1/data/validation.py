"""The ``validate`` stage's checks (:mod:`agentr1.stages.validate`): the processed dataset with Great
Expectations, before anything uses it.

One module of more than 500 lines on purpose: it is one expectation suite, each check an
expectation with its own message and fix, over rows loaded once; split by check it would scatter
that loading and the summary every check writes into (the GX plumbing is in :mod:`agentr1.data.gx_suite`).

What is checked (each is one GX expectation, named in ``summary.json`` and in error messages
together with what to do about it):

* files (one row per processed file: ``<split>.parquet`` for each of :data:`~agentr1.config.SPLITS`
  and ``corpus.parquet``): each exists; each is a readable parquet file (not truncated, not random
  bytes); each has the schema's columns with compatible types (a dropped ``answers`` column is
  named); each split in ``validate.required_splits`` holds at least one question. When a file
  check fails the content checks below are not run (they would only echo the damage); they are
  listed under ``skipped`` in ``summary.json``.
* questions: ``id`` non-null and unique over all splits; ``question`` non-null and not blank once
  whitespace and invisible format characters (Unicode category Cf: zero-width spaces and joiners,
  BOM, ...) are removed; at least one answer, and no answer that is empty under the reward's
  :func:`~agentr1.data.answers.normalize_answer` (``"?"``, ``"the"``: such a gold could only
  match an empty prediction); ``hops`` non-null and within ``data.hops`` [min, max]; ``type`` and
  ``source`` non-null; ``split`` in SPLITS and equal to the file the row was read from; every
  ``supporting_ids`` entry exists in the corpus, and there are as many as ``hops`` or none (gold
  passages not in the corpus: :func:`~agentr1.data.schema.gold_unknown`); splits are disjoint (no
  id and no normalized question text in two splits); answer leaks (the gold answer, the first,
  appearing verbatim in its own question,
  types in ``validate.leak_allowed_types`` exempt) in at most ``validate.max_leak_share`` of each
  source's questions; every dev/test/ood answer of a source in ``validate.copy_sources`` can be
  copied: each word of its first gold answer occurs in the train split's texts (its questions,
  answers and the passages they cite), so a policy trained there has seen every token it must
  write (:func:`uncopyable_words`; the share per split is the *copy cap* in ``summary.json``).
* calculator questions (only with ``data.task: tools`` or a GSM8K source, so other datasets keep
  their reports): ``arithmetic`` / ``multi_tool`` / ``gsm8k`` answers are numbers, the synthetic
  ones' ``expression`` evaluates to the answer and their hops match (:func:`tool_question_problem`);
  every ``type`` is a known one (the new types included).
* corpus: ``id`` non-null and unique; ``title`` non-null; ``text`` not blank; not empty.
* content bounds (:func:`bound_checks`, bounds from ``validate.*``): one answer set per question
  text within a split; supporting ids distinct and as many as ``hops``; no control characters in
  questions and answers; questions and answers at most ``max_question_chars`` /
  ``max_answer_chars``; question and passage ids plain names of at most ``max_id_chars``; passage
  titles not blank; no question, answer or passage holding one of ``special_tokens`` or any
  ``<|name|>`` control-token form.
* text hygiene (:func:`unicode_checks`, issue 31): passage titles and texts hold no control
  characters either (they reach the prompt as search results); every text field of questions
  and passages is in Unicode NFC (the loaders normalize at load), and no two questions (ids or
  question texts) or passages (ids, or title and text) differ only in normalization: both records
  of such a pair are named.

Checks that relate several rows, tables or files (missing passages, split overlap, leak shares,
file damage) are computed as derived columns with pandas and then asserted with GX, so that every
verdict and every offending row comes out of one GX validation result.

Outputs in ``validate.report_dir``: ``summary.json`` (DVC metric; deterministic; includes the
per-source leak report: count, share and the first ``max_examples`` leaking ids, and with
``data.source: real`` the ``records`` block of :func:`records_report`: questions without gold
passages per source, and what ``prepare`` skipped per source and reason),
``gx_result.json`` (the GX validation results, with run ids and times removed) and, on success
only, ``passed.json``: the marker that later stages check with :func:`require_validated`. It
holds hashes of the processed parquet files and of the params the verdict depends on, so data
that changed after validation is refused. Any old marker is deleted before anything else, so a
run that fails (for whatever reason) never leaves one; every file is written to a temporary path
and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from agentr1.config import SPLITS, Config, ValidateConfig
from agentr1.data.answers import normalize_answer, normalize_number, normalize_text
from agentr1.data.gx_suite import Check, CheckResult, run_checks
from agentr1.data.prepare import MANIFEST_FILE
from agentr1.data.schema import (
    CORPUS_FILE,
    CORPUS_SCHEMA,
    HTML_REFERENCE,
    OPTIONAL_QUESTION_FIELDS,
    QUESTION_FIELDS,
    QUESTION_SCHEMA,
    Dataset,
    gold_unknown,
)
from agentr1.errors import StageError

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
GX_RESULT_FILE = "gx_result.json"
MARKER_FILE = "passed.json"

_NOT_BLANK = r"\S"  # a value with at least one non-space character

# what to do when a check fails (printed after it in the error message)
_FIX_FILES = "run `agentr1 prepare` (or `dvc repro prepare`) to rewrite data.processed_dir"
_FIX_SPLIT = (
    "give the split questions (data.synthetic.questions, or data.real.sources / ratios) and run "
    "`agentr1 prepare`, or leave it out of validate.required_splits"
)
_FIX_DATA = "correct or drop the offending records in the source data (or the generator), then run `agentr1 prepare`"
_FIX_COPY = (
    "build held-out names from parts train names use (agentr1.data.names), or give train more questions; "
    "for data whose answers need not be copyable, drop its source from validate.copy_sources"
)
_FIX_CORPUS = "add the missing passages (data.real.corpus or the records' contexts) or fix supporting_ids"
_FIX_HOPS = "fix the records' hop counts, or widen data.hops"
_FIX_LEAK = (
    "rephrase or drop the leaking questions, exempt their type (validate.leak_allowed_types) or allow "
    "a share per source (validate.max_leak_share)"
)


# --------------------------------------------------------------------------------------- files
def expected_files() -> list[tuple[str, pa.Schema, str | None]]:
    """(file name, schema, split or None for the corpus) of every file ``agentr1 prepare`` writes."""
    return [(f"{s}.parquet", QUESTION_SCHEMA, s) for s in SPLITS] + [(CORPUS_FILE, CORPUS_SCHEMA, None)]


def _compatible(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``got`` can stand for the schema's ``want`` (string/large_string,
    any integer width, lists of those; an all-null column is left to the null checks)."""
    if pa.types.is_null(got):
        return True
    if pa.types.is_list(want):
        return (pa.types.is_list(got) or pa.types.is_large_list(got)) and _compatible(got.value_type, want.value_type)
    if pa.types.is_string(want):
        return pa.types.is_string(got) or pa.types.is_large_string(got)
    if pa.types.is_integer(want):
        return pa.types.is_integer(got)
    return got.equals(want)


def schema_problems(actual: pa.Schema, expected: pa.Schema) -> str | None:
    """What keeps a file's columns from the expected schema ("missing column 'answers'; ..."), or None."""
    problems = []
    for f in expected:
        i = actual.get_field_index(f.name)
        if i < 0:
            problems.append(f"missing column {f.name!r}")
        elif not _compatible(actual.field(i).type, f.type):
            problems.append(f"column {f.name!r} is {actual.field(i).type}, expected {f.type}")
    return "; ".join(problems) or None


def _empty_split(split: str | None, n_rows: int, required: list[str]) -> str | None:
    """The ``files.split_not_empty`` value: set for a required split without questions."""
    if split is None or n_rows > 0 or split not in required:
        return None
    return f"0 questions (validate.required_splits lists {split!r})"


def _file_row(name: str, n_rows: int | None = None, **problems: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": name,
        "missing_file": None,
        "read_error": None,
        "schema_error": None,
        "empty_split": None,
        "rows": n_rows,
    }
    row.update(problems)
    return row


def _files_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows).astype(object)
    frame["rows"] = pd.array([r["rows"] for r in rows], dtype="Int64")
    return frame


def _read_error(exc: Exception) -> str:
    """The ``files.readable`` value: the reader's error, first line, without the path (the row names the file)."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    detail = re.sub(r"^Could not open Parquet input source '.*?': ", "", first)
    return f"not a readable parquet file: {type(exc).__name__}: {detail}"


def read_processed(processed_dir: str | Path, required_splits: list[str]) -> tuple[pd.DataFrame, Dataset | None]:
    """Read ``processed_dir`` without trusting it: the files table and, when every file is
    present, readable and of the right schema, the dataset (else None).

    The files table has one row per :func:`expected_files` entry (``id`` = file name) and the
    derived columns the ``files.*`` checks assert to be null: ``missing_file``, ``read_error``
    (a truncated or non-parquet file), ``schema_error`` (missing or mistyped columns) and
    ``empty_split``; ``rows`` is the row count of a readable file.
    """
    d = Path(processed_dir)
    rows: list[dict[str, Any]] = []
    questions: dict[str, list[dict[str, Any]]] = {}
    corpus: list[dict[str, Any]] = []
    for name, schema, split in expected_files():
        path = d / name
        if not path.is_file():
            rows.append(_file_row(name, missing_file=f"{path} not found"))
            continue
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError, ValueError) as exc:  # truncated, random bytes, not parquet
            rows.append(_file_row(name, read_error=_read_error(exc)))
            continue
        problem = schema_problems(table.schema, schema)
        rows.append(
            _file_row(
                name,
                table.num_rows,
                schema_error=problem,
                empty_split=_empty_split(split, table.num_rows, required_splits),
            )
        )
        if problem is None:
            optional = [f.name for f in OPTIONAL_QUESTION_FIELDS if split is not None and f.name in table.schema.names]
            records = table.select([*schema.names, *optional]).to_pylist()
            if split is None:
                corpus = records
            else:
                questions[split] = records
    files = _files_frame(rows)
    intact = bool(files[["missing_file", "read_error", "schema_error"]].isna().to_numpy().all())
    return files, (Dataset(questions=questions, corpus=corpus) if intact else None)


def files_frame_for(ds: Dataset, required_splits: list[str]) -> pd.DataFrame:
    """The files table of an in-memory dataset (every file present and well-formed)."""
    rows = [
        _file_row(f"{s}.parquet", len(ds.split(s)), empty_split=_empty_split(s, len(ds.split(s)), required_splits))
        for s in SPLITS
    ]
    return _files_frame(rows + [_file_row(CORPUS_FILE, len(ds.corpus))])


# ----------------------------------------------------------------------------- derived columns
def visible_text(text: str) -> str:
    """``text`` without invisible format characters (Unicode category Cf: U+200B zero-width space,
    U+200C/U+200D joiners, U+2060 word joiner, U+FEFF BOM, ...) and without surrounding whitespace."""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf").strip()


def leaked_answer(question: Any, answers: Any) -> str | None:
    """The gold answer (the first of ``answers``) when it is found verbatim in the question, else None.

    Both sides are normalized with :func:`normalize_text` and matched on whole words, so the
    answer "Paris" leaks in "Is paris in France?" but "1" does not leak in "born in 1990". Only
    the first answer counts: the others are aliases a prediction may also match (MuSiQue's
    ``answer_aliases`` hold words such as "star" or "lead" that a question may well contain
    without giving its answer away).
    """
    if not isinstance(question, str) or answers is None or len(answers) == 0:
        return None
    answer = answers[0]
    norm = normalize_text(answer) if isinstance(answer, str) else ""
    return str(answer) if norm and f" {norm} " in f" {normalize_text(question)} " else None


def _blank_question(question: Any) -> str | None:
    """The question text when it is blank once whitespace and Cf characters are removed, else None."""
    return question if isinstance(question, str) and not visible_text(question) else None


def _blank_answer(answers: Any) -> str | None:
    """The first answer that the reward's normalizer turns into "" (``"?"``, ``"the"``, ``" "``,
    zero-width characters), ``"<null answer>"`` for a null entry, else None. Such a gold answer
    can never be matched (see :mod:`agentr1.env.rewards`), so the question could never be solved."""
    for a in answers if answers is not None else []:
        if not isinstance(a, str):
            return "<null answer>"
        if not normalize_answer(visible_text(a)):
            return a
    return None


def _splits_sharing(frame: pd.DataFrame, key: pd.Series) -> pd.Series:
    """Per row: the sorted splits (comma-joined) sharing its ``key`` when more than one, else None."""
    if frame.empty:
        return pd.Series([], index=frame.index, dtype=object)
    split_sets = (
        pd.DataFrame({"key": key, "split": frame["file_split"]})
        .dropna(subset=["key"])
        .groupby("key", sort=False)["split"]
        .agg(lambda s: ",".join(sorted(set(s))))
    )
    joined = key.map(split_sets)
    shared = joined.where(joined.str.contains(",", na=False))
    return shared.astype(object).where(shared.notna(), None)


# --------------------------------------------------- content bounds (issue 26): one derived column each
_CHATML_LIKE = re.compile(r"<\|[^<>|\s]{1,64}\|>")  # <|im_end|>, <|endoftext|>, <|eot_id|>, ...
_UNSAFE_ID = re.compile(r"[/\\\s\x00-\x1f\x7f]|\.\.|^\.|^$")  # a separator, space, control char, '..', leading '.'
_ALLOWED_CONTROL = "\t\n\r"


def special_tokens_in(texts: Any, tokens: list[str]) -> str | None:
    """The special-token strings found in ``texts`` (one string or a list), comma-joined, or None:
    each of ``tokens`` and every ``<|name|>`` form (ChatML, Qwen, Llama-3 markers)."""
    found: list[str] = []
    for text in [texts] if isinstance(texts, str) else list(texts) if texts is not None else []:
        if not isinstance(text, str):
            continue
        found += [t for t in tokens if t in text] + _CHATML_LIKE.findall(text)
    return ", ".join(sorted(set(found))) or None


def first_control_char(texts: Iterable[tuple[str, Any]]) -> str | None:
    """The first control character (Unicode Cc other than tab, newline, carriage return: ANSI
    escapes, NUL, ...) in the ``(label, text)`` pairs, as ``"answer 2: U+001B at 7"``, or None."""
    for where, text in texts:
        if not isinstance(text, str):
            continue
        for pos, ch in enumerate(text):
            if unicodedata.category(ch) == "Cc" and ch not in _ALLOWED_CONTROL:
                return f"{where}: U+{ord(ch):04X} at {pos}"
    return None


def control_chars(question: Any, answers: Any) -> str | None:
    """:func:`first_control_char` of the question and its answers (``answer 1`` is the first)."""
    return first_control_char([("question", question)] + [(f"answer {i + 1}", a) for i, a in enumerate(answers or [])])


def html_reference(title: Any) -> str | None:
    """The first HTML character reference (``&amp;``) a passage title still holds: a loader left
    the raw file's escaping in place (HotpotQA's titles; ``realformat.unescape_entities``)."""
    m = HTML_REFERENCE.search(title) if isinstance(title, str) else None
    return None if m is None else m.group(0)


def passage_control_chars(title: Any, text: Any) -> str | None:
    """:func:`first_control_char` of a passage's title and text (both reach the prompt as search results)."""
    return first_control_char([("title", title), ("text", text)])


def _code_points(text: str) -> str:
    return " ".join(f"U+{ord(ch):04X}" for ch in text)


def not_nfc(texts: Iterable[tuple[str, Any]]) -> str | None:
    """The first of the ``(label, text)`` pairs not in Unicode NFC, as ``"title: not NFC from
    character 4 (U+0065 U+0301; NFC U+00E9)"``, or None. The loaders normalize to NFC, so such text
    comes from elsewhere, and would neither match nor deduplicate with its NFC twin."""
    for where, text in texts:
        if not isinstance(text, str) or unicodedata.is_normalized("NFC", text):
            continue
        nfc = unicodedata.normalize("NFC", text)
        i = next((k for k, (a, b) in enumerate(zip(text, nfc)) if a != b), min(len(text), len(nfc)))
        return (
            f"{where}: not NFC from character {i} ({_code_points(text[i : i + 3])}; NFC {_code_points(nfc[i : i + 2])})"
        )
    return None


def _nfc_key(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return tuple(unicodedata.normalize("NFC", v) for v in value)
    return None


def nfc_twins(keys: Sequence[Any], ids: Sequence[Any], what: str) -> list[str | None]:
    """Per row: ``"<what> equals that of 'x' under NFC"`` naming the other rows whose key (a string
    or a tuple of strings) differs from this row's only in Unicode normalization, else None. Both
    rows of such a pair are flagged, so the report names both records (an exact repeat is left to
    the uniqueness checks)."""
    norm = [_nfc_key(k) for k in keys]
    groups: dict[Any, list[tuple[Any, Any]]] = {}
    for key, n, rid in zip(keys, norm, ids):
        if n is not None:
            groups.setdefault(n, []).append((key, rid))
    out: list[str | None] = []
    for key, n in zip(keys, norm):
        twins = [str(rid) for other, rid in groups.get(n, ()) if other != key] if n is not None else []
        out.append(f"{what} equals that of {', '.join(repr(t) for t in twins[:3])} under NFC" if twins else None)
    return out


def first_of(*columns: Sequence[str | None]) -> list[str | None]:
    """Per row: the first non-None value of ``columns`` (one list per derived value)."""
    return [next((v for v in values if v is not None), None) for values in zip(*columns)]


def too_long(texts: Any, limit: int, what: str) -> str | None:
    """``"<what> of N chars (at most limit)"`` for the first of ``texts`` over ``limit``, or None."""
    for text in [texts] if isinstance(texts, str) else list(texts) if texts is not None else []:
        if isinstance(text, str) and len(text) > limit:
            return f"{what} of {len(text)} chars (at most {limit})"
    return None


def unsafe_id(value: Any, limit: int) -> str | None:
    """Why an id is not a plain name (it may become a file or folder name, a trace or run key):
    over ``limit`` characters, empty, a ``/`` or ``\\``, whitespace or a control character, a
    ``..`` or a leading ``.``; else None."""
    if not isinstance(value, str):
        return None  # a null id is the *.id_not_null check's
    if len(value) > limit:
        return f"{len(value)} chars (at most {limit})"
    m = _UNSAFE_ID.search(value)
    return None if m is None else f"{value[:60]!r} holds {m.group(0)!r}" if value else "empty"


def hops_support_problem(hops: Any, supporting_ids: Any) -> str | None:
    """What keeps ``hops`` and ``supporting_ids`` from agreeing, or None: the ids must be distinct,
    and their number equal to ``hops``, or zero: a question whose gold passages are not in the
    corpus (:func:`~agentr1.data.schema.gold_unknown`, any hop count: FlashRAG HotpotQA with
    fullwiki contexts, NQ) or that needs none (GSM8K)."""
    if hops is None or pd.isna(hops) or supporting_ids is None:
        return None
    ids = [str(i) for i in supporting_ids]
    if len(set(ids)) != len(ids):
        return f"repeated supporting ids {sorted({i for i in ids if ids.count(i) > 1})}"
    if ids and len(ids) != int(hops):
        return f"hops {int(hops)} but {len(ids)} supporting ids"
    return None


def _conflicting_answers(q: pd.DataFrame) -> pd.Series:
    """Per row: the answer sets of its split's other rows with the same normalized question text,
    when they differ from its own (``"'a' vs 'b'"``), else None."""
    key = pd.Series(
        [
            (split, normalize_text(text)) if isinstance(text, str) else None
            for split, text in zip(q["file_split"], q["question"])
        ],
        index=q.index,
        dtype=object,
    )
    answers = [
        tuple(sorted({normalize_answer(a) for a in ans if isinstance(a, str)})) if ans is not None else ()
        for ans in q["answers"]
    ]
    seen: dict[Any, set[tuple[str, ...]]] = {}
    for k, a in zip(key, answers):
        if k is not None:
            seen.setdefault(k, set()).add(a)
    return pd.Series(
        [
            " vs ".join(repr(list(x)) for x in sorted(seen[k])) if k is not None and len(seen[k]) > 1 else None
            for k in key
        ],
        index=q.index,
        dtype=object,
    )


# Calculator question types (data.task: tools, GSM8K): numeric answers; the synthetic ones carry an
# expression with that value and a fixed number of supporting passages.
TOOL_HOPS = {"arithmetic": 0, "multi_tool": 2}
NUMERIC_TYPES = (*TOOL_HOPS, "gsm8k")
KNOWN_TOOL_TASK_TYPES = ("bridge", "comparison", "compositional", "inference", "chain", *NUMERIC_TYPES)


_WORD = re.compile(r"\w+", re.UNICODE)


def train_words(ds: Dataset) -> set[str]:
    """The words of the train split's texts: its questions, their answers and the passages they
    cite (title and text)."""
    passages = {str(p["id"]): f"{p['title']} {p['text']}" for p in ds.corpus}
    words: set[str] = set()
    for q in ds.split("train"):
        words.update(_WORD.findall(str(q["question"])))
        for a in q["answers"] or ():
            words.update(_WORD.findall(str(a)))
        for pid in q["supporting_ids"] or ():
            words.update(_WORD.findall(passages.get(str(pid), "")))
    return words


def uncopyable_words(answers: Any, known: set[str]) -> str | None:
    """The words of the first gold answer that ``known`` lacks (space-joined), or None."""
    if answers is None or len(answers) == 0:
        return None
    missing = [w for w in _WORD.findall(str(answers[0])) if w not in known]
    return " ".join(dict.fromkeys(missing)) or None


def copy_cap(q: pd.DataFrame, n_words: int) -> dict[str, Any]:
    """Per held-out split checked (``uncopyable_answer`` computed): questions, how many can be
    copied, their share (the copy cap) and the first ``n_words`` missing words."""
    out: dict[str, Any] = {}
    for split in SPLITS[1:]:
        rows = q["file_split"] == split
        if not rows.any():
            continue
        bad = q.loc[rows & q["uncopyable_answer"].notna(), "uncopyable_answer"]
        words = sorted({w for text in bad for w in text.split()})
        out[split] = {
            "questions": int(rows.sum()),
            "copyable": int(rows.sum()) - len(bad),
            "share": (int(rows.sum()) - len(bad)) / int(rows.sum()),
            "missing_words": words[:n_words],
        }
    return out


def tool_checks_on(cfg: Config) -> bool:
    """Whether the calculator-question checks run: ``data.task: tools`` or a GSM8K source."""
    return cfg.data.task == "tools" or any(s.dataset == "gsm8k" for s in cfg.data.real.sources)


def _evaluate(expression: str) -> str:
    """What the calculator tool answers for ``expression`` (its evaluator and number format, default limits)."""
    from agentr1.data.arithmetic import Arithmetic, CalculatorToolConfig, format_number

    return format_number(Arithmetic().evaluate(expression), CalculatorToolConfig().significant_digits)


def tool_question_problem(qtype: Any, hops: Any, supporting_ids: Any, answers: Any, expression: Any) -> str | None:
    """What is wrong with a calculator question (:data:`NUMERIC_TYPES`), else None (other types:
    None): its first answer must be a number (:func:`~agentr1.data.answers.normalize_number`);
    ``arithmetic`` / ``multi_tool`` rows need an ``expression`` whose value, written as the
    calculator tool writes it (:func:`~agentr1.data.arithmetic.format_number`, default
    ``significant_digits``) and normalized as the reward normalizes it, is that number (so
    ``1/10`` matches ``0.1`` and ``1/3`` matches ``0.3333333333``), and ``hops`` = number of
    supporting ids = :data:`TOOL_HOPS`."""
    if qtype not in NUMERIC_TYPES:
        return None
    first = answers[0] if answers is not None and len(answers) else None
    number = normalize_number(first) if first is not None else None
    if number is None:
        return f"answer {first!r} is not a number"
    if qtype not in TOOL_HOPS:
        return None
    if not isinstance(expression, str) or not expression.strip():
        return "no expression"
    try:
        value = normalize_number(_evaluate(expression))
    except Exception as exc:  # noqa: BLE001 - any evaluation failure is the finding
        return f"expression {expression!r} does not evaluate: {type(exc).__name__}: {exc}"
    if value != number:
        return f"expression {expression!r} = {value}, answer {number}"
    n_ids = 0 if supporting_ids is None else len(supporting_ids)
    if hops != TOOL_HOPS[qtype] or n_ids != TOOL_HOPS[qtype]:
        return f"{qtype} needs hops = supporting ids = {TOOL_HOPS[qtype]} (got hops {hops}, {n_ids} ids)"
    return None


def build_question_frame(
    ds: Dataset,
    corpus_ids: set[str],
    leak_allowed_types: list[str],
    tool_checks: bool = False,
    bounds: ValidateConfig | None = None,
) -> pd.DataFrame:
    """All splits concatenated, plus the derived columns the GX checks assert on.

    Derived columns: ``file_split`` (the file the row came from), ``n_answers``, ``blank_question``
    / ``blank_answer`` (the blank text, see :func:`_blank_question` / :func:`_blank_answer`, or
    None), ``missing_supporting_ids`` (comma-joined ids absent from the corpus, or None),
    ``answer_in_question`` (the leaked answer, None when none leaks or the type is allowed;
    :func:`apply_leak_tolerance` turns it into the checked ``leaked_answer``),
    ``id_in_splits`` / ``question_in_splits`` (the splits sharing the id / normalized question
    text when more than one, else None), ``uncopyable_answer`` (:func:`uncopyable_words` of a
    dev/test/ood question of a source in ``bounds.copy_sources``, else None), the content bounds
    of ``bounds`` (``validate``'s params, defaults when None): ``conflicting_answers``,
    ``hops_support_problem``, ``control_chars``, ``long_question``, ``long_answer``, ``unsafe_id``,
    ``special_tokens``, ``not_nfc``, ``nfc_duplicate`` (the functions above); with ``tool_checks`` also
    ``tool_question_problem``
    (:func:`tool_question_problem`) and ``unknown_type`` (a type outside
    :data:`KNOWN_TOOL_TASK_TYPES`, else None). The list and optional columns are dropped from the
    returned frame:
    GX fingerprints a batch with ``pd.util.hash_pandas_object`` and falls back to pickling the
    frame for unhashable cells such as lists, which would make ``gx_result.json`` unstable.
    """
    q = _all_splits(ds, tool_checks)
    q["hops"] = pd.to_numeric(q["hops"], errors="coerce").astype("Int64")
    q["n_answers"] = [len(a) if a is not None else 0 for a in q["answers"]]
    q["blank_question"] = pd.Series([_blank_question(t) for t in q["question"]], index=q.index, dtype=object)
    q["blank_answer"] = pd.Series([_blank_answer(a) for a in q["answers"]], index=q.index, dtype=object)
    q["missing_supporting_ids"] = [
        (",".join(sorted({str(s) for s in ids if s not in corpus_ids})) or None) if ids is not None else None
        for ids in q["supporting_ids"]
    ]
    allowed = set(leak_allowed_types)
    q["answer_in_question"] = pd.Series(
        [None if t in allowed else leaked_answer(qt, a) for qt, a, t in zip(q["question"], q["answers"], q["type"])],
        index=q.index,
        dtype=object,
    )
    q["id_in_splits"] = _splits_sharing(q, q["id"])
    norm_q = q["question"].map(lambda s: (normalize_text(s) or None) if isinstance(s, str) else None)
    q["question_in_splits"] = _splits_sharing(q, norm_q)
    bounds = bounds or ValidateConfig()
    known = train_words(ds) if bounds.copy_sources else set()
    q["uncopyable_answer"] = pd.Series(
        [
            uncopyable_words(a, known) if sp != "train" and src in bounds.copy_sources else None
            for a, sp, src in zip(q["answers"], q["file_split"], q["source"])
        ],
        index=q.index,
        dtype=object,
    )
    _add_bound_columns(q, bounds)
    if not tool_checks:
        return q.drop(columns=["answers", "supporting_ids"])
    _add_tool_columns(q)
    return q.drop(columns=["answers", "supporting_ids", *(f.name for f in OPTIONAL_QUESTION_FIELDS)])


def _all_splits(ds: Dataset, tool_checks: bool) -> pd.DataFrame:
    """Every split's questions in one frame (in :data:`SPLITS` order), ``file_split`` = the file's split;
    the optional (tool) fields only with ``tool_checks``."""
    parts = []
    for split in SPLITS:
        columns = [*QUESTION_FIELDS, *(f.name for f in OPTIONAL_QUESTION_FIELDS if tool_checks)]
        part = pd.DataFrame(ds.split(split)).reindex(columns=columns)
        part["file_split"] = split
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _add_tool_columns(q: pd.DataFrame) -> None:
    """``tool_question_problem`` (:func:`tool_question_problem`) and ``unknown_type`` (a type outside
    :data:`KNOWN_TOOL_TASK_TYPES`, else None)."""
    q["tool_question_problem"] = pd.Series(
        [
            tool_question_problem(t, None if pd.isna(h) else int(h), ids, a, e if isinstance(e, str) else None)
            for t, h, ids, a, e in zip(q["type"], q["hops"], q["supporting_ids"], q["answers"], q["expression"])
        ],
        index=q.index,
        dtype=object,
    )
    q["unknown_type"] = pd.Series(
        [None if t in KNOWN_TOOL_TASK_TYPES else str(t) for t in q["type"]], index=q.index, dtype=object
    )


def _add_bound_columns(q: pd.DataFrame, v: ValidateConfig) -> None:
    """The derived columns of the content-bound checks (:func:`build_question_frame`)."""

    def column(values: Any) -> pd.Series:
        return pd.Series(list(values), index=q.index, dtype=object)

    tokens = list(v.special_tokens)
    q["conflicting_answers"] = _conflicting_answers(q)
    q["hops_support_problem"] = column(hops_support_problem(h, ids) for h, ids in zip(q["hops"], q["supporting_ids"]))
    q["control_chars"] = column(control_chars(t, a) for t, a in zip(q["question"], q["answers"]))
    q["not_nfc"] = column(
        not_nfc(
            [
                ("id", i),
                ("question", t),
                *((f"answer {k + 1}", x) for k, x in enumerate(a or [])),
                ("type", ty),
                ("source", src),
                *(("supporting id", x) for x in (ids or [])),
            ]
        )
        for i, t, a, ty, src, ids in zip(
            q["id"], q["question"], q["answers"], q["type"], q["source"], q["supporting_ids"]
        )
    )
    q["nfc_duplicate"] = column(
        first_of(
            nfc_twins(list(q["id"]), list(q["id"]), "the id"),
            nfc_twins(list(q["question"]), list(q["id"]), "the question text"),
        )
    )
    q["long_question"] = column(too_long(t, v.max_question_chars, "a question") for t in q["question"])
    q["long_answer"] = column(too_long(a, v.max_answer_chars, "an answer") for a in q["answers"])
    q["unsafe_id"] = column(unsafe_id(i, v.max_id_chars) for i in q["id"])
    q["special_tokens"] = column(
        special_tokens_in([t, *(a if a is not None else [])], tokens) for t, a in zip(q["question"], q["answers"])
    )


def apply_leak_tolerance(q: pd.DataFrame, max_share: float, n_ids: int) -> dict[str, Any]:
    """Per source: how many questions leak an answer (``answer_in_question``), their share and
    the first ``n_ids`` leaking ids (sorted); sets ``q["leaked_answer"]`` (the column that
    ``questions.no_answer_leak`` asserts to be null) to the leaks of the sources whose share
    exceeds ``max_share`` (None elsewhere). Returns the report stored in ``summary.json``."""
    source = q["source"].astype(object).where(q["source"].notna(), "<null source>")
    leaks = q["answer_in_question"].notna()
    sources: dict[str, Any] = {}
    for name in sorted({str(s) for s in source}):
        rows = source == name
        ids = sorted(str(i) for i in q.loc[rows & leaks, "id"])
        share = len(ids) / int(rows.sum())
        sources[name] = {
            "questions": int(rows.sum()),
            "leaking": len(ids),
            "share": share,
            "within_tolerance": share <= max_share,
            "ids": ids[:n_ids],
        }
    over = [n for n, r in sources.items() if not r["within_tolerance"]]
    q["leaked_answer"] = q["answer_in_question"].where(source.isin(over), None)
    return {"max_share": max_share, "sources": sources}


def build_corpus_frame(ds: Dataset, bounds: ValidateConfig | None = None) -> pd.DataFrame:
    """The corpus as a frame with the schema's columns (missing ones all-null, so checks fail),
    plus the derived ``unsafe_id``, ``special_tokens`` (title or text), ``control_chars``
    (:func:`passage_control_chars`), ``html_reference`` (:func:`html_reference` of the title), ``not_nfc`` (:func:`not_nfc` of id, title, text) and
    ``nfc_duplicate`` (:func:`nfc_twins` of the ids and of the (title, text) pairs) columns."""
    v = bounds or ValidateConfig()
    c = pd.DataFrame(ds.corpus).reindex(columns=list(CORPUS_SCHEMA.names))
    c["unsafe_id"] = pd.Series([unsafe_id(i, v.max_id_chars) for i in c["id"]], index=c.index, dtype=object)
    c["special_tokens"] = pd.Series(
        [special_tokens_in([t, x], list(v.special_tokens)) for t, x in zip(c["title"], c["text"])],
        index=c.index,
        dtype=object,
    )
    c["control_chars"] = pd.Series(
        [passage_control_chars(t, x) for t, x in zip(c["title"], c["text"])], index=c.index, dtype=object
    )
    c["html_reference"] = pd.Series([html_reference(t) for t in c["title"]], index=c.index, dtype=object)
    c["not_nfc"] = pd.Series(
        [not_nfc([("id", i), ("title", t), ("text", x)]) for i, t, x in zip(c["id"], c["title"], c["text"])],
        index=c.index,
        dtype=object,
    )
    ids = list(c["id"])
    c["nfc_duplicate"] = pd.Series(
        first_of(nfc_twins(ids, ids, "the id"), nfc_twins(list(zip(c["title"], c["text"])), ids, "the title and text")),
        index=c.index,
        dtype=object,
    )
    return c


# ------------------------------------------------------------------------------------ checks
def _file_check(name: str, description: str, column: str, fix: str = _FIX_FILES) -> Check:
    return Check(f"files.{name}", "files", "ExpectColumnValuesToBeNull", {"column": column}, description, fix)


def _question_check(name: str, expectation: str, description: str, fix: str = _FIX_DATA, **kwargs: Any) -> Check:
    return Check(f"questions.{name}", "questions", expectation, kwargs, description, fix)


def _corpus_check(name: str, expectation: str, description: str, **kwargs: Any) -> Check:
    return Check(f"corpus.{name}", "corpus", expectation, kwargs, description, _FIX_DATA)


def build_checks(cfg: Config) -> list[Check]:
    """The expectation list for the configured hop range, splits and leak policy (order = report
    order): the files, the questions, the tool questions (when tools are on), the content bounds,
    the corpus."""
    q, c = _question_check, _corpus_check
    return [
        *_file_checks(cfg),
        *_question_checks(cfg),
        *(tool_checks(q) if tool_checks_on(cfg) else []),
        *bound_checks(cfg, q, c),
        *_corpus_checks(),
    ]


def _file_checks(cfg: Config) -> list[Check]:
    """Each processed file exists, reads, has the schema; each required split holds a question."""
    v, f = cfg.validate_, _file_check
    return [
        f("present", "every processed file exists (value = the missing path)", "missing_file"),
        f("readable", "every processed file is a readable parquet file (value = the reader's error)", "read_error"),
        f("schema", "every processed file has the schema's columns and types (value = the problems)", "schema_error"),
        f(
            "split_not_empty",
            f"each split in {list(v.required_splits)} (validate.required_splits) holds a question",
            "empty_split",
            _FIX_SPLIT,
        ),
    ]


def _question_checks(cfg: Config) -> list[Check]:
    """The questions' fields, then their splits and answers."""
    return [*_question_field_checks(cfg), *_question_split_checks(cfg)]


def _question_field_checks(cfg: Config) -> list[Check]:
    """Every question has a unique id, a text, answers that normalize to something, hops in range,
    a type and a source."""
    hop_min, hop_max = cfg.data.hops.min, cfg.data.hops.max
    q = _question_check
    return [
        q("not_empty", "ExpectTableRowCountToBeBetween", "the dataset has at least one question", min_value=1),
        q("id_not_null", "ExpectColumnValuesToNotBeNull", "every question has an id", column="id"),
        q("id_unique", "ExpectColumnValuesToBeUnique", "question ids are unique over all splits", column="id"),
        q("question_not_null", "ExpectColumnValuesToNotBeNull", "every question has a text", column="question"),
        q(
            "question_not_blank",
            "ExpectColumnValuesToBeNull",
            "question texts are not blank once whitespace and invisible (Cf) characters are removed (value = the text)",
            column="blank_question",
        ),
        q(
            "answers_not_empty",
            "ExpectColumnValuesToBeBetween",
            "every question has at least one answer",
            column="n_answers",
            min_value=1,
        ),
        q(
            "answers_not_blank",
            "ExpectColumnValuesToBeNull",
            "no answer normalizes to nothing under the reward's normalize_answer (value = the answer)",
            column="blank_answer",
        ),
        q("hops_not_null", "ExpectColumnValuesToNotBeNull", "every question has a hop count", column="hops"),
        q(
            "hops_in_range",
            "ExpectColumnValuesToBeBetween",
            f"hops within data.hops [{hop_min}, {hop_max}]",
            _FIX_HOPS,
            column="hops",
            min_value=hop_min,
            max_value=hop_max,
        ),
        q("type_not_null", "ExpectColumnValuesToNotBeNull", "every question has a type", column="type"),
        q("source_not_null", "ExpectColumnValuesToNotBeNull", "every question has a source", column="source"),
    ]


def _question_split_checks(cfg: Config) -> list[Check]:
    """Splits known, matching the file and disjoint; supporting ids in the corpus; the answers' leak
    and copy policies."""
    v, q = cfg.validate_, _question_check
    allowed = sorted(v.leak_allowed_types)
    return [
        q(
            "split_known",
            "ExpectColumnValuesToBeInSet",
            f"split is one of {list(SPLITS)}",
            column="split",
            value_set=list(SPLITS),
        ),
        q(
            "split_matches_file",
            "ExpectColumnPairValuesToBeEqual",
            "the split column equals the file's split",
            column_A="split",
            column_B="file_split",
        ),
        q(
            "supporting_ids_in_corpus",
            "ExpectColumnValuesToBeNull",
            "every supporting id exists in the corpus (value = the missing ids)",
            _FIX_CORPUS,
            column="missing_supporting_ids",
        ),
        q(
            "splits_disjoint_ids",
            "ExpectColumnValuesToBeNull",
            "no id appears in two splits (value = the splits sharing it)",
            column="id_in_splits",
        ),
        q(
            "splits_disjoint_questions",
            "ExpectColumnValuesToBeNull",
            "no question text appears in two splits (value = the splits sharing it)",
            column="question_in_splits",
        ),
        q(
            "no_answer_leak",
            "ExpectColumnValuesToBeNull",
            f"the gold answer (the first) appears verbatim in its question (types {allowed} exempt) for at most "
            f"{v.max_leak_share:.2%} of each source's questions (value = the leaked answer)",
            _FIX_LEAK,
            column="leaked_answer",
        ),
        q(
            "answers_copyable",
            "ExpectColumnValuesToBeNull",
            f"every dev/test/ood answer of sources {list(v.copy_sources)} (validate.copy_sources) is made of words the "
            "train split's texts hold, so it can be copied (value = the words no train text holds)",
            _FIX_COPY,
            column="uncopyable_answer",
        ),
    ]


def _corpus_checks() -> list[Check]:
    """The corpus: non-empty, unique ids, a title and a non-blank text per passage."""
    c = _corpus_check
    return [
        c("not_empty", "ExpectTableRowCountToBeBetween", "the corpus has at least one passage", min_value=1),
        c("id_not_null", "ExpectColumnValuesToNotBeNull", "every passage has an id", column="id"),
        c("id_unique", "ExpectColumnValuesToBeUnique", "passage ids are unique", column="id"),
        c("title_not_null", "ExpectColumnValuesToNotBeNull", "every passage has a title", column="title"),
        c(
            "text_not_blank",
            "ExpectColumnValuesToMatchRegex",
            "passage texts are not blank",
            column="text",
            regex=_NOT_BLANK,
        ),
        c("text_not_null", "ExpectColumnValuesToNotBeNull", "every passage has a text", column="text"),
    ]


def bound_checks(cfg: Config, q, c) -> list[Check]:
    """The content-bound checks (issue 26; ``q``/``c`` = the check makers of :func:`build_checks`):
    the questions', the passages', then Unicode's."""
    v = cfg.validate_
    tokens = f"{list(v.special_tokens)} or any <|name|> form (validate.special_tokens)"
    return [*_question_bounds(v, q, tokens), *_corpus_bounds(v, c, tokens), *unicode_checks(q, c)]


def _question_bounds(v: ValidateConfig, q, tokens: str) -> list[Check]:
    """Consistent answers, hops matching the supporting ids, no control characters, bounded lengths,
    plain ids, no special-token strings."""
    null = "ExpectColumnValuesToBeNull"
    return [
        q(
            "answers_consistent",
            null,
            "the same question text in one split has the same answers (value = the differing answer sets)",
            column="conflicting_answers",
        ),
        q(
            "hops_match_supporting_ids",
            null,
            "supporting ids are distinct and as many as hops, or none (gold "
            "passages not in the corpus) (value = the mismatch)",
            _FIX_HOPS,
            column="hops_support_problem",
        ),
        q(
            "no_control_chars",
            null,
            "questions and answers hold no control characters besides tab and newline (value = the first)",
            column="control_chars",
        ),
        q(
            "question_length",
            null,
            f"questions are at most {v.max_question_chars} characters (validate.max_question_chars)",
            column="long_question",
        ),
        q(
            "answer_length",
            null,
            f"answers are at most {v.max_answer_chars} characters (validate.max_answer_chars)",
            column="long_answer",
        ),
        q(
            "id_plain",
            null,
            f"question ids are plain names of at most {v.max_id_chars} characters: no '/', '\\', "
            "'..', leading '.', whitespace or control characters (validate.max_id_chars)",
            column="unsafe_id",
        ),
        q(
            "no_special_tokens",
            null,
            f"no question or answer holds a special-token string: {tokens} (value = the tokens)",
            column="special_tokens",
        ),
    ]


def _corpus_bounds(v: ValidateConfig, c, tokens: str) -> list[Check]:
    """Passage titles not blank, plain ids, no special-token strings."""
    null = "ExpectColumnValuesToBeNull"
    return [
        c(
            "title_not_blank",
            "ExpectColumnValuesToMatchRegex",
            "passage titles are not blank",
            column="title",
            regex=_NOT_BLANK,
        ),
        c(
            "id_plain",
            null,
            f"passage ids are plain names of at most {v.max_id_chars} characters (as question ids)",
            column="unsafe_id",
        ),
        c(
            "no_special_tokens",
            null,
            f"no passage title or text holds a special-token string: {tokens} (value = the tokens)",
            column="special_tokens",
        ),
    ]


def unicode_checks(q, c) -> list[Check]:
    """Control characters in passages and Unicode normalization (issue 31; ``q``/``c`` as in :func:`bound_checks`)."""
    null = "ExpectColumnValuesToBeNull"
    return [
        c(
            "no_control_chars",
            null,
            "passage titles and texts hold no control characters besides tab and newline (value = the first)",
            column="control_chars",
        ),
        c(
            "title_unescaped",
            null,
            "passage titles hold no HTML character reference such as &amp; (value = the "
            "first): decode them at load, as the HotpotQA loader does (realformat.unescape_entities)",
            column="html_reference",
        ),
        q(
            "text_nfc",
            null,
            "ids, questions, answers, types, sources and supporting ids are in Unicode NFC (value = "
            "the first field that is not)",
            column="not_nfc",
        ),
        q(
            "nfc_distinct",
            null,
            "no two questions have ids or question texts that differ only in Unicode "
            "normalization (value = the other question)",
            column="nfc_duplicate",
        ),
        c(
            "text_nfc",
            null,
            "passage ids, titles and texts are in Unicode NFC (value = the first field that is not)",
            column="not_nfc",
        ),
        c(
            "nfc_distinct",
            null,
            "no two passages have ids, or titles and texts, that differ only in Unicode "
            "normalization (value = the other passage)",
            column="nfc_duplicate",
        ),
    ]


def tool_checks(q) -> list[Check]:
    """The calculator-question checks (``q`` = the question-check maker of :func:`build_checks`)."""
    return [
        q(
            "tool_questions_consistent",
            "ExpectColumnValuesToBeNull",
            f"calculator questions ({', '.join(NUMERIC_TYPES)}) have a numeric answer; the synthetic ones an expression "
            "of that value and their hop count (value = the problem)",
            column="tool_question_problem",
        ),
        q(
            "type_known",
            "ExpectColumnValuesToBeNull",
            f"every type is one of {list(KNOWN_TOOL_TASK_TYPES)} (value = the unknown type)",
            column="unknown_type",
        ),
    ]


# ----------------------------------------------------------------------------------- running
@dataclass
class ValidationReport:
    """Everything one validation produced: per-check results, the summary and the GX JSON."""

    results: list[CheckResult]
    summary: dict[str, Any]
    gx_result: dict[str, Any]

    @property
    def success(self) -> bool:
        """True when every expectation passed (and none was skipped)."""
        return bool(self.summary["success"])

    @property
    def failed(self) -> list[CheckResult]:
        """The results of the expectations that failed, in report order."""
        return [r for r in self.results if not r.success]


def records_report(ds: Dataset | None, prepared: dict[str, Any] | None) -> dict[str, Any]:
    """The ``records`` block of ``summary.json`` (real data only): per question ``source``, how many
    questions have no gold passage in the corpus (:func:`~agentr1.data.schema.gold_unknown`:
    kept, scored on the answer, not in recall), and ``prepared``: the records report of
    ``manifest.json`` (per configured source: questions kept, records skipped per reason, passages
    already in the corpus; None when the manifest has none)."""
    counts: dict[str, dict[str, int]] = {}
    for split in SPLITS if ds is not None else ():
        for q in ds.split(split):
            c = counts.setdefault(str(q.get("source")), {"questions": 0, "without_gold": 0})
            c["questions"] += 1
            c["without_gold"] += int(gold_unknown(q))
    return {"without_gold": dict(sorted(counts.items())) if ds is not None else None, "prepared": prepared}


def manifest_records(processed_dir: str | Path) -> dict[str, Any] | None:
    """The ``records`` report of ``processed_dir/manifest.json``, or None (no manifest, none in it,
    or an unreadable one: the parquet files are what is validated)."""
    path = Path(processed_dir) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        records = json.loads(path.read_text()).get("records")
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("validate: no records report from %s (%s)", Path(processed_dir) / MANIFEST_FILE, exc)
        return None
    return records if isinstance(records, dict) else None


def _validate(
    files: pd.DataFrame, ds: Dataset | None, cfg: Config, prepared: dict[str, Any] | None = None
) -> ValidationReport:
    """Run the file checks, and the content checks when ``ds`` is not None (the files are intact);
    with real data the summary gets :func:`records_report` (``prepared``: the manifest's)."""
    v: ValidateConfig = cfg.validate_
    frames: dict[str, pd.DataFrame] = {"files": files}
    leaks: dict[str, Any] | None = None
    copyable: dict[str, Any] | None = None
    if ds is not None:
        corpus = build_corpus_frame(ds, v)
        questions = build_question_frame(
            ds, {i for i in corpus["id"] if isinstance(i, str)}, v.leak_allowed_types, tool_checks_on(cfg), v
        )
        leaks = apply_leak_tolerance(questions, v.max_leak_share, v.max_examples)
        copyable = copy_cap(questions, v.max_examples) if v.copy_sources else None
        frames.update(questions=questions, corpus=corpus)
    checks = build_checks(cfg)
    skipped = [c.name for c in checks if c.table not in frames]
    results, gx_json = run_checks(frames, [c for c in checks if c.table in frames], v.max_examples)
    split_rows = {  # rows read per file (0 for a missing or unreadable one)
        name.removesuffix(".parquet"): int(n) if pd.notna(n) else 0 for name, n in zip(files["id"], files["rows"])
    }
    summary: dict[str, Any] = {
        "success": all(r.success for r in results) and not skipped,
        "expectations": {
            r.check.name: {
                "column": r.check.column,
                "expectation": r.gx_type,
                "success": r.success,
                "unexpected_count": r.unexpected_count,
            }
            for r in results
        },
        "n_expectations": len(results),
        "n_failed": sum(not r.success for r in results),
        "skipped": skipped,
        "leaks": leaks,
        "copy_cap": copyable,
        "rows": {
            "corpus": split_rows.pop(CORPUS_FILE.removesuffix(".parquet")),
            "questions": sum(split_rows.values()),
            **split_rows,
        },
    }
    if cfg.data.source == "real":  # the synthetic world skips nothing: its summary keeps its bytes
        summary["records"] = records_report(ds, prepared)
    return ValidationReport(results=results, summary=summary, gx_result=gx_json)


def validate_dataset(ds: Dataset, cfg: Config) -> ValidationReport:
    """Run every check of :func:`build_checks` on an in-memory dataset (writes nothing)."""
    return _validate(files_frame_for(ds, cfg.validate_.required_splits), ds, cfg)


def validate_processed(processed_dir: str | Path, cfg: Config) -> ValidationReport:
    """Read ``processed_dir`` with :func:`read_processed` and validate it (writes nothing)."""
    files, ds = read_processed(processed_dir, cfg.validate_.required_splits)
    return _validate(files, ds, cfg, manifest_records(processed_dir) if cfg.data.source == "real" else None)


def _short(value: Any, limit: int = 100) -> str:
    """repr() of an offending value, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _leak_lines(leaks: dict[str, Any]) -> list[str]:
    """One line per source above ``validate.max_leak_share``: count, share and the first ids."""
    lines = []
    for name, r in leaks["sources"].items():
        if r["within_tolerance"]:
            continue
        more = f" (+{r['leaking'] - len(r['ids'])} more)" if r["leaking"] > len(r["ids"]) else ""
        lines.append(
            f"      source {name!r}: {r['leaking']} of {r['questions']} questions ({r['share']:.2%}) leak an answer, "
            f"above validate.max_leak_share {leaks['max_share']:.2%}; ids: {', '.join(r['ids'])}{more}"
        )
    return lines


def failure_message(report: ValidationReport, report_dir: Path) -> str:
    """The StageError text: each failed expectation (name, column, unexpected count), examples and the fix."""
    failed = report.failed
    lines = [
        f"dataset validation failed: {len(failed)} of {len(report.results)} expectations "
        f"(details: {report_dir / SUMMARY_FILE}, {report_dir / GX_RESULT_FILE})"
    ]
    for r in failed:
        status = "failed" if r.unexpected_count is None else f"{r.unexpected_count} unexpected"
        col = f" column {r.check.column!r}" if r.check.column else ""
        lines.append(f"  - {r.check.name} [{r.gx_type}{col}]: {status} — {r.check.description}")
        if r.error:
            lines.append(f"      error: {r.error}")
        for ex in r.examples:
            rid = f"id={ex['id']!r} " if "id" in ex else "observed "
            lines.append(f"      {rid}value={_short(ex['value'])}")
        if r.check.name == "questions.no_answer_leak" and report.summary.get("leaks"):
            lines.extend(_leak_lines(report.summary["leaks"]))
        if r.check.fix:
            lines.append(f"      fix: {r.check.fix}")
    if report.summary.get("skipped"):
        lines.append(f"  ({len(report.summary['skipped'])} content checks not run until the files pass)")
    lines.append("Then rerun `agentr1 validate`.")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ marker
def _processed_files(processed_dir: Path) -> list[Path]:
    """The parquet files :func:`read_processed` reads that exist, in a fixed order."""
    return [processed_dir / n for n, _, _ in expected_files() if (processed_dir / n).exists()]


def processed_fingerprint(processed_dir: str | Path) -> dict[str, Any]:
    """sha256 of each processed parquet file and of them all (names + contents)."""
    processed_dir = Path(processed_dir)
    files: dict[str, str] = {}
    total = hashlib.sha256()
    for path in _processed_files(processed_dir):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files[path.name] = digest
        total.update(f"{path.name}\0{digest}\n".encode())
    return {"files": files, "sha256": total.hexdigest()}


def params_hash(cfg: Config) -> str:
    """Hash of the params the verdict depends on (hop range, leak policy, required splits, split names).

    ``max_leak_share``, ``required_splits`` and the content bounds (``max_question_chars``,
    ``max_answer_chars``, ``max_id_chars``, ``special_tokens``) came later: they enter the hash only when set away
    from their defaults, so a default configuration keeps the marker bytes it had before (DVC then
    does not rerun every stage downstream of ``passed.json``).
    """
    v, defaults = cfg.validate_, ValidateConfig()
    relevant: dict[str, Any] = {
        "hops": [cfg.data.hops.min, cfg.data.hops.max],
        "leak_allowed_types": sorted(v.leak_allowed_types),
        "splits": list(SPLITS),
    }
    if v.max_leak_share != defaults.max_leak_share:
        relevant["max_leak_share"] = v.max_leak_share
    if sorted(v.required_splits) != sorted(defaults.required_splits):
        relevant["required_splits"] = sorted(v.required_splits)
    for key in ("max_question_chars", "max_answer_chars", "max_id_chars", "special_tokens"):  # issue 26's bounds
        if getattr(v, key) != getattr(defaults, key):
            relevant[key] = getattr(v, key)
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def require_validated(cfg: Config) -> None:
    """Raise :class:`StageError` unless the processed data passed ``agentr1 validate`` as it is now.

    Later stages (index, sft, train) call this before doing any work.
    """
    processed = Path(cfg.data.processed_dir)
    marker = Path(cfg.validate_.report_dir) / MARKER_FILE
    if not marker.exists():
        raise StageError(
            f"the dataset in {processed} has not passed validation (no {marker}): "
            "run `agentr1 validate` (or `dvc repro validate`) first"
        )
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StageError(f"unreadable validation marker {marker} ({exc}): run `agentr1 validate` again") from None
    current = processed_fingerprint(processed)
    if not current["files"]:
        raise StageError(f"no processed dataset in {processed}: run `agentr1 prepare`, then `agentr1 validate`")
    if recorded.get("data_sha256") != current["sha256"]:
        changed = sorted(
            set(current["files"]) ^ set(recorded.get("files", {}))
            | {n for n, h in current["files"].items() if recorded.get("files", {}).get(n) not in (None, h)}
        )
        raise StageError(
            f"the dataset in {processed} changed since it was validated (changed: {', '.join(changed) or '?'}): "
            "run `agentr1 validate` again"
        )
    if recorded.get("params_sha256") != params_hash(cfg):
        raise StageError(
            "the dataset was validated under different data.hops / validate params (leak_allowed_types, "
            "max_leak_share, required_splits): run `agentr1 validate` again"
        )
