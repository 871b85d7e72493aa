"""Hostile real-data files (issue 31, items 14-16): encodings, lone surrogates, deep nesting,
Unicode normalization and control characters, at load and in the ``validate`` stage's checks.

Every bad input must end in a :class:`RealDataError` / :class:`StageError` naming the file (or the
configured source), the line or record and the field, with the fix; never a traceback-only
``UnicodeDecodeError``, ``UnicodeEncodeError`` or ``RecursionError``.
"""

from __future__ import annotations

import copy
import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from agentr1.config import RealConfig, RealSource, config_from_dict
from agentr1.data.multihop import load_file, load_sources, read_flashrag_corpus
from agentr1.data.prepare import build_dataset
from agentr1.data.realformat import REPEATED_ID, RealDataError
from agentr1.data.schema import Dataset, write_corpus
from agentr1.data.validation import validate_dataset
from agentr1.errors import StageError
from test_validation import clean_dataset, make_cfg

NFC_E = "\u00e9"  # é, precomposed
NFD_E = "e\u0301"  # e + combining acute accent: the same text in NFD


def hotpot(
    qid: str,
    *,
    title: str = "Zorbix Labs",
    sup_title: str | None = None,
    sentence: str = " It was founded by Ada Venn.",
    question: str = "Which city was the founder of Zorbix Labs born in?",
) -> dict[str, Any]:
    """An official-layout HotpotQA record with a supporting paragraph ``title`` (``sup_title`` as the
    supporting facts spell it) and an answer paragraph ``Ada Venn``."""
    return {
        "_id": qid,
        "question": question,
        "answer": "Quellport",
        "type": "bridge",
        "supporting_facts": [[sup_title or title, 0], ["Ada Venn", 1]],
        "context": [
            ["Ada Venn", ["Ada Venn is an engineer.", " She was born in Quellport."]],
            [title, [f"{title} is a company.", sentence]],
        ],
    }


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """JSON Lines with ``\\uXXXX`` escapes (as the datasets ship: ``json.dumps`` default)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def sources(*srcs: dict[str, Any]) -> RealConfig:
    return RealConfig(sources=[RealSource(**s) for s in srcs])


def gsm8k_row(question: str) -> dict[str, str]:
    return {"question": question, "answer": "She pays 3 + 2 = <<3+2=5>>5.\n#### 5"}


# ----------------------------------------------------------------------- item 14: bytes and structure
@pytest.mark.parametrize("layout", ["jsonl", "json"])
def test_invalid_utf8_names_the_source_file_line_and_fix(tmp_path, layout):
    good = json.dumps(hotpot("hp1"))
    bad = (
        json.dumps(hotpot("hp2", title="Caf\u00e9 Noir"), ensure_ascii=False)
        .encode("utf-8")
        .replace("\u00e9".encode("utf-8"), b"\xe9")
    )  # Latin-1 byte inside UTF-8 text
    body = good.encode() + b"\n" + bad + b"\n" if layout == "jsonl" else b"[\n" + good.encode() + b",\n" + bad + b"\n]"
    path = tmp_path / f"latin1.{layout}"
    path.write_bytes(body)
    with pytest.raises(RealDataError) as info:
        load_sources(sources({"dataset": "hotpotqa", "path": str(path)}), seed=0)
    msg = str(info.value)
    line = 2 if layout == "jsonl" else 3  # the array's "[" has a line of its own
    assert "data.real.sources[0].path" in msg and f"latin1.{layout}: line {line} is not valid UTF-8" in msg
    assert "byte 0xe9" in msg and "re-save the file as UTF-8" in msg


@pytest.mark.parametrize(
    ("codec", "named"),
    [
        ("utf-16", "UTF-16 (little-endian byte-order mark"),
        ("utf-16-le", "UTF-16LE without a byte-order mark"),
        ("utf-16-be", "UTF-16BE without a byte-order mark"),
        ("utf-32", "UTF-32 (little-endian byte-order mark"),
    ],
)
def test_utf16_and_utf32_files_are_refused_with_the_fix(tmp_path, codec, named):
    path = tmp_path / "wide.jsonl"
    path.write_bytes(json.dumps(gsm8k_row("How many?")).encode(codec) + "\n".encode(codec))
    with pytest.raises(RealDataError) as info:
        load_file("gsm8k", path)
    msg = str(info.value)
    assert str(path) in msg and named in msg and "JSON files must be UTF-8" in msg and "iconv" in msg


def test_lone_surrogate_is_refused_at_load_with_record_and_field(tmp_path):
    """json.loads accepts an escaped lone surrogate; the parquet write used to fail on it with a
    bare UnicodeEncodeError after the whole load. Now the load names the record and the field."""
    path = jsonl(tmp_path / "dev.jsonl", [hotpot("hp1"), hotpot("hp2", sentence=" Founded by \ud800 Venn.")])
    assert "\\ud800" in path.read_text()  # escaped in the file, as a hostile file would carry it
    cfg = config_from_dict(
        {"data": {"source": "real", "real": {"sources": [{"dataset": "hotpotqa", "path": str(path)}]}}}
    )
    with pytest.raises(StageError) as info:
        build_dataset(cfg)
    msg = str(info.value)
    assert "data.real.sources[0].path" in msg and "dev.jsonl line 2" in msg
    assert "field 'context[1][1][1]' holds a lone surrogate U+D800" in msg and "source file" in msg


def test_lone_surrogate_inside_a_json_encoded_column_is_refused(tmp_path):
    rec = hotpot("hp1")
    rec["context"] = json.dumps(
        {
            "title": ["Ada Venn", "Zorbix Labs"],
            "sentences": [
                ["Ada Venn is an engineer.", " She was born in Quellport."],
                ["Zorbix Labs is a company.", " Odd \udfff byte."],
            ],
        }
    )
    path = jsonl(tmp_path / "hf.jsonl", [rec])
    with pytest.raises(
        RealDataError,
        match=r"hf\.jsonl line 1 \(id 'hp1'\): field 'context.sentences\[1\]\[1\]' "
        r"holds a lone surrogate U\+DFFF",
    ):
        load_file("hotpotqa", path)


def test_schema_write_names_the_row_of_a_lone_surrogate(tmp_path):
    """A plug-in loader that bypasses the readers still gets a located StageError at the write."""
    with pytest.raises(StageError, match=r"corpus\.parquet: row 1 \(id 'p2'\) field 'text' holds a lone surrogate"):
        write_corpus(
            [{"id": "p1", "title": "A", "text": "ok"}, {"id": "p2", "title": "B", "text": "x\ud800"}],
            tmp_path / "corpus.parquet",
        )


def test_deeply_nested_json_is_refused_without_recursion_error(tmp_path):
    deep_array = tmp_path / "deep.json"
    deep_array.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RealDataError, match=r"deep\.json: the file is nested too deeply for the JSON parser"):
        load_file("2wiki", deep_array)
    deep_line = tmp_path / "deep.jsonl"
    deep_line.write_text(
        json.dumps(hotpot("hp1")) + "\n" + '{"_id": "x", "context": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    )
    with pytest.raises(RealDataError, match=r"deep\.jsonl: line 2 is nested too deeply"):
        load_file("hotpotqa", deep_line)
    # deep enough to be absurd, shallow enough for the parser: the record walk refuses it by name
    rec = hotpot("hp1")
    rec["extra"] = json.loads("[" * 500 + "]" * 500)
    with pytest.raises(RealDataError, match=r"mid\.jsonl line 1: field 'extra(\[0\])+' is nested more than 64 levels"):
        load_file("hotpotqa", jsonl(tmp_path / "mid.jsonl", [rec]))


# -------------------------------------------------------------------- item 15: Unicode normalization
def test_nfd_supporting_title_matches_its_nfc_context_paragraph(tmp_path):
    """Used to drop the question silently ('supporting passage not in context')."""
    rec = hotpot("hp1", title=f"Caf{NFC_E} Labs", sup_title=f"Caf{NFD_E} Labs")
    loaded = load_file("hotpotqa", jsonl(tmp_path / "dev.jsonl", [rec]))
    assert [q["id"] for q in loaded.questions] == ["hotpotqa:hp1"] and not loaded.skipped
    titles = {p["id"]: p["title"] for p in loaded.passages}
    assert [titles[s] for s in loaded.questions[0]["supporting_ids"]] == [f"Caf{NFC_E} Labs", "Ada Venn"]


def test_every_loaded_text_is_nfc_and_nfd_twins_are_one_passage(tmp_path):
    a = hotpot("hp1", title=f"Caf{NFC_E} Labs", question=f"Where was the founder of Caf{NFD_E} Labs born?")
    b = hotpot("hp2", title=f"Caf{NFD_E} Labs", sentence=" It was founded by Ada Venn.")
    loaded = load_file("hotpotqa", jsonl(tmp_path / "dev.jsonl", [a, b]))
    texts = [q["question"] for q in loaded.questions] + [p[k] for p in loaded.passages for k in ("title", "text")]
    assert all(unicodedata.is_normalized("NFC", t) for t in texts)
    assert len(loaded.passages) == 2  # Ada Venn + one Café Labs (its NFD twin has the same id)
    assert loaded.questions[0]["supporting_ids"] == loaded.questions[1]["supporting_ids"]


def test_gsm8k_questions_differing_only_in_normalization_are_one_question(tmp_path):
    path = jsonl(
        tmp_path / "train.jsonl",
        [
            gsm8k_row(f"Ren{NFC_E}e buys 3 pens, then 2. How many?"),
            gsm8k_row(f"Ren{NFD_E}e buys 3 pens, then 2. How many?"),
        ],
    )
    loaded = load_file("gsm8k", path)
    assert len(loaded.questions) == 1 and loaded.skipped == {"repeated question text": 1}


def test_ids_differing_only_in_normalization_collide(tmp_path):
    """One id after NFC: the same content is a counted copy (issue 48 item 11), other content an
    error naming both lines."""
    path = jsonl(tmp_path / "dev.jsonl", [hotpot(f"caf{NFC_E}"), hotpot(f"caf{NFD_E}")])
    loaded = load_file("hotpotqa", path)
    assert [q["id"] for q in loaded.questions] == [f"hotpotqa:caf{NFC_E}"] and loaded.skipped == {REPEATED_ID: 1}
    path = jsonl(tmp_path / "dev2.jsonl", [hotpot(f"caf{NFC_E}"), hotpot(f"caf{NFD_E}", question="Who founded it?")])
    with pytest.raises(
        RealDataError, match=rf"line 2 .*question id 'hotpotqa:caf{NFC_E}' repeats \S*dev2\.jsonl line 1"
    ):
        load_sources(sources({"dataset": "hotpotqa", "path": str(path)}), seed=0)


def test_flashrag_corpus_is_nfc(tmp_path):
    path = jsonl(tmp_path / "corpus.jsonl", [{"id": "1", "contents": f'"Caf{NFD_E}"\nA caf{NFD_E} in Orsk.'}])
    assert read_flashrag_corpus(path) == [{"id": "1", "title": f"Caf{NFC_E}", "text": f"A caf{NFC_E} in Orsk."}]


# ------------------------------------------------------------------------ item 16: control characters
@pytest.mark.parametrize(
    ("dataset", "mutate", "field"),
    [
        (
            "hotpotqa",
            lambda r: r["context"][1][1].__setitem__(1, " It was \x1b[31mfounded\x1b[0m."),
            r"field 'context\[1\] sentences' holds the control character U\+001B \(an ANSI escape",
        ),
        (
            "hotpotqa",
            lambda r: r["context"][1].__setitem__(0, "Zorbix\x07 Labs"),
            r"field 'context\[1\] title' holds "
            r"the control character U\+0007",
        ),
        (
            "hotpotqa",
            lambda r: r["supporting_facts"][0].__setitem__(0, "Zorbix Labs\x00"),
            r"field 'supporting_facts\[0\] title' holds the control character U\+0000",
        ),
        ("hotpotqa", lambda r: r.update(answer="Quell\x9bport"), r"field 'answer' holds the control character U\+009B"),
        (
            "musique",
            lambda r: r["paragraphs"][0].update(title="Quell\x1bport"),
            r"paragraphs\[0\]: field 'title' holds the control character U\+001B",
        ),
        (
            "flashrag",
            lambda r: r.update(golden_answers=["a", "b\x1b[2J"]),
            r"field 'golden_answers\[1\]' holds the control character U\+001B",
        ),
    ],
)
def test_control_characters_in_prompt_fields_are_refused_at_load(tmp_path, dataset, mutate, field):
    rec = {
        "hotpotqa": hotpot("hp1"),
        "musique": {
            "id": "2hop__1_2",
            "question": "Which river?",
            "answer": "Aru",
            "answerable": True,
            "paragraphs": [{"idx": 0, "title": "Quellport", "paragraph_text": "On the Aru river."}],
            "question_decomposition": [{"id": 1, "question": "q", "answer": "Aru", "paragraph_support_idx": 0}],
        },
        "flashrag": {"id": "q1", "question": "q?", "golden_answers": ["a"]},
    }[dataset]
    mutate(rec)
    with pytest.raises(RealDataError, match=field) as info:
        load_file(dataset, jsonl(tmp_path / "ctl.jsonl", [rec]))
    assert "ctl.jsonl line 1" in str(info.value) and "correct or drop the record" in str(info.value)


def test_control_characters_in_a_corpus_file_are_refused(tmp_path):
    path = jsonl(tmp_path / "corpus.jsonl", [{"id": "1", "contents": '"Orsk"\nOrsk \x1b]0;pwned\x07 is a city.'}])
    with pytest.raises(
        RealDataError,
        match=r"corpus\.jsonl line 1 \(id '1'\): field 'contents' holds the control "
        r"character U\+001B",
    ):
        read_flashrag_corpus(path)


def test_tab_and_newline_are_still_text(tmp_path):
    rec = hotpot("hp1", sentence=" It was\tfounded\nby Ada Venn.\r")
    loaded = load_file("hotpotqa", jsonl(tmp_path / "ok.jsonl", [rec]))
    assert len(loaded.questions) == 1


# --------------------------------------------------------------------- validation (items 15 and 16)
def _checks(report) -> dict[str, Any]:
    return {r.check.name: r for r in report.results}


def _bad(report, name: str) -> dict[str, Any]:
    result = _checks(report)[name]
    assert not result.success, name
    return {ex["id"]: ex["value"] for ex in result.examples}


def test_validation_passes_nfc_text_with_accents_tabs_and_newlines(tmp_path):
    ds = clean_dataset()
    ds.corpus[0]["text"] += f"\tIt has a caf{NFC_E}.\nThe end."
    report = validate_dataset(ds, make_cfg(tmp_path))
    assert report.success, [r.check.name for r in report.failed]
    for name in (
        "corpus.no_control_chars",
        "corpus.text_nfc",
        "corpus.nfc_distinct",
        "questions.text_nfc",
        "questions.nfc_distinct",
    ):
        assert _checks(report)[name].success


def test_validation_reports_control_characters_and_unnormalized_text_by_record(tmp_path):
    ds: Dataset = copy.deepcopy(clean_dataset())
    ds.corpus[2]["title"] = "Miro \x1b[31mTesk"  # p3: ANSI escape in a title
    ds.corpus[3]["text"] += " \x00"  # p4: NUL in a text
    ds.corpus[4]["title"] = f"Orsk Caf{NFD_E}"  # p5: NFD title
    ds.corpus.append(
        dict(ds.corpus[5], id="p6b", title=unicodedata.normalize("NFD", f"Tamiq R{NFC_E}l"), text=ds.corpus[5]["text"])
    )
    ds.corpus[5]["title"] = f"Tamiq R{NFC_E}l"  # p6 / p6b: twins under NFC
    ds.questions["dev"][0]["question"] = f"Which caf{NFD_E} is Velun Dor from?"  # d1: NFD question
    ds.questions["train"].append(
        dict(ds.questions["train"][0], id=f"t-{NFC_E}", question=f"Where was Alva Brenn born, caf{NFC_E}?")
    )
    ds.questions["train"].append(
        dict(ds.questions["train"][0], id=f"t-{NFD_E}", question=f"Where was Alva Brenn born, caf{NFD_E}?")
    )
    report = validate_dataset(ds, make_cfg(tmp_path))
    assert not report.success
    assert _bad(report, "corpus.no_control_chars") == {
        "p3": "title: U+001B at 5",
        "p4": f"text: U+0000 at {len(ds.corpus[3]['text']) - 1}",
    }
    not_nfc = _bad(report, "corpus.text_nfc")
    assert set(not_nfc) == {"p5", "p6b"}
    assert not_nfc["p5"] == "title: not NFC from character 8 (U+0065 U+0301; NFC U+00E9)"
    twins = _bad(report, "corpus.nfc_distinct")
    assert twins == {
        "p6": "the title and text equals that of 'p6b' under NFC",
        "p6b": "the title and text equals that of 'p6' under NFC",
    }
    assert _bad(report, "questions.text_nfc")["d1"].startswith("question: not NFC")
    q_twins = _bad(report, "questions.nfc_distinct")
    assert q_twins == {
        f"t-{NFC_E}": f"the id equals that of 't-{NFD_E}' under NFC",
        f"t-{NFD_E}": f"the id equals that of 't-{NFC_E}' under NFC",
    }  # both records named


def test_question_texts_differing_only_in_normalization_are_one_text_across_splits(tmp_path):
    ds = clean_dataset()
    ds.questions["train"][0]["question"] = f"Where was Alva Brenn born, caf{NFC_E}?"
    ds.questions["test"][0]["question"] = f"Where was Alva Brenn born, caf{NFD_E}?"
    report = validate_dataset(ds, make_cfg(tmp_path))
    assert _bad(report, "questions.splits_disjoint_questions") == {"t1": "test,train", "e1": "test,train"}
