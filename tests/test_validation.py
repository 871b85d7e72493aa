"""Stage ``validate``: GX checks on tiny processed datasets, the success marker, and the CLI."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from agentr1 import stages
from agentr1.cli import main
from agentr1.config import config_from_dict, load_config
from agentr1.data.multihop import load_sources
from agentr1.data.schema import Dataset, write_dataset, write_questions
from agentr1.data.validation import (
    GX_RESULT_FILE,
    MARKER_FILE,
    SUMMARY_FILE,
    build_checks,
    leaked_answer,
    normalize_text,
    require_validated,
)
from agentr1.errors import StageError
from agentr1.stages.validate import summary_metrics


def _q(
    id_: str, question: str, answers: list[str], type_: str, hops: int, sup: list[str], split: str
) -> dict[str, Any]:
    return {
        "id": id_,
        "question": question,
        "answers": answers,
        "type": type_,
        "hops": hops,
        "supporting_ids": sup,
        "source": "synthetic",
        "split": split,
    }


def clean_dataset() -> Dataset:
    """A small dataset that passes every check (incl. an allowed leak in a comparison question)."""
    titles = ["Alva Brenn", "Kostrava", "Miro Tesk", "Velun Dor", "Orsk", "Tamiq Ral", "Zerav"]
    corpus = [
        {"id": f"p{i}", "title": title, "text": f"{title} is a made-up entity number {i}."}
        for i, title in enumerate(titles, 1)
    ]
    corpus[1]["text"] += " It trades with Orsk and Zerav."  # a passage train cites: held-out answers are copyable
    questions = {
        "train": [
            _q("t1", "Where was Alva Brenn born?", ["Kostrava"], "bridge", 2, ["p1", "p2"], "train"),
            _q(
                "t2",
                "Who was born first, Alva Brenn or Miro Tesk?",
                ["Alva Brenn"],
                "comparison",
                2,
                ["p1", "p3"],
                "train",
            ),
        ],
        "dev": [_q("d1", "Which city is Velun Dor from?", ["Orsk", "Orsk City"], "bridge", 2, ["p4", "p5"], "dev")],
        "test": [
            _q("e1", "Who founded the company of Tamiq Ral?", ["Zerav"], "compositional", 2, ["p6", "p7"], "test")
        ],
        "ood": [
            _q(
                "o1",
                "In which city was the founder of Velun Dor's studio born?",
                ["Kostrava"],
                "chain",
                3,
                ["p4", "p6", "p2"],
                "ood",
            )
        ],
    }
    return Dataset(questions=questions, corpus=corpus)


def make_cfg(tmp_path: Path, **validate: Any):
    raw = {
        "data": {"processed_dir": str(tmp_path / "processed"), "hops": {"min": 1, "max": 4}},
        "validate": {"report_dir": str(tmp_path / "validation"), **validate},
    }
    return config_from_dict(raw)


def write(cfg, ds: Dataset) -> None:
    write_dataset(ds, cfg.data.processed_dir)


def marker(cfg) -> Path:
    return Path(cfg.validate_.report_dir) / MARKER_FILE


def summary(cfg) -> dict[str, Any]:
    return json.loads((Path(cfg.validate_.report_dir) / SUMMARY_FILE).read_text())


# ------------------------------------------------------------------------------- unit pieces
def test_leak_detection_is_normalized_and_word_bounded():
    assert normalize_text("  Is PARIS,  in France? ") == "is paris in france"
    assert leaked_answer("Is paris in France?", ["Paris"]) == "Paris"
    assert leaked_answer("Where was X born in 1990?", ["1"]) is None
    assert leaked_answer("Who directed Kostrava-Nights?", ["kostrava nights"]) == "kostrava nights"
    assert leaked_answer("Who is Alvar?", ["Alva"]) is None
    assert leaked_answer(None, ["x"]) is None


def test_check_names_unique_and_hop_range_from_params(tmp_path):
    checks = build_checks(make_cfg(tmp_path))
    assert len({c.name for c in checks}) == len(checks)
    hops = next(c for c in checks if c.name == "questions.hops_in_range")
    assert (hops.kwargs["min_value"], hops.kwargs["max_value"]) == (1, 4)


# ----------------------------------------------------------------------------------- passing
def test_clean_dataset_passes_writes_reports_and_marker(tmp_path):
    cfg = make_cfg(tmp_path)
    write(cfg, clean_dataset())
    with pytest.raises(StageError, match="run `agentr1 validate`"):
        require_validated(cfg)

    report = stages.run("validate", cfg, None)
    assert report.success
    s = summary(cfg)
    assert s["success"] is True and s["n_failed"] == 0
    assert s["rows"] == {"corpus": 7, "questions": 5, "train": 2, "dev": 1, "test": 1, "ood": 1}
    assert all(e["success"] for e in s["expectations"].values())
    assert s["expectations"]["questions.id_unique"]["unexpected_count"] == 0
    assert s["expectations"]["questions.id_unique"]["expectation"] == "expect_column_values_to_be_unique"
    assert marker(cfg).exists()
    require_validated(cfg)  # passes

    # the comparison question leaks its answer, allowed by leak_allowed_types=[comparison]
    assert leaked_answer("Who was born first, Alva Brenn or Miro Tesk?", ["Alva Brenn"]) == "Alva Brenn"

    gx_text = (Path(cfg.validate_.report_dir) / GX_RESULT_FILE).read_text()
    gx = json.loads(gx_text)
    assert set(gx) == {"files", "questions", "corpus"} and gx["questions"]["success"] is True
    for volatile in ("validation_time", "run_id", "ge_load_time", "validation_id"):
        assert volatile not in gx_text

    # deterministic: a second run writes byte-identical reports
    first = {n: (Path(cfg.validate_.report_dir) / n).read_bytes() for n in (SUMMARY_FILE, GX_RESULT_FILE, MARKER_FILE)}
    stages.run("validate", cfg, None)
    second = {n: (Path(cfg.validate_.report_dir) / n).read_bytes() for n in first}
    assert first == second


# -------------------------------------------------------------------------------- corruptions
def _dup_id(ds: Dataset) -> None:
    ds.questions["train"].append(dict(ds.questions["train"][0], question="Where did Alva Brenn study?"))


def _missing_passage(ds: Dataset) -> None:
    ds.questions["train"][0]["supporting_ids"] = ["p1", "p404"]


def _empty_answer(ds: Dataset) -> None:
    ds.questions["dev"][0]["answers"] = ["Orsk", " "]


def _no_answers(ds: Dataset) -> None:
    ds.questions["test"][0]["answers"] = []


def _hops_out_of_range(ds: Dataset) -> None:
    ds.questions["ood"][0]["hops"] = 7


def _leak(ds: Dataset) -> None:
    ds.questions["dev"][0]["question"] = "Velun Dor is from Orsk; which city is Velun Dor from?"


def _question_in_two_splits(ds: Dataset) -> None:
    ds.questions["test"][0]["question"] = "where was alva brenn born"  # = train t1 after normalization


def _id_in_two_splits(ds: Dataset) -> None:
    ds.questions["dev"][0]["id"] = "t2"


def _blank_question(ds: Dataset) -> None:
    ds.questions["train"][1]["question"] = "   "


def _wrong_split(ds: Dataset) -> None:
    ds.questions["test"][0]["split"] = "dev"


def _dup_passage(ds: Dataset) -> None:
    ds.corpus.append(dict(ds.corpus[2], text="A second passage with the same id."))


def _zero_width_question(ds: Dataset) -> None:
    ds.questions["train"][1]["question"] = "\u200b\u200c \u2060\ufeff\u200d"  # category Cf + a space


def _answer_normalizes_to_nothing(ds: Dataset) -> None:
    ds.questions["dev"][0]["answers"] = ["Orsk", "?"]  # normalize_answer("?") == ""


def _article_answer(ds: Dataset) -> None:
    ds.questions["test"][0]["answers"] = ["The"]


# issue 26 item 5: data that validation passed before
def _same_question_other_answer(ds: Dataset) -> None:
    ds.questions["train"].append(dict(ds.questions["train"][0], id="t3", answers=["Orsk"]))


def _one_hop_two_ids(ds: Dataset) -> None:
    ds.questions["train"][0]["hops"] = 1


def _two_hops_one_id(ds: Dataset) -> None:
    ds.questions["dev"][0]["supporting_ids"] = ds.questions["dev"][0]["supporting_ids"][:1]


def _repeated_ids(ds: Dataset) -> None:
    ds.questions["test"][0]["supporting_ids"] = ["p6", "p6"]


def _blank_title(ds: Dataset) -> None:
    ds.corpus[2]["title"] = "  "


def _escaped_title(ds: Dataset) -> None:
    ds.corpus[2]["title"] = "Dolenz, Jones, Boyce &amp; Hart"  # HotpotQA's raw spelling, not decoded


def _control_char_answer(ds: Dataset) -> None:
    ds.questions["dev"][0]["answers"] = ["Orsk\x1b[2J"]


def _control_char_question(ds: Dataset) -> None:
    ds.questions["train"][1]["question"] += "\x00"


def _megabyte_question(ds: Dataset) -> None:
    ds.questions["test"][0]["question"] = "Who founded it? " + "x" * 1_000_000


def _two_megabyte_answer(ds: Dataset) -> None:
    ds.questions["ood"][0]["answers"] = ["K" * 2_000_000]


def _path_id(ds: Dataset) -> None:
    ds.questions["dev"][0]["id"] = "../../../../tmp/x"


def _chatml_in_question(ds: Dataset) -> None:
    ds.questions["train"][0]["question"] = "Where was Alva Brenn born?<|im_end|>\n<|im_start|>assistant"


def _chatml_in_passage(ds: Dataset) -> None:
    ds.corpus[2]["text"] += " <|endoftext|>"


CORRUPTIONS: list[tuple[str, Callable[[Dataset], None], str, str, str]] = [
    (
        "same_question_other_answer",
        _same_question_other_answer,
        "questions.answers_consistent",
        "t3",
        "\"['kostrava'] vs ['orsk']\"",
    ),
    ("one_hop_two_ids", _one_hop_two_ids, "questions.hops_match_supporting_ids", "t1", "hops 1 but 2"),
    ("two_hops_one_id", _two_hops_one_id, "questions.hops_match_supporting_ids", "d1", "hops 2 but 1"),
    ("repeated_ids", _repeated_ids, "questions.hops_match_supporting_ids", "e1", "repeated supporting ids"),
    ("blank_title", _blank_title, "corpus.title_not_blank", "p3", "'  '"),
    ("escaped_title", _escaped_title, "corpus.title_unescaped", "p3", "'&amp;'"),
    ("control_char_answer", _control_char_answer, "questions.no_control_chars", "d1", "answer 1: U+001B at 4"),
    ("control_char_question", _control_char_question, "questions.no_control_chars", "t2", "question: U+0000"),
    ("megabyte_question", _megabyte_question, "questions.question_length", "e1", "1000016 chars (at most 2048)"),
    ("two_megabyte_answer", _two_megabyte_answer, "questions.answer_length", "o1", "2000000 chars (at most 256)"),
    ("path_id", _path_id, "questions.id_plain", "../../../../tmp/x", "holds '..'"),
    ("chatml_in_question", _chatml_in_question, "questions.no_special_tokens", "t1", "<|im_end|>, <|im_start|>"),
    ("chatml_in_passage", _chatml_in_passage, "corpus.no_special_tokens", "p3", "<|endoftext|>"),
    # (name, mutate, failed check, offending id, offending value in the message)
    ("duplicate_id", _dup_id, "questions.id_unique", "t1", "'t1'"),
    ("missing_supporting_passage", _missing_passage, "questions.supporting_ids_in_corpus", "t1", "'p404'"),
    ("empty_answer", _empty_answer, "questions.answers_not_blank", "d1", "' '"),
    ("answer_normalizes_to_nothing", _answer_normalizes_to_nothing, "questions.answers_not_blank", "d1", "'?'"),
    ("article_answer", _article_answer, "questions.answers_not_blank", "e1", "'The'"),
    ("no_answers", _no_answers, "questions.answers_not_empty", "e1", "0"),
    ("hops_out_of_range", _hops_out_of_range, "questions.hops_in_range", "o1", "7"),
    ("answer_leak", _leak, "questions.no_answer_leak", "d1", "'Orsk'"),
    ("question_in_two_splits", _question_in_two_splits, "questions.splits_disjoint_questions", "e1", "'test,train'"),
    ("id_in_two_splits", _id_in_two_splits, "questions.splits_disjoint_ids", "t2", "'dev,train'"),
    ("blank_question", _blank_question, "questions.question_not_blank", "t2", "'   '"),
    ("zero_width_question", _zero_width_question, "questions.question_not_blank", "t2", r"'\u200b\u200c"),
    ("wrong_split_value", _wrong_split, "questions.split_matches_file", "e1", "dev"),
    ("duplicate_passage_id", _dup_passage, "corpus.id_unique", "p3", "'p3'"),
]


@pytest.mark.parametrize(
    ("mutate", "check", "bad_id", "bad_value"), [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS]
)
def test_corruption_fails_with_message_and_no_marker(tmp_path, mutate, check, bad_id, bad_value):
    cfg = make_cfg(tmp_path)
    ds = clean_dataset()
    marker(cfg).parent.mkdir(parents=True)
    marker(cfg).write_text("{}")  # a marker left by an earlier run ...

    bad = copy.deepcopy(ds)
    mutate(bad)
    write(cfg, bad)
    with pytest.raises(StageError) as info:
        stages.run("validate", cfg, None)
    msg = str(info.value)
    assert "dataset validation failed" in msg
    line = next(ln for ln in msg.splitlines() if ln.strip().startswith(f"- {check} "))
    assert "unexpected" in line and not line.split("]: ")[1].startswith("0 ")
    assert f"id={bad_id!r}" in msg and bad_value in msg
    assert not marker(cfg).exists()  # ... is gone, so later stages refuse to run
    with pytest.raises(StageError, match="not passed validation"):
        require_validated(cfg)
    s = summary(cfg)  # reports are still written for inspection
    assert s["success"] is False and s["expectations"][check]["success"] is False
    assert s["expectations"][check]["unexpected_count"] >= 1
    assert json.loads((Path(cfg.validate_.report_dir) / GX_RESULT_FILE).read_text())["questions"]


# ------------------------------------------------------------------------- broken files
def _delete_dev(d: Path) -> None:
    (d / "dev.parquet").unlink()


def _empty_train(d: Path) -> None:
    write_questions([], d / "train.parquet")


def _drop_answers(d: Path) -> None:
    table = pq.read_table(d / "train.parquet")
    pq.write_table(table.drop_columns(["answers"]), d / "train.parquet")


def _truncate_test(d: Path) -> None:
    data = (d / "test.parquet").read_bytes()
    (d / "test.parquet").write_bytes(data[: len(data) // 2])


def _random_corpus(d: Path) -> None:
    (d / "corpus.parquet").write_bytes(bytes(random.Random(0).randrange(256) for _ in range(2048)))


def _answers_as_text(d: Path) -> None:
    table = pq.read_table(d / "ood.parquet")
    i = table.schema.get_field_index("answers")
    texts = pa.array([",".join(a) for a in table.column("answers").to_pylist()], pa.string())
    pq.write_table(table.set_column(i, "answers", texts), d / "ood.parquet")


FILE_CORRUPTIONS: list[tuple[str, Callable[[Path], None], str, str, str]] = [
    # (name, damage the processed dir, failed check, offending file, text in its value)
    ("split_file_deleted", _delete_dev, "files.present", "dev.parquet", "not found"),
    ("train_split_empty", _empty_train, "files.split_not_empty", "train.parquet", "0 questions"),
    ("answers_column_dropped", _drop_answers, "files.schema", "train.parquet", "missing column 'answers'"),
    ("answers_column_wrong_type", _answers_as_text, "files.schema", "ood.parquet", "'answers'"),
    ("truncated_parquet", _truncate_test, "files.readable", "test.parquet", "not a readable parquet"),
    ("random_bytes_parquet", _random_corpus, "files.readable", "corpus.parquet", "not a readable parquet"),
]


@pytest.mark.parametrize(
    ("damage", "check", "bad_file", "bad_value"),
    [c[1:] for c in FILE_CORRUPTIONS],
    ids=[c[0] for c in FILE_CORRUPTIONS],
)
def test_broken_processed_files_fail_by_name_without_marker(tmp_path, capsys, damage, check, bad_file, bad_value):
    raw = {
        "data": {"processed_dir": str(tmp_path / "processed"), "hops": {"min": 1, "max": 4}},
        "validate": {"report_dir": str(tmp_path / "validation")},
    }
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    cfg = load_config(params)
    write(cfg, clean_dataset())
    assert main(["--params", str(params), "validate"]) == 0  # a passing run leaves a marker ...
    assert marker(cfg).exists()

    damage(Path(cfg.data.processed_dir))
    capsys.readouterr()
    assert main(["--params", str(params), "validate"]) == 1  # a named failure, not a traceback
    err = capsys.readouterr().err
    assert err.startswith("agentr1 validate: dataset validation failed") and "Traceback" not in err
    line = next(ln for ln in err.splitlines() if ln.strip().startswith(f"- {check} "))
    assert "1 unexpected" in line
    example = next(ln for ln in err.splitlines() if f"id={bad_file!r}" in ln)
    assert bad_value in example
    assert "fix:" in err and "agentr1 prepare" in err
    assert not marker(cfg).exists()  # ... which the failing run removed
    with pytest.raises(StageError, match="not passed validation"):
        require_validated(cfg)
    s = summary(cfg)
    assert s["success"] is False and s["expectations"][check]["success"] is False


def test_required_splits_option_allows_an_empty_split(tmp_path):
    cfg = make_cfg(tmp_path, required_splits=["train", "dev", "test"])
    ds = clean_dataset()
    ds.questions["ood"] = []
    write(cfg, ds)
    assert stages.run("validate", cfg, None).success
    with pytest.raises(StageError, match=r"files\.split_not_empty") as info:
        stages.run("validate", make_cfg(tmp_path), None)
    assert "id='ood.parquet'" in str(info.value)


def test_stale_marker_removed_even_when_nothing_can_be_read(tmp_path):
    cfg = make_cfg(tmp_path)
    write(cfg, clean_dataset())
    stages.run("validate", cfg, None)
    for f in Path(cfg.data.processed_dir).iterdir():
        f.unlink()
    with pytest.raises(StageError, match="agentr1 prepare"):
        stages.run("validate", cfg, None)
    assert not marker(cfg).exists()
    assert not [p.name for p in Path(cfg.validate_.report_dir).iterdir() if ".tmp-" in p.name]


def test_leak_in_comparison_fails_when_type_not_allowed(tmp_path):
    cfg = make_cfg(tmp_path, leak_allowed_types=[])
    write(cfg, clean_dataset())
    with pytest.raises(StageError, match=r"questions\.no_answer_leak") as info:
        stages.run("validate", cfg, None)
    assert "id='t2' value='Alva Brenn'" in str(info.value)


def test_an_answer_no_train_text_holds_fails_naming_its_words(tmp_path):
    ds = clean_dataset()
    ds.questions["test"][0]["answers"] = ["Zerav Quolm"]  # "Quolm": in no train question, answer or cited passage
    cfg = make_cfg(tmp_path)
    write(cfg, ds)
    with pytest.raises(StageError, match=r"questions\.answers_copyable") as info:
        stages.run("validate", cfg, None)
    assert "id='e1' value='Quolm'" in str(info.value) and not marker(cfg).exists()
    summary = json.loads((Path(cfg.validate_.report_dir) / "summary.json").read_text())
    assert summary["copy_cap"]["test"] == {"questions": 1, "copyable": 0, "share": 0.0, "missing_words": ["Quolm"]}
    assert summary["copy_cap"]["dev"]["share"] == 1.0
    off = make_cfg(tmp_path, copy_sources=[])  # sources whose answers need not be copyable
    stages.run("validate", off, None)
    assert marker(off).exists()


def test_the_synthetic_world_copy_cap_is_one(tmp_path):
    """Every held-out answer of a generated world is made of words the train split's texts hold."""
    from agentr1.config import SyntheticConfig
    from agentr1.data.synthetic import generate_world

    world = SyntheticConfig(
        families={"train": 150, "dev": 15, "test": 15, "ood": 15},
        questions={"train": 1000, "dev": 60, "test": 60, "ood": 60},
    )
    cfg = make_cfg(tmp_path)
    write(cfg, generate_world(world, 0))
    stages.run("validate", cfg, None)
    summary = json.loads((Path(cfg.validate_.report_dir) / "summary.json").read_text())
    assert {s: summary["copy_cap"][s]["share"] for s in ("dev", "test", "ood")} == {"dev": 1.0, "test": 1.0, "ood": 1.0}


# ----------------------------------------------------- leak tolerance on real-format samples
# Measured on the fixtures with the default leak_allowed_types (comparison types exempt): an answer
# appears verbatim in the question of 5 of the 300 HotpotQA (all "bridge") and 2 of the 100
# MuSiQue questions.
HOTPOT_LEAKS = sorted(
    [
        "hotpotqa:5adfdc7d55429942ec259b64",
        "hotpotqa:5ab2123155429970612095b9",
        "hotpotqa:5ab45a0b5542991779162c7e",
        "hotpotqa:5a8a793555429930ff3c0de7",
        "hotpotqa:5a8f43795542997ba9cb3204",
    ]
)


def real_fixture_cfg(tmp_path: Path, fixtures: Path, **validate: Any):
    raw = {
        "data": {
            "source": "real",
            "processed_dir": str(tmp_path / "processed"),
            "hops": {"min": 1, "max": 4},
            "real": {
                "sources": [
                    {"dataset": "hotpotqa", "path": str(fixtures / "hotpotqa" / "dev.jsonl")},  # split: auto
                    {"dataset": "musique", "path": str(fixtures / "musique" / "musique_qa_100.json"), "split": "ood"},
                ]
            },
        },
        "validate": {"report_dir": str(tmp_path / "validation"), **validate},
    }
    cfg = config_from_dict(raw)
    write(cfg, load_sources(cfg.data.real, cfg.seed))
    return cfg


def test_leak_tolerance_on_real_hotpotqa_and_musique(tmp_path, shared_fixtures):
    # no tolerance (the default): HotpotQA fails, the message names count, share and ids; MuSiQue's
    # two former "leaks" were answer aliases ("star", "lead"), which no longer count (issue 40)
    cfg = real_fixture_cfg(tmp_path, shared_fixtures, max_examples=3)
    with pytest.raises(StageError, match=r"questions\.no_answer_leak") as info:
        stages.run("validate", cfg, None)
    msg = str(info.value)
    assert "source 'hotpotqa': 5 of 300 questions (1.67%) leak an answer, above validate.max_leak_share 0.00%" in msg
    assert "source 'musique'" not in msg
    assert f"ids: {', '.join(HOTPOT_LEAKS[:3])} (+2 more)" in msg
    assert not marker(cfg).exists()
    leaks = summary(cfg)["leaks"]
    assert leaks["max_share"] == 0.0
    assert leaks["sources"]["hotpotqa"] == {
        "questions": 300,
        "leaking": 5,
        "share": 5 / 300,
        "within_tolerance": False,
        "ids": HOTPOT_LEAKS[:3],
    }
    assert leaks["sources"]["musique"] == {
        "questions": 100,
        "leaking": 0,
        "share": 0.0,
        "within_tolerance": True,
        "ids": [],
    }

    # a tolerance just below HotpotQA's share still fails it, and names only its ids
    cfg = real_fixture_cfg(tmp_path, shared_fixtures, max_leak_share=0.016)
    with pytest.raises(StageError) as info:
        stages.run("validate", cfg, None)
    msg = str(info.value)
    assert "questions.no_answer_leak [expect_column_values_to_be_null column 'leaked_answer']: 5 unexpected" in msg
    assert "source 'hotpotqa': 5 of 300" in msg and "source 'musique'" not in msg

    # a tolerance covering it: passes, and the report still lists every leaking id
    cfg = real_fixture_cfg(tmp_path, shared_fixtures, max_leak_share=0.02, max_examples=10)
    report = stages.run("validate", cfg, None)
    assert report.success and marker(cfg).exists()
    leaks = summary(cfg)["leaks"]["sources"]
    assert leaks["hotpotqa"]["ids"] == HOTPOT_LEAKS and leaks["hotpotqa"]["within_tolerance"] is True
    metrics = summary_metrics(summary(cfg))
    assert metrics["validate/leaks.hotpotqa.share"] == pytest.approx(5 / 300)
    assert metrics["validate/leaks.musique.count"] == 0
    # changing the tolerance invalidates the marker
    stricter = real_fixture_cfg(tmp_path, shared_fixtures, max_leak_share=0.018, max_examples=10)
    with pytest.raises(StageError, match="different"):
        require_validated(stricter)


def test_nulls_and_empty_corpus_fail_with_readable_examples(tmp_path):
    cfg = make_cfg(tmp_path)
    ds = clean_dataset()
    ds.questions["dev"][0]["hops"] = None
    ds.questions["test"][0]["id"] = None
    ds.corpus = []
    write(cfg, ds)
    with pytest.raises(StageError) as info:
        stages.run("validate", cfg, None)
    msg = str(info.value)
    assert "questions.hops_not_null" in msg and "id='d1' value=None" in msg
    assert "questions.id_not_null" in msg and "id=None value=None" in msg
    assert "corpus.not_empty [expect_table_row_count_to_be_between]: failed" in msg and "observed value=0" in msg
    assert "questions.supporting_ids_in_corpus [expect_column_values_to_be_null column 'missing_supporting_ids']" in msg
    assert summary(cfg)["expectations"]["questions.supporting_ids_in_corpus"]["unexpected_count"] == 5
    gx_text = (Path(cfg.validate_.report_dir) / GX_RESULT_FILE).read_text()
    assert "NaN" not in gx_text and json.loads(gx_text)["corpus"]["success"] is False
    assert not marker(cfg).exists()


def test_examples_limited_by_max_examples(tmp_path):
    cfg = make_cfg(tmp_path, max_examples=2)
    ds = clean_dataset()
    for split in ("train", "dev", "test", "ood"):
        for q in ds.questions[split]:
            q["hops"] = 9
    write(cfg, ds)
    with pytest.raises(StageError) as info:
        stages.run("validate", cfg, None)
    msg = str(info.value)
    assert "questions.hops_in_range [expect_column_values_to_be_between column 'hops']: 5 unexpected" in msg
    assert msg.count("value=9") == 2


# ------------------------------------------------------------------------------ the marker
def test_require_validated_refuses_changed_data_and_params(tmp_path):
    cfg = make_cfg(tmp_path)
    ds = clean_dataset()
    write(cfg, ds)
    stages.run("validate", cfg, None)
    require_validated(cfg)

    changed = copy.deepcopy(ds)
    changed.questions["dev"][0]["answers"] = ["Orsk", "Orsk town"]
    write(cfg, changed)
    with pytest.raises(StageError, match=r"changed since it was validated \(changed: dev.parquet\).*agentr1 validate"):
        require_validated(cfg)

    write(cfg, ds)  # identical bytes again -> accepted
    require_validated(cfg)
    narrower = make_cfg(tmp_path)
    narrower.data.hops.max = 2
    with pytest.raises(StageError, match="different data.hops"):
        require_validated(narrower)


def test_missing_processed_data_is_a_stage_error(tmp_path):
    cfg = make_cfg(tmp_path)
    with pytest.raises(StageError, match="agentr1 prepare"):
        stages.run("validate", cfg, None)
    assert not marker(cfg).exists()


# ----------------------------------------------------------------------------------- the CLI
def test_cli_validate_exit_codes_and_stderr(tmp_path, capsys):
    raw = {
        "data": {"processed_dir": str(tmp_path / "processed"), "hops": {"min": 1, "max": 4}},
        "validate": {"report_dir": str(tmp_path / "validation"), "max_examples": 3},
    }
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    cfg = load_config(params)
    ds = clean_dataset()
    write(cfg, ds)
    assert main(["--params", str(params), "validate"]) == 0
    assert marker(cfg).exists()

    _missing_passage(ds)
    write(cfg, ds)
    capsys.readouterr()
    assert main(["--params", str(params), "validate"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentr1 validate: dataset validation failed")
    assert "questions.supporting_ids_in_corpus" in err and "id='t1' value='p404'" in err
    assert not marker(cfg).exists()
