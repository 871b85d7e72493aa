"""Calculator tasks (``data.task: tools``): GSM8K loader, numeric answers, arithmetic and multi-tool
questions, their validation, the oracle's calculator turn and per-tool call counts."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
from simpleeval import simple_eval

from agentr1.config import SPLITS, ConfigError, SyntheticConfig, ToolQuestionsConfig, config_from_dict
from agentr1.data import synthetic
from agentr1.data.answers import normalize_answer, normalize_number
from agentr1.data.gsm8k import load_gsm8k
from agentr1.data.multihop import load_file
from agentr1.data.questions import Registry
from agentr1.data.realformat import RealDataError
from agentr1.data.schema import read_table, write_questions
from agentr1.data.toolquestions import MAX_AMOUNT, arithmetic_problem, tool_questions
from agentr1.data.validation import tool_question_problem
from agentr1.data.world import build_world, corpus_rows
from agentr1.env.base import CallOutcome
from agentr1.env.rewards import exact_match
from agentr1.eval.metrics import tool_usage
from agentr1.eval.quick import calls_by_tool
from agentr1.rollout.oracle import plan_episode

SMALL = SyntheticConfig(
    families={"train": 40, "dev": 6, "test": 6, "ood": 6}, questions={"train": 120, "dev": 12, "test": 12, "ood": 12}
)
TOOLS = ToolQuestionsConfig(
    arithmetic={"train": 60, "dev": 8, "test": 8, "ood": 0}, multi_tool={"train": 60, "dev": 8, "test": 8, "ood": 0}
)


# ------------------------------------------------------------------------------------ GSM8K
def test_gsm8k_fixtures_load_and_final_answers_parse(shared_fixtures):
    answers = []
    for name in ("train", "test"):
        path = shared_fixtures / "gsm8k" / f"{name}.first200.jsonl"
        raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        loaded = load_file("gsm8k", path)
        assert len(loaded.questions) == len(raw) == 200 and not loaded.skipped
        for q, rec in zip(loaded.questions, raw):
            assert q["question"] == rec["question"].strip() and q["type"] == "gsm8k" and q["hops"] == 0
            assert q["supporting_ids"] == [] and q["source"] == "gsm8k"
            final = rec["answer"].rsplit("####", 1)[1].strip()
            assert q["answers"] == [final.replace(",", "")] and normalize_number(q["answers"][0]) == q["answers"][0]
            answers.append(final)
    assert len(answers) == 400
    assert [a for a in answers if "," in a] == ["2,125"]  # the one thousands comma parses to 2125


def _jsonl(tmp_path, rows):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gsm8k_loader_normalizes_skips_repeats_and_names_bad_records(tmp_path):
    rows = [
        {"question": "How much?", "answer": "3 * 4 = <<3*4=12>>12\n#### $1,000.00"},
        {"question": "How much?", "answer": "#### 5"},
    ]
    loaded = load_file("gsm8k", _jsonl(tmp_path, rows))
    assert [q["answers"] for q in loaded.questions] == [["1000"]]
    assert loaded.skipped == {"repeated question text": 1}
    with pytest.raises(RealDataError, match=r"line 1.*no final '#### N' line"):
        load_file("gsm8k", _jsonl(tmp_path, [{"question": "q", "answer": "12"}]))
    with pytest.raises(RealDataError, match=r"'twelve' after '####' is not a number"):
        load_gsm8k([("rec 3", {"question": "q", "answer": "#### twelve"})])
    with pytest.raises(RealDataError, match=r"rec 4: required field 'answer' is missing"):
        load_gsm8k([("rec 4", {"question": "q"})])


# ------------------------------------------------------------------------------- numbers
@pytest.mark.parametrize(
    "text,want",
    [
        ("$2,125", "2125"),
        ("2125.0", "2125"),
        ("- 5", "-5"),
        ("1,000.50", "1000.5"),
        ("007", "7"),
        ("-0", "0"),
        (" 42 ", "42"),
        ("$ 3", "3"),
    ],
)
def test_normalize_number(text, want):
    assert normalize_number(text) == want == normalize_answer(text)


@pytest.mark.parametrize("text", ["12,34", "1e3", "3.", "1923 AD", "Ada Vell", "yes", "", "$", "1,2345"])
def test_non_numbers_take_the_text_path(text):
    assert normalize_number(text) is None


def test_runaway_digits_take_the_text_path_without_crashing():
    huge = "9" * 5000  # past Python's 4,300-digit int/str conversion limit
    assert normalize_number(huge) is None and normalize_answer(huge) == huge
    assert exact_match(huge, [huge]) == 1.0 and exact_match(huge, ["9"]) == 0.0


def test_numeric_em_and_names_unchanged():
    assert exact_match("$2,125", ["2125"]) == exact_match("2125.0", "2,125") == 1.0
    assert exact_match("-5", ["5"]) == 0.0 and exact_match("1923", ["1923"]) == 1.0
    assert normalize_answer("The Ada-Vell") == "adavell" and normalize_answer("1923 AD") == "1923 ad"


# ------------------------------------------------------------------------------- questions
def _generate(tools=TOOLS, seed=3):
    return synthetic.generate(SMALL, seed, tools)


def test_tool_questions_leave_the_world_and_multihop_draws_unchanged():
    w0, q0 = _generate(None)
    w1, q1 = _generate()
    assert corpus_rows(w0, 2, 3) == corpus_rows(w1, 2, 3)
    for split in SPLITS:
        base = sorted((q.question, q.answers[0]) for q in q0[split])
        assert sorted((q.question, q.answers[0]) for q in q1[split] if q.expression is None) == base
        assert all(q.expression is None and "expression" not in q.to_row() for q in q0[split])
        n_tools = getattr(TOOLS.arithmetic, split) + getattr(TOOLS.multi_tool, split)
        assert len(q1[split]) == len(q0[split]) + n_tools
    assert _generate()[1]["test"][0].to_row() == q1["test"][0].to_row()  # deterministic


def test_tool_questions_expressions_hops_and_hygiene():
    w, qs = _generate()
    texts = [q.question for split in SPLITS for q in qs[split]]
    assert len(texts) == len(set(texts))
    passages = {r["id"]: r["text"] for r in corpus_rows(w, 2, 3)}
    for split in SPLITS:
        tools = [q for q in qs[split] if q.expression is not None]
        assert sum(q.type == "arithmetic" for q in tools) == getattr(TOOLS.arithmetic, split)
        for q in tools:
            value = simple_eval(q.expression)
            assert value == int(q.answers[0]) > 0 and q.answers[0] not in q.question
            assert q.hops == len(q.supporting) == (0 if q.type == "arithmetic" else 2)
            if q.type == "multi_tool":  # each year the expression uses is stated by a supporting passage
                later, earlier = q.expression.split(" - ")
                stated = " ".join(passages[e.pid] for e in q.supporting)
                assert f"in {later}" in stated and f"in {earlier}" in stated
                assert all(e.split == split for e in q.supporting)


def test_arithmetic_problem_operations_and_bounds():
    w = build_world(SMALL, 0)
    person = w.of("train", "person")[0]
    rng = random.Random(0)
    for n_ops in (2, 3, 4):
        for _ in range(50):
            q = arithmetic_problem(person, n_ops, rng, TOOLS)
            assert sum(q.expression.count(f" {op} ") for op in "+-*/") == n_ops
            assert q.expression.count(" * ") <= 1 and q.expression.count(" / ") <= 1
            assert simple_eval(q.expression) == int(q.answers[0]) and 0 < int(q.answers[0]) <= MAX_AMOUNT
            assert q.question.startswith(f"{person.name} has ") and q.template == f"arithmetic/{n_ops}ops"


def test_too_small_world_names_the_params():
    cfg = ToolQuestionsConfig(multi_tool={"train": 0, "dev": 0, "test": 5000, "ood": 0})
    with pytest.raises(ValueError, match=r"data.tool_questions.*multi_tool.test=5000.*families.test"):
        tool_questions(build_world(SMALL, 0), cfg, "test", 0, Registry())


def test_expression_column_is_optional_on_disk(tmp_path):
    _, qs = _generate()
    plain = [q.to_row() for q in qs["ood"]]
    mixed = [q.to_row() for q in qs["test"]]
    write_questions(plain, tmp_path / "a.parquet")
    write_questions(mixed, tmp_path / "b.parquet")
    assert "expression" not in read_table(tmp_path / "a.parquet")[0]
    back = read_table(tmp_path / "b.parquet")
    assert [r.get("expression") for r in back] == [r.get("expression") for r in mixed]


# ------------------------------------------------------------------------------- validation
def test_tool_question_problem():
    ok = ("multi_tool", 2, ["a", "b"], ["42"], "1974 - 1932")
    assert tool_question_problem(*ok) is None
    assert tool_question_problem("arithmetic", 0, [], ["516"], "577 * 4 - 1082 - 525 - 185") is None
    assert tool_question_problem("gsm8k", 0, [], ["2125"], None) is None
    assert tool_question_problem("bridge", 2, ["a", "b"], ["Ada Vell"], None) is None
    assert "= 42, answer 41" in tool_question_problem("multi_tool", 2, ["a", "b"], ["41"], "1974 - 1932")
    assert "not a number" in tool_question_problem("gsm8k", 0, [], ["twelve"], None)
    assert tool_question_problem("arithmetic", 0, [], ["3"], None) == "no expression"
    assert "does not evaluate" in tool_question_problem("arithmetic", 0, [], ["3"], "1 +")
    assert "hops = supporting ids = 2" in tool_question_problem("multi_tool", 1, ["a"], ["42"], "1974 - 1932")


def test_config_task_tools_is_synthetic_only_and_hash_neutral_by_default():
    default = config_from_dict({})
    assert "task" not in default.model_dump()["data"] and "tool_questions" not in default.model_dump()["data"]
    tools = config_from_dict({"data": {"task": "tools", "hops": {"min": 0}}})
    assert tools.model_dump()["data"]["task"] == "tools" and tools.section_hash("data") != default.section_hash("data")
    with pytest.raises(ConfigError, match="data.source: synthetic"):
        config_from_dict(
            {
                "data": {
                    "task": "tools",
                    "source": "real",
                    "real": {"sources": [{"dataset": "gsm8k", "path": "x.jsonl"}]},
                }
            }
        )


# ------------------------------------------------------------------------------- oracle
class _Fmt:
    def render_call(self, name, args):
        return f"<{name}>{json.dumps(args)}</{name}>"

    def render_answer(self, answer):
        return f"<answer>{answer}</answer>"


def test_oracle_scripts_search_then_calculator_then_answer():
    titles = {"p1": "Tuzuta Motors", "p2": "Rinse Grotask", "p3": "Other Name"}
    multi = {"id": "m", "answers": ["42"], "supporting_ids": ["p1", "p2"], "expression": "1974 - 1932"}
    plan = plan_episode(multi, titles, _Fmt(), 0.0, 0, 5, lead_space=True)
    assert plan.turns == (
        '<search>{"query": " Tuzuta Motors"}</search>',
        '<search>{"query": " Rinse Grotask"}</search>',
        '<calculator>{"expression": " 1974 - 1932"}</calculator>',
        "<answer> 42</answer>",
    )
    arith = {"id": "a", "answers": ["516"], "supporting_ids": [], "expression": "577 * 4 - 2"}
    assert plan_episode(arith, titles, _Fmt(), 1.0, 0, 2).turns == (
        '<calculator>{"expression": "577 * 4 - 2"}</calculator>',
        "<answer>516</answer>",
    )
    with pytest.raises(ValueError, match="1 calculation"):
        plan_episode(multi, titles, _Fmt(), 0.0, 0, 3)
    kinds = {plan_episode({**multi, "id": f"m{i}"}, titles, _Fmt(), 1.0, 0, 5).kind for i in range(40)}
    assert kinds == {"wrong_query", "redundant_query", "early_answer"}
    early = next(
        p
        for i in range(40)
        if (p := plan_episode({**multi, "id": f"m{i}"}, titles, _Fmt(), 1.0, 0, 5)).kind == "early_answer"
    )
    assert not any("calculator" in t for t in early.turns)
    assert plan_episode({**multi, "id": "m0"}, titles, _Fmt(), 1.0, 0, 4).kind == "early_answer"  # no room for more


# ------------------------------------------------------------------------------- counts
def test_calls_by_tool_and_tool_usage():
    def traj(*names_ok):
        return SimpleNamespace(outcomes=[[CallOutcome(n, True, ok, 1)] for n, ok in names_ok])

    t1 = traj(("search", True), ("search", False), ("calculator", True), ("nope", False))
    t2 = traj(("calculator", True))
    rows = [{"calls_by_tool": calls_by_tool(t, ["search", "calculator"])} for t in (t1, t2)]
    assert rows[0]["calls_by_tool"] == {"search": {"calls": 2, "ok": 1}, "calculator": {"calls": 1, "ok": 1}}
    usage = tool_usage(rows)
    assert usage["search"] == {"calls": 1.0, "success_rate": 0.5, "episodes": 0.5}
    assert usage["calculator"] == {"calls": 1.0, "success_rate": 1.0, "episodes": 1.0}
    assert tool_usage([{"em": 1.0}]) == {}


# ------------------------------------------------------------------------------- report
def test_report_tools_section_per_type_cis_calls_and_rl_vs_cold_start():
    from agentr1.report.inputs import Evaluation, Question
    from agentr1.report.rows import Row
    from agentr1.report.tools import tools_section

    types = ["arithmetic"] * 40 + ["multi_tool"] * 40 + ["bridge"] * 20

    def row(label, kind, scores):
        qs = {f"q{i}": Question("test", f"q{i}", t, 0, s) for i, (t, s) in enumerate(zip(types, scores))}
        return Row(label, label, kind, [label], None, {"test": {k: q.score for k, q in qs.items()}}, {"test": qs})

    cold = row("cold_start", "baseline", [0.0] * 100)
    rl = row("grpo", "rl", [1.0] * 40 + [0.0] * 60)
    by_tool = {"calculator": {"calls": 1.0, "success_rate": 1.0, "episodes": 1.0}}
    evals = {
        r.label: Evaluation(
            r.label,
            r.kind,
            metrics={
                "splits": {
                    "test": {"by_type": {"arithmetic": {"by_tool": by_tool}, "multi_tool": {"by_tool": by_tool}}}
                }
            },
        )
        for r in (cold, rl)
    }
    data, md = tools_section([cold, rl], evals, ["test"], "em", 200, 0.95, 0, min_seeds=1)
    assert data["groups"] == ["test/arithmetic", "test/multi_tool"]
    cell = data["policies"]["grpo"]["test/arithmetic"]
    assert cell["mean"] == 1.0 and cell["n"] == 40 and cell["by_tool"]["calculator"]["calls"] == 1.0
    assert data["vs_cold_start"]["grpo"]["test/arithmetic"]["beyond_noise"] is True
    assert data["vs_cold_start"]["grpo"]["test/multi_tool"]["beyond_noise"] is False
    assert "calculator 1.00 (ok 1.00)" in md and "beyond noise" in md
    one_seed, _ = tools_section([cold, rl], evals, ["test"], "em", 200, 0.95, 0)  # report.min_seeds 3: one run
    assert one_seed["vs_cold_start"]["grpo"]["test/arithmetic"]["verdict"] == "not judged"
    only_bridge = row("cold_start", "baseline", [0.0] * 100)
    only_bridge.questions["test"] = {k: Question("test", k, "bridge", 2, 0.0) for k in only_bridge.scores["test"]}
    assert tools_section([only_bridge], evals, ["test"], "em", 200, 0.95, 0) is None


# ------------------------------------------------------------------------------- profile
def test_tools_profile_merges_to_the_tool_task(repo_root):
    from agentr1.profiles import load_profile
    from agentr1.registry import TOOLS

    if "calculator" not in TOOLS.names():
        pytest.skip("the calculator tool is not registered on this branch (it comes with the tool branch)")
    c = load_profile("tools", repo_root / "params.yaml").cfg
    assert (c.data.task, c.data.hops.min, list(c.env.tools)) == ("tools", 0, ["search", "calculator"])
    assert c.data.synthetic.questions.test == 0 and c.data.tool_questions.arithmetic.test == 100
    assert sorted(c.runs) == ["grpo", "ppo"] and c.model.kind == "scratch"


@pytest.mark.parametrize(
    "expression, answer",
    [
        ("1/10", "0.1"),
        ("7/10", "0.7"),
        ("0.1+0.2", "0.3"),
        ("3*1.1", "3.3"),
        ("1/3", "0.3333333333"),
        ("2**10", "1024"),
    ],
)
def test_tool_question_answers_compare_as_the_calculator_writes_them(expression, answer):
    """Issue 26 item 5: validation refused correct tool questions (1/10 = 0.1 failed as
    0.1000000000000000055511151231 != 0.1): it now compares the calculator's printed result,
    normalized as the reward normalizes."""
    assert tool_question_problem("arithmetic", 0, [], [answer], expression) is None
    assert tool_question_problem("arithmetic", 0, [], ["0.2"], expression) is not None
