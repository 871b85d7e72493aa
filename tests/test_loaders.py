"""Real-dataset loaders (agentr1.data.multihop): HotpotQA, 2Wiki, MuSiQue, FlashRAG -> unified schema.

Two kinds of tests: on the real-format samples in ../shared/fixtures (skipped where absent), and
on small files written here in the same formats, so the loaders stay covered without fixtures.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentr1.config import SPLITS, RealConfig, RealSource, SplitRatios
from agentr1.data.flashrag import export_flashrag, import_flashrag, parse_contents, read_flashrag_corpus
from agentr1.data.multihop import (
    Loaded,
    RealDataError,
    assign_splits,
    duplicate_reason,
    load_file,
    load_real,
    load_sources,
    read_records,
    split_counts,
)
from agentr1.data.realformat import REPEATED_ID, join_sentences, passage_id, unescape_entities
from agentr1.data.schema import NO_GOLD, QUESTION_FIELDS, Dataset, gold_unknown


# ---------------------------------------------------------------------------------- helpers
def titles_of(loaded: Loaded, q: dict[str, Any]) -> list[str]:
    """Titles of a question's supporting passages, in order (each id must resolve)."""
    by_id = {p["id"]: p for p in loaded.passages}
    return [by_id[pid]["title"] for pid in q["supporting_ids"]]


def by_id(loaded: Loaded) -> dict[str, dict[str, Any]]:
    return {q["id"]: q for q in loaded.questions}


def first_titles(facts: list[list[Any]]) -> list[str]:
    out: list[str] = []
    for title, _ in facts:
        if title not in out:
            out.append(title)
    return out


def write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]], final_newline: bool = True) -> Path:
    text = "\n".join(json.dumps(r) for r in rows)
    path.write_text(text + ("\n" if final_newline else ""))
    return path


def assert_schema(loaded: Loaded) -> None:
    """Every question has the unified fields and its supporting ids resolve to passages."""
    pids = {p["id"] for p in loaded.passages}
    assert len(pids) == len(loaded.passages)
    for q in loaded.questions:
        assert tuple(q) == QUESTION_FIELDS
        assert q["answers"] and all(a.strip() for a in q["answers"])
        assert set(q["supporting_ids"]) <= pids
        assert len(set(q["supporting_ids"])) == len(q["supporting_ids"])


# ---------------------------------------------------------------- small files, real layouts
HOTPOT_OFFICIAL = [
    {
        "_id": "hp1",
        "question": "Which city was the founder of Zorbix Labs born in?",
        "answer": "Quellport",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["Zorbix Labs", 0], ["Ada Venn", 1], ["Zorbix Labs", 1]],
        "context": [
            ["Ada Venn", ["Ada Venn is an engineer.", " She was born in Quellport."]],
            ["Zorbix Labs", ["Zorbix Labs is a company.", " It was founded by Ada Venn."]],
            ["Nimo Park", ["Nimo Park is a park."]],
        ],
    },
    {
        "_id": "hp2",
        "question": "Are Ada Venn and Bo Tarr both engineers?",
        "answer": "yes",
        "type": "comparison",
        "supporting_facts": [["Bo Tarr", 0], ["Ada Venn", 0]],
        "context": [
            ["Bo Tarr", ["Bo Tarr is an engineer."]],
            ["Ada Venn", ["Ada Venn is an engineer.", " She was born in Quellport."]],
        ],
    },
]


def to_hf_hotpot(rec: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face ``hotpot_qa`` row for an official record."""
    return {
        "id": rec["_id"],
        "question": rec["question"],
        "answer": rec["answer"],
        "type": rec["type"],
        "level": "hard",
        "supporting_facts": {
            "title": [t for t, _ in rec["supporting_facts"]],
            "sent_id": [i for _, i in rec["supporting_facts"]],
        },
        "context": {
            "title": [t for t, _ in rec["context"]],
            "sentences": [s for _, s in rec["context"]],
        },
    }


TWOWIKI = [
    {
        "_id": "w1",
        "type": "bridge_comparison",
        "question": "Which film has the director born later, Glim or Trask?",
        "context": [
            ["Glim", ["Glim is a film.", "It was directed by Oru Pell."]],
            ["Trask", ["Trask is a film directed by Ima Dorn."]],
            ["Oru Pell", ["Oru Pell( born 1950) is a director."]],
            ["Ima Dorn", ["Ima Dorn( born 1960) is a director."]],
        ],
        "supporting_facts": [["Trask", 0], ["Glim", 1], ["Ima Dorn", 0], ["Oru Pell", 0]],
        "evidences": [["Glim", "director", "Oru Pell"]],
        "answer": "Trask",
    },
    {
        "_id": "w2",
        "type": "compositional",
        "question": "Where was the director of Glim born?",
        "supporting_facts": [["Glim", 1], ["Oru Pell", 0]],
        "qa_pairs": [{"question": "Who directed Glim?", "answer": "Oru Pell"}],
        "answer": "Vastra",
    },
    {
        "_id": "w3",
        "type": "inference",
        "question": "Who is the paternal grandfather of Ima Dorn?",
        "context": [
            ["Ima Dorn", ["Ima Dorn( born 1960) is a director.", "Her father is Kel Dorn."]],
            ["Kel Dorn", ["Kel Dorn is the son of Ulf Dorn."]],
        ],
        "supporting_facts": [["Ima Dorn", 1], ["Kel Dorn", 0]],
        "answer": "Ulf Dorn",
    },
]


def musique_record(qid: str, answerable: bool = True) -> dict[str, Any]:
    return {
        "id": qid,
        "question": "What river flows through the birthplace of the founder of Zorbix?",
        "paragraphs": [
            {"idx": i, "title": title, "paragraph_text": text, "is_supporting": title != "Nimo Park"}
            for i, (title, text) in enumerate(
                [
                    ("Quellport", "Quellport lies on the Aru river."),
                    ("Nimo Park", "Nimo Park is a park."),
                    ("Zorbix", "Zorbix was founded by Ada Venn."),
                    ("Ada Venn", "Ada Venn was born in Quellport."),
                ]
            )
        ],
        "question_decomposition": [
            {"id": 1, "question": "Zorbix >> founded by", "answer": "Ada Venn", "paragraph_support_idx": 2},
            {"id": 2, "question": "#1 >> place of birth", "answer": "Quellport", "paragraph_support_idx": 3},
            {"id": 3, "question": "which river flows through #2", "answer": "Aru", "paragraph_support_idx": 0},
        ],
        "answer": "Aru",
        "answer_aliases": ["Aru river", "Aru", " "],
        "answerable": answerable,
    }


def small_files(tmp: Path) -> dict[str, Path]:
    """Write one small file per supported layout; return their paths by name."""
    return {
        "hotpot_official": write_json(tmp / "hotpot_dev_distractor_v1.json", HOTPOT_OFFICIAL),
        "hotpot_hf": write_jsonl(tmp / "hotpot_hf.jsonl", [to_hf_hotpot(r) for r in HOTPOT_OFFICIAL]),
        "twowiki_array": write_json(tmp / "2wiki_dev.json", TWOWIKI),
        "twowiki_lines": write_jsonl(tmp / "2wiki_lines.json", TWOWIKI),
        "musique": write_jsonl(
            tmp / "musique_ans_v1.0_dev.jsonl",
            [musique_record("3hop1__1_2_3"), musique_record("2hop__9_9", answerable=False), musique_record("plain7")],
        ),
    }


# -------------------------------------------------------------------- HotpotQA, small files
def test_hotpot_official_maps_fields_and_joins_sentences(tmp_path):
    loaded = load_file("hotpotqa", small_files(tmp_path)["hotpot_official"])
    assert_schema(loaded)
    q1, q2 = loaded.questions
    assert q1["id"] == "hotpotqa:hp1" and q1["answers"] == ["Quellport"]
    assert (q1["type"], q1["hops"], q1["source"], q1["split"]) == ("bridge", 2, "hotpotqa", "")
    # first-appearance order of the supporting facts, each paragraph once
    assert titles_of(loaded, q1) == ["Zorbix Labs", "Ada Venn"]
    assert titles_of(loaded, q2) == ["Bo Tarr", "Ada Venn"]
    # "Ada Venn" appears in both contexts with the same text: one passage, shared id
    assert [p["title"] for p in loaded.passages] == ["Ada Venn", "Zorbix Labs", "Nimo Park", "Bo Tarr"]
    ada = loaded.passages[0]
    assert ada["text"] == "Ada Venn is an engineer. She was born in Quellport."
    assert ada["id"] == passage_id("Ada Venn", ada["text"]) == q1["supporting_ids"][1]


def test_hotpot_hf_jsonl_and_parquet_equal_official(tmp_path):
    files = small_files(tmp_path)
    official = load_file("hotpotqa", files["hotpot_official"])
    rows = [to_hf_hotpot(r) for r in HOTPOT_OFFICIAL]
    parquet = tmp_path / "validation-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    for path in (files["hotpot_hf"], parquet):
        other = load_file("hotpotqa", path)
        assert other.questions == official.questions
        assert other.passages == official.passages


def test_hotpot_fullwiki_record_without_gold_paragraph_is_kept_without_gold(tmp_path, caplog):
    rec = dict(HOTPOT_OFFICIAL[0], _id="fw", context=[["Nimo Park", ["Nimo Park is a park."]]])
    path = write_json(tmp_path / "fullwiki.json", [rec, HOTPOT_OFFICIAL[1]])
    with caplog.at_level(logging.WARNING):
        loaded = load_file("hotpotqa", path)
    assert [q["id"] for q in loaded.questions] == ["hotpotqa:fw", "hotpotqa:hp2"]
    fw = loaded.questions[0]
    assert (fw["hops"], fw["supporting_ids"]) == (2, []) and gold_unknown(fw)  # the one rule (data/schema.py)
    assert not loaded.skipped and loaded.notes == Counter({NO_GOLD: 1})
    assert "Nimo Park" in [p["title"] for p in loaded.passages]  # its context is still corpus
    assert "1 record(s) kept with a caveat: gold passages not in the corpus" in caplog.text


# ------------------------------------------------------------------------ 2Wiki, small files
def test_twowiki_array_and_lines_give_same_result_and_skip_contextless(tmp_path, caplog):
    files = small_files(tmp_path)
    with caplog.at_level(logging.WARNING):
        arr = load_file("2wiki", files["twowiki_array"])
        lines = load_file("2wiki", files["twowiki_lines"])
    assert arr.questions == lines.questions and arr.passages == lines.passages
    assert arr.skipped == Counter({"no 'context' (missing or empty)": 1})
    assert "skipped 1 record(s): no 'context' (missing or empty)" in caplog.text
    w1, w3 = arr.questions
    assert (w1["id"], w1["type"], w1["hops"], w1["answers"]) == ("2wiki:w1", "bridge_comparison", 4, ["Trask"])
    assert titles_of(arr, w1) == ["Trask", "Glim", "Ima Dorn", "Oru Pell"]
    assert (w3["type"], w3["hops"]) == ("inference", 2)
    # 2Wiki sentences carry no leading space: one is inserted
    glim = next(p for p in arr.passages if p["title"] == "Glim")
    assert glim["text"] == "Glim is a film. It was directed by Oru Pell."
    # the same title with another text (Ima Dorn, w1 vs w3) is two passages
    assert [p["title"] for p in arr.passages].count("Ima Dorn") == 2


def test_join_sentences_spacing():
    assert join_sentences(["A b.", " C d.", "E f."]) == "A b. C d. E f."
    assert join_sentences(["  A.", "B. ", "C."]) == "A. B. C."
    assert join_sentences([]) == ""


# ---------------------------------------------------------------------- MuSiQue, small files
def test_musique_maps_decomposition_order_aliases_and_type(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        loaded = load_file("musique", small_files(tmp_path)["musique"])
    assert_schema(loaded)
    assert loaded.skipped == Counter({"answerable is false": 1})
    assert "answerable is false" in caplog.text
    q, plain = loaded.questions
    assert q["id"] == "musique:3hop1__1_2_3"
    assert (q["type"], q["hops"], q["source"]) == ("musique_3hop1", 3, "musique")
    assert q["answers"] == ["Aru", "Aru river"]  # answer first, aliases deduplicated, blanks dropped
    assert titles_of(loaded, q) == ["Zorbix", "Ada Venn", "Quellport"]  # decomposition order
    assert plain["type"] == "chain"
    assert len(loaded.passages) == 4  # the two kept records share their paragraphs


def test_musique_paragraph_used_by_two_steps_listed_once(tmp_path):
    rec = musique_record("2hop__5_6")
    rec["question_decomposition"][2]["paragraph_support_idx"] = 2
    loaded = load_file("musique", write_jsonl(tmp_path / "m.jsonl", [rec]))
    q = loaded.questions[0]
    assert q["hops"] == 3 and titles_of(loaded, q) == ["Zorbix", "Ada Venn"]


# --------------------------------------------------------------------- FlashRAG, small files
def test_flashrag_questions_metadata_derivations(tmp_path, caplog):
    rows = [
        {
            "id": "dev_0",
            "question": "Which city was the founder of Zorbix Labs born in?",
            "golden_answers": ["Quellport", "Quellport City"],
            "metadata": {
                "type": "bridge",
                "supporting_facts": {"title": ["Zorbix Labs", "Ada Venn"], "sent_id": [1, 1]},
                "context": {  # FlashRAG's 2Wiki files name the sentences column "content"
                    "title": ["Ada Venn", "Zorbix Labs"],
                    "content": [["Ada Venn was born in Quellport."], ["Zorbix Labs was founded by Ada Venn."]],
                },
            },
        },
        {
            "id": "dev_1",
            "question": "Who founded Nimo?",
            "golden_answers": ["Bo Tarr"],
            "metadata": {
                "type": "bridge",
                "supporting_facts": {"title": ["Nimo"], "sent_id": [0]},
                "context": {"title": ["Other"], "sentences": [["Other text."]]},
            },
        },
        {"id": "dev_2", "question": "who got the first nobel prize in physics", "golden_answers": ["Röntgen"]},
    ]
    with caplog.at_level(logging.WARNING):
        loaded = load_file("flashrag", write_jsonl(tmp_path / "qa_dev.jsonl", rows, final_newline=False))
    assert_schema(loaded)
    q0, q1, q2 = loaded.questions
    assert q0["id"] == "flashrag:qa_dev:dev_0" and q0["source"] == "flashrag"
    assert q0["answers"] == ["Quellport", "Quellport City"]
    assert (q0["type"], q0["hops"]) == ("bridge", 2)
    assert titles_of(loaded, q0) == ["Zorbix Labs", "Ada Venn"]
    assert q1["supporting_ids"] == [] and q1["hops"] == 1  # gold paragraph not in the context
    assert (q2["type"], q2["hops"], q2["supporting_ids"]) == ("unknown", 1, [])
    assert sum(loaded.notes.values()) == 2 and "kept with a caveat" in caplog.text


def test_flashrag_corpus_title_line_quoted_or_not(tmp_path):
    rows = [
        {"id": "0", "contents": '"Ada Venn"\nAda Venn was born in Quellport.'},
        {"id": 1, "contents": "No title line here.\nSecond line."},
        {"id": "2", "contents": '"Quoted" but not alone\nrest'},
    ]
    passages = read_flashrag_corpus(write_jsonl(tmp_path / "corpus.jsonl", rows, final_newline=False))
    assert passages == [
        {"id": "0", "title": "Ada Venn", "text": "Ada Venn was born in Quellport."},
        {"id": "1", "title": "No title line here.", "text": "Second line."},  # FlashRAG's rule: line 1 = title
        {"id": "2", "title": '"Quoted" but not alone', "text": "rest"},
    ]
    assert parse_contents('"T"\n') == ("T", "")
    assert parse_contents("Absalon\ndragged forth") == ("Absalon", "dragged forth")  # unquoted (wiki-18 sample)
    assert parse_contents("no newline at all") == ("", "no newline at all")


# ------------------------------------------------------------------- splits, merge, hub, I/O
def cfg(*sources: dict[str, Any], corpus: str | None = None, **ratios: float) -> RealConfig:
    return RealConfig(
        sources=[RealSource(**s) for s in sources],
        ratios=SplitRatios(**ratios) if ratios else SplitRatios(),
        corpus=corpus,
    )


def test_split_counts_sum_exactly():
    r = SplitRatios(train=0.8, dev=0.1, test=0.1)
    assert split_counts(10, r) == {"train": 8, "dev": 1, "test": 1}
    assert split_counts(7, r) == {"train": 5, "dev": 1, "test": 1}  # fractions .6/.7/.7
    for n in range(0, 40):
        for ratios in (r, SplitRatios(train=1 / 3, dev=1 / 3, test=1 / 3), SplitRatios(train=0.5, dev=0.5, test=0)):
            assert sum(split_counts(n, ratios).values()) == n


def test_assign_splits_is_seeded_and_keeps_order():
    qs = [{"id": str(i)} for i in range(50)]
    r = SplitRatios()
    a, b = assign_splits(qs, "auto", r, "0:0:x"), assign_splits(qs, "auto", r, "0:0:x")
    assert a == b
    assert Counter(q["split"] for q in a) == Counter({"train": 40, "dev": 5, "test": 5})
    assert [q["id"] for q in a] == [q["id"] for q in qs]
    assert [q["split"] for q in assign_splits(qs, "auto", r, "1:0:x")] != [q["split"] for q in a]
    assert {q["split"] for q in assign_splits(qs, "ood", r, "0:0:x")} == {"ood"}
    assert "split" not in qs[0]  # inputs untouched


def test_load_sources_merges_splits_corpora_and_corpus_file(tmp_path):
    files = small_files(tmp_path)
    extra = write_jsonl(tmp_path / "wiki.jsonl", [{"id": "wiki-1", "contents": '"Aru"\nThe Aru is a river.'}])
    real = cfg(
        {"dataset": "hotpotqa", "path": str(files["hotpot_official"]), "split": "train"},
        {"dataset": "2wiki", "path": str(files["twowiki_lines"]), "split": "auto"},
        {"dataset": "musique", "path": str(files["musique"]), "split": "ood", "limit": 1},
        corpus=str(extra),
        train=0.5,
        dev=0.5,
        test=0.0,
    )
    ds = load_sources(real, seed=3)
    assert set(ds.questions) == set(SPLITS)
    assert [q["id"] for q in ds.split("ood")] == ["musique:3hop1__1_2_3"]  # limit 1
    assert {q["id"] for q in ds.split("train")} >= {"hotpotqa:hp1", "hotpotqa:hp2"}
    two = [q for s in ("train", "dev") for q in ds.split(s) if q["source"] == "2wiki"]
    assert sorted(q["split"] for q in two) == ["dev", "train"]
    assert ds.split("test") == []
    pids = [p["id"] for p in ds.corpus]
    assert len(pids) == len(set(pids)) and pids[-1] == "wiki-1"
    for split in SPLITS:
        for q in ds.split(split):
            assert q["split"] == split and set(q["supporting_ids"]) <= set(pids)
    assert load_sources(real, seed=3) == ds


def test_hub_source_goes_through_datasets_load_dataset(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split, kwargs))
        return [to_hf_hotpot(r) for r in HOTPOT_OFFICIAL]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    real = cfg(
        {
            "dataset": "hotpotqa",
            "hub_id": "hotpotqa/hotpot_qa",
            "hub_config": "distractor",
            "hub_split": "validation",
            "split": "dev",
            "limit": 1,
        }
    )
    ds = load_sources(real, seed=0)
    assert calls == [("hotpotqa/hotpot_qa", "distractor", "validation", {})]
    assert [q["id"] for q in ds.split("dev")] == ["hotpotqa:hp1"]
    assert {p["title"] for p in ds.corpus} == {"Ada Venn", "Zorbix Labs", "Nimo Park"}


def test_hub_rows_with_json_encoded_columns(monkeypatch, tmp_path):
    """Some hub copies of 2Wiki store ``context``/``supporting_facts`` as JSON strings."""
    import datasets

    rows = [
        dict(r, context=json.dumps(r["context"]), supporting_facts=json.dumps(r["supporting_facts"]))
        for r in (TWOWIKI[0], TWOWIKI[2])
    ]
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None, split=None: rows)
    hub = load_sources(cfg({"dataset": "2wiki", "hub_id": "framolfese/2WikiMultihopQA", "split": "test"}), seed=0)
    local = load_file("2wiki", small_files(tmp_path)["twowiki_array"])
    assert hub.split("test") == [{**q, "split": "test"} for q in local.questions]
    assert hub.corpus == local.passages
    rows[0]["context"] = "[not json"
    with pytest.raises(RealDataError, match=r"row 0 \(id 'w1'\): field 'context' is a string but not valid JSON"):
        load_sources(cfg({"dataset": "2wiki", "hub_id": "framolfese/2WikiMultihopQA"}), seed=0)


def test_hub_failure_names_the_source(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    real = cfg({"dataset": "musique", "hub_id": "dgslibisey/MuSiQue"})
    message = r"data\.real\.sources\[0\]\.hub_id .*dgslibisey/MuSiQue.*ConnectionError: offline"
    with pytest.raises(RealDataError, match=message):
        load_sources(real, seed=0)


def test_flashrag_export_import_round_trip(tmp_path):
    files = small_files(tmp_path)
    real = cfg(
        {"dataset": "hotpotqa", "path": str(files["hotpot_official"]), "split": "train"},
        {"dataset": "musique", "path": str(files["musique"]), "split": "ood"},
        {
            "dataset": "flashrag",
            "path": str(
                write_jsonl(
                    tmp_path / "nq.jsonl",
                    [{"id": "test_0", "question": "who wrote it", "golden_answers": ["Ada Venn"]}],
                )
            ),
            "split": "test",
        },
    )
    ds = load_sources(real, seed=0)
    out = tmp_path / "export"
    written = export_flashrag(ds, out)
    assert [p.name for p in written] == ["train.jsonl", "test.jsonl", "ood.jsonl", "corpus.jsonl"]
    first = json.loads((out / "corpus.jsonl").read_text().splitlines()[0])
    assert first["contents"] == f'"{ds.corpus[0]["title"]}"\n{ds.corpus[0]["text"]}'
    back = import_flashrag(out)
    assert back.corpus == ds.corpus
    assert back.questions == {s: qs for s, qs in ds.questions.items() if qs}
    assert export_flashrag(back, tmp_path / "again") and all(
        (tmp_path / "again" / p.name).read_bytes() == p.read_bytes() for p in written
    )


# ---------------------------------------------------------------------------------- errors
EXPORTED_META = {"supporting_ids": [], "type": "bridge", "hops": 2, "source": "flashrag", "split": "dev"}


@pytest.mark.parametrize(
    ("dataset", "mutate", "message"),
    [
        ("hotpotqa", lambda r: r.pop("answer"), r"record 1 \(id 'hp2'\): required field 'answer' is missing"),
        ("hotpotqa", lambda r: r.update(type="trivia"), r"record 1 \(id 'hp2'\): field 'type' is 'trivia'"),
        ("hotpotqa", lambda r: r.update(context="text"), r"record 1 \(id 'hp2'\): field 'context' must be a list"),
        ("hotpotqa", lambda r: r.update(supporting_facts=[]), r"field 'supporting_facts' is empty"),
        ("hotpotqa", lambda r: r.update(question="  "), r"field 'question' is empty"),
        ("2wiki", lambda r: r.update(type="bridge"), r"field 'type' is 'bridge'; 2Wiki types are"),
        (
            "musique",
            lambda r: r["question_decomposition"][0].update(paragraph_support_idx=40),
            r"question_decomposition\[0\]: field 'paragraph_support_idx' = 40 names no paragraph",
        ),
        (
            "musique",
            lambda r: r["paragraphs"][1].pop("paragraph_text"),
            r"paragraphs\[1\]: required field 'paragraph_text' is missing",
        ),
        ("flashrag", lambda r: r.update(golden_answers="x"), r"field 'golden_answers' must be a list"),
        ("flashrag", lambda r: r.update(golden_answers=[""]), r"field 'golden_answers' holds no non-empty answer"),
        ("flashrag", lambda r: r.update(metadata=dict(EXPORTED_META, hops=0)), r"field 'hops' must be >= 1 \(got 0\)"),
    ],
)
def test_malformed_record_names_file_record_and_field(tmp_path, dataset, mutate, message):
    base = {
        "hotpotqa": [dict(r) for r in HOTPOT_OFFICIAL],
        "2wiki": [dict(TWOWIKI[0]), dict(TWOWIKI[2])],
        "musique": [musique_record("2hop__1_2"), musique_record("2hop__3_4")],
        "flashrag": [{"id": f"q{i}", "question": "q?", "golden_answers": ["a"]} for i in range(2)],
    }[dataset]
    base = json.loads(json.dumps(base))
    mutate(base[1])
    path = write_json(tmp_path / "bad.json", base)
    with pytest.raises(RealDataError, match=message) as exc:
        load_file(dataset, path)
    assert "bad.json" in str(exc.value)


def test_file_level_errors_name_the_source(tmp_path):
    csv = tmp_path / "data.csv"
    csv.write_text("id,question\n1,what\n")
    bad_line = tmp_path / "broken.jsonl"
    bad_line.write_text(json.dumps(musique_record("2hop__1_2")) + '\n{"id": \n')
    files = small_files(tmp_path)
    cases = [
        (
            {"dataset": "hotpotqa", "path": str(tmp_path / "missing.json")},
            r"sources\[0\]\.path .*missing\.json: file not found",
        ),
        ({"dataset": "2wiki", "path": str(csv)}, r"sources\[0\]\.path .*data\.csv: unknown format"),
        ({"dataset": "musique", "path": str(bad_line)}, r"broken\.jsonl: line 2 is not valid JSON"),
    ]
    for source, message in cases:
        with pytest.raises(RealDataError, match=message):
            load_sources(cfg(source), seed=0)
    empty = write_json(tmp_path / "empty.json", [])
    with pytest.raises(RealDataError, match=r"sources\[0\].*no usable question"):
        load_sources(cfg({"dataset": "2wiki", "path": str(empty)}), seed=0)
    other = json.loads(json.dumps(TWOWIKI))
    other[0]["answer"] = "Somewhere else"
    clash = cfg(
        {"dataset": "2wiki", "path": str(files["twowiki_array"])},
        {"dataset": "2wiki", "path": str(write_jsonl(tmp_path / "2wiki_other.jsonl", other))},
    )
    message = (
        r"sources\[1\].*'2wiki:w1' at \S*2wiki_other\.jsonl line 1 \(id 'w1'\) is also at "
        r"\S*2wiki_dev\.json record 0 \(id 'w1'\) \(data\.real\.sources\[0\]\) with other content: remove one"
    )
    with pytest.raises(RealDataError, match=message):
        load_sources(clash, seed=0)
    bad_corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "no contents"}])
    message = r"^data\.real\.corpus: \S*c\.jsonl line 1 \(id '1'\): required field 'contents'"
    with pytest.raises(RealDataError, match=message):
        load_sources(cfg({"dataset": "2wiki", "path": str(files["twowiki_array"])}, corpus=str(bad_corpus)), seed=0)
    assert isinstance(RealDataError("x"), ValueError)


def test_the_same_file_twice_is_a_counted_copy_not_an_error(tmp_path):
    """Issue 48 item 11: two files holding the same question ids with equal content (the same
    data in two layouts): the second's questions are dropped as duplicates and counted."""
    files = small_files(tmp_path)
    twice = cfg(
        {"dataset": "2wiki", "path": str(files["twowiki_array"])},
        {"dataset": "2wiki", "path": str(files["twowiki_lines"])},
    )
    dataset, records = load_real(twice, seed=0)
    first, second = records["sources"]
    assert sum(map(len, dataset.questions.values())) == first["questions"] == 2  # a third record has no context
    assert second["questions"] == 0 and second["skipped"][duplicate_reason(0, "2wiki")] == 2


def test_a_repeated_id_inside_one_file_names_both_lines(tmp_path):
    """Issue 48 items 10-11: a copy inside one file is dropped and counted; other content under
    the same id is an error naming both records' lines."""
    rec = musique_record("2hop__1_2")
    copy = write_jsonl(tmp_path / "copy.jsonl", [rec, musique_record("3hop1__1_2_3"), rec])
    loaded = load_file("musique", copy)
    assert [q["id"] for q in loaded.questions] == ["musique:2hop__1_2", "musique:3hop1__1_2_3"]
    assert loaded.skipped == {REPEATED_ID: 1}
    changed = {**rec, "answer": "another answer"}
    clash = write_jsonl(tmp_path / "clash.jsonl", [rec, musique_record("3hop1__1_2_3"), changed])
    message = (
        r"clash\.jsonl line 3 \(id '2hop__1_2'\): question id 'musique:2hop__1_2' repeats "
        r"\S*clash\.jsonl line 1 \(id '2hop__1_2'\) with other content"
    )
    with pytest.raises(RealDataError, match=message):
        load_file("musique", clash)


@pytest.mark.parametrize("kind", ["directory", "loop", "device", "dangling"])
def test_a_path_that_is_no_file_says_what_it_is(tmp_path, kind):
    """Issue 48 item 10: a directory, a symbolic link loop, /dev/zero or a dangling link is not
    reported as a missing file."""
    path = {"directory": tmp_path, "device": Path("/dev/zero")}.get(kind, tmp_path / "link.json")
    if kind == "loop":
        path.symlink_to(path)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "gone.json")
    expected = {
        "directory": "a directory, not a data file",
        "loop": "a symbolic link loop",
        "device": "a character device, not a data file",
        "dangling": "a broken symbolic link",
    }[kind]
    with pytest.raises(RealDataError, match=expected) as exc:
        list(read_records(path))
    assert "file not found" not in str(exc.value) and str(path) in str(exc.value)
    with pytest.raises(RealDataError, match=rf"sources\[0\]\.path .*{expected}"):
        load_sources(cfg({"dataset": "hotpotqa", "path": str(path)}), seed=0)


def test_read_records_reports_positions(tmp_path):
    lines = write_jsonl(tmp_path / "a.json", [{"x": 1}, {"x": 2}], final_newline=False)
    assert [w for w, _ in read_records(lines)] == [f"{lines} line 1", f"{lines} line 2"]  # the path as given
    arr = write_json(tmp_path / "b.jsonl", [{"x": 1}])
    assert [w for w, _ in read_records(arr)] == [f"{arr} record 0"]
    with pytest.raises(RealDataError, match="record 0 is a int"):
        list(read_records(write_json(tmp_path / "c.json", [3])))


# ------------------------------------------------------------------- real-format fixtures
def test_fixture_hotpot_official(shared_fixtures):
    path = shared_fixtures / "hotpotqa" / "hotpot_dev_distractor_v1.first53.json"
    raw = json.loads(path.read_text())
    loaded = load_file("hotpotqa", path)
    assert_schema(loaded)
    assert len(loaded.questions) == 53 and not loaded.skipped
    q = loaded.questions[0]
    assert q["id"] == "hotpotqa:5a8b57f25542995d1e6f1371"
    assert q["question"] == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert (q["answers"], q["type"], q["hops"]) == (["yes"], "comparison", 2)
    assert titles_of(loaded, q) == ["Scott Derrickson", "Ed Wood"]
    scott = next(p for p in loaded.passages if p["title"] == "Scott Derrickson")
    assert scott["text"].startswith(
        "Scott Derrickson (born July 16, 1966) is an American director, "
        "screenwriter and producer. He lives in Los Angeles, California."
    )
    assert Counter(q["type"] for q in loaded.questions) == Counter({"bridge": 39, "comparison": 14})
    for rec, q in zip(raw, loaded.questions):
        assert q["id"] == f"hotpotqa:{rec['_id']}" and q["answers"] == [rec["answer"]]
        # the raw titles keep HTML references (Tunnels &amp; Trolls); the loader decodes them once
        assert titles_of(loaded, q) == [unescape_entities(t) for t in first_titles(rec["supporting_facts"])]


def test_fixture_hotpot_hf_jsonl_matches_official(shared_fixtures):
    hf = load_file("hotpotqa", shared_fixtures / "hotpotqa" / "dev.jsonl")
    assert_schema(hf)
    assert len(hf.questions) == 300
    assert Counter(q["type"] for q in hf.questions) == Counter({"bridge": 230, "comparison": 70})
    q = hf.questions[0]
    assert (q["id"], q["answers"]) == ("hotpotqa:5a8ce55f554299441c6b9f62", ["Tulsa"])
    assert titles_of(hf, q) == ["Tinted Windows (album)", "Tinted Windows (band)"]
    official = load_file("hotpotqa", shared_fixtures / "hotpotqa" / "hotpot_dev_distractor_v1.first53.json")
    common = by_id(hf).keys() & by_id(official).keys()
    assert len(common) == 3  # three records are in both samples: both layouts map them alike
    for qid in common:
        assert by_id(hf)[qid] == by_id(official)[qid]


def test_fixture_twowiki_array(shared_fixtures):
    loaded = load_file("2wiki", shared_fixtures / "2wikimultihopqa" / "qa_sub.json")
    assert_schema(loaded)
    q1, q2 = loaded.questions
    assert q1["id"] == "2wiki:83bf3b5a0bd911eba7f7acde48001122"
    assert (q1["answers"], q1["type"], q1["hops"]) == (["20 March 851"], "compositional", 2)
    assert titles_of(loaded, q1) == ["Lothair II", "Ermengarde of Tours"]
    assert (q2["answers"], q2["type"]) == (["Phoolwari"], "comparison")
    assert titles_of(loaded, q2) == ["Aas Ka Panchhi", "Phoolwari"]
    assert len(loaded.passages) == 20


def test_fixture_twowiki_jsonl_with_contextless_records(shared_fixtures, caplog):
    path = shared_fixtures / "2wikimultihopqa" / "wikihop.json"
    raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    with caplog.at_level(logging.WARNING):
        loaded = load_file("2wiki", path)
    assert_schema(loaded)
    assert loaded.skipped == Counter({"no 'context' (missing or empty)": 36})
    assert "skipped 36 record(s)" in caplog.text
    assert len(loaded.questions) == 164
    assert Counter(q["type"] for q in loaded.questions) == Counter(
        {"compositional": 57, "comparison": 54, "bridge_comparison": 43, "inference": 10}
    )
    q = by_id(loaded)["2wiki:b088d3ca08e211ebbda4ac1f6bf848b6"]
    assert (q["answers"], q["type"], q["hops"]) == (["Free Guy"], "bridge_comparison", 4)
    assert titles_of(loaded, q) == ["Forbidden Ground", "Free Guy", "Pál Gábor", "Shawn Levy"]
    assert "2wiki:13c1565a087311ebbd66ac1f6bf848b6" not in by_id(loaded)  # a context-less record
    for rec in raw:
        if rec.get("context"):
            q = by_id(loaded)[f"2wiki:{rec['_id']}"]
            assert q["hops"] == (4 if rec["type"] == "bridge_comparison" else 2)
            assert titles_of(loaded, q) == first_titles(rec["supporting_facts"])


def test_fixture_musique(shared_fixtures):
    path = shared_fixtures / "musique" / "musique_qa_100.json"
    raw = json.loads(path.read_text())
    loaded = load_file("musique", path)
    assert_schema(loaded)
    assert len(loaded.questions) == 100
    q = loaded.questions[0]
    assert q["id"] == "musique:2hop__82713_84616"
    assert q["answers"] == [
        "for Best Performance by a Leading Actress in a Play in Ondine",
        "leading role",
        "star",
        "leading actress",
        "lead",
    ]
    assert (q["type"], q["hops"]) == ("musique_2hop", 2)
    assert titles_of(loaded, q) == ["My Fair Lady (film)", "List of awards and honours received by Audrey Hepburn"]
    q4 = by_id(loaded)["musique:4hop1__88342_75218_128008_80487"]
    assert (q4["type"], q4["hops"], q4["answers"]) == ("musique_4hop1", 4, ["July 11, 2017"])
    assert titles_of(loaded, q4) == [
        "Major League Baseball Most Valuable Player Award",
        "World Series",
        "New York Yankees",
        "2017 Major League Baseball All-Star Game",
    ]
    assert Counter(q["type"] for q in loaded.questions)["musique_3hop1"] == 29
    for rec, q in zip(raw, loaded.questions):
        steps = rec["question_decomposition"]
        assert q["hops"] == len(steps)
        want: list[str] = []  # by paragraph, not title: some records hold two paragraphs of one title
        for s in steps:
            p = rec["paragraphs"][s["paragraph_support_idx"]]
            pid = passage_id(p["title"], p["paragraph_text"])
            want += [pid] if pid not in want else []
        assert q["supporting_ids"] == want


def test_fixture_flashrag_questions(shared_fixtures):
    d = shared_fixtures / "flashrag"
    hot = load_file("flashrag", d / "hotpotqa_dev_200.jsonl")
    assert_schema(hot)
    assert len(hot.questions) == 200
    assert sum(bool(q["supporting_ids"]) for q in hot.questions) == 53  # fullwiki contexts
    q = hot.questions[0]
    assert (q["id"], q["answers"], q["type"], q["source"]) == (
        "flashrag:hotpotqa_dev_200:dev_0",
        ["yes"],
        "comparison",
        "flashrag",
    )
    wiki = load_file("flashrag", d / "2wikimultihopqa_dev_200.jsonl")
    assert_schema(wiki)
    assert all(q["supporting_ids"] for q in wiki.questions)
    w = wiki.questions[0]
    assert w["answers"] == ["Małgorzata Braunek"]
    assert titles_of(wiki, w) == ["Polish-Russian War (film)", "Xawery Żuławski"]
    assert {q["hops"] for q in wiki.questions if q["type"] == "bridge_comparison"} == {4}
    mus = load_file("flashrag", d / "musique_dev_200.jsonl")
    assert_schema(mus)
    m = mus.questions[0]
    assert (m["answers"], m["type"], m["hops"]) == (["Miquette Giraudy"], "chain", 2)
    assert titles_of(mus, m) == ["Green (Steve Hillage album)", "Miquette Giraudy"]
    nq = load_file("flashrag", d / "nq" / "test.jsonl")  # last line without newline
    assert len(nq.questions) == 17
    assert nq.questions[-1]["question"] == "where is the tv show the curse of oak island filmed"
    assert nq.questions[-1]["answers"] == ["Oak Island"] and nq.passages == []


def test_fixture_flashrag_corpus(shared_fixtures):
    d = shared_fixtures / "wiki_corpus"
    sample = read_flashrag_corpus(d / "sample_data.jsonl")
    assert len(sample) == 1000
    assert sample[0]["id"] == "0" and sample[0]["title"] == "Evan Morris"
    assert sample[0]["text"].startswith("Evan Morris Evan L. Morris (January 26, 1977")
    assert read_flashrag_corpus(d / "corpus.jsonl") == sample[:10]


def test_fixture_load_sources_end_to_end(shared_fixtures, tmp_path):
    f = shared_fixtures
    real = cfg(
        {"dataset": "hotpotqa", "path": str(f / "hotpotqa" / "dev.jsonl"), "limit": 100},
        {"dataset": "2wiki", "path": str(f / "2wikimultihopqa" / "wikihop.json")},
        {"dataset": "musique", "path": str(f / "musique" / "musique_qa_100.json"), "split": "ood"},
        corpus=str(f / "wiki_corpus" / "corpus.jsonl"),
    )
    ds = load_sources(real, seed=0)
    n = {s: len(ds.split(s)) for s in SPLITS}
    assert n["ood"] == 100 and n["train"] + n["dev"] + n["test"] == 100 + 164
    assert n["train"] == 80 + 131 and n["dev"] == 10 + 17  # 164: fractions .2/.4/.4, dev wins the tie
    ids = [q["id"] for s in SPLITS for q in ds.split(s)]
    assert len(ids) == len(set(ids))
    corpus_ids = {p["id"] for p in ds.corpus}
    assert len(corpus_ids) == len(ds.corpus)
    assert all(set(q["supporting_ids"]) <= corpus_ids for s in SPLITS for q in ds.split(s))
    assert {"0", "9"} <= corpus_ids
    assert load_sources(real, seed=0) == ds
    assert load_sources(real, seed=1).questions != ds.questions
    export_flashrag(ds, tmp_path)
    back = import_flashrag(tmp_path)
    assert back == Dataset(questions={s: q for s, q in ds.questions.items() if q}, corpus=ds.corpus)
