"""The calculator tool, several tools in one environment, per-tool options and process rewards,
a toy third tool added by one file plus config, and the calculator fuzz (bench/calculator_fuzz.py)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

from agentr1.config import ConfigError, RewardConfig, config_from_dict
from agentr1.env import CalculatorTool, SearchTool, ToolEnv, format_number
from agentr1.env.rewards import process_rewards
from agentr1.registry import TOOLS, tool_options
from agentr1.retrieval.base import Hit, Retriever

ROOT = Path(__file__).resolve().parents[1]


class _OneHit(Retriever):
    def search(self, queries, k):
        return [[Hit("p1", "Ada Vell", f"Ada Vell owns {len(q)} boats.", 1.0)] for q in queries]


def _env(fmt: str, **kw) -> ToolEnv:
    return ToolEnv([SearchTool(_OneHit(), topk=1), CalculatorTool(**kw)], fmt, multi_call="all")


# ------------------------------------------------------------------------------ the evaluator
@pytest.mark.parametrize(
    "expression, text",
    [
        ("2 * (3 + 4)", "14"),
        ("6 / 3", "2"),
        ("10 / 4", "2.5"),
        ("1 / 3", "0.3333333333"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("2 ** -3", "0.125"),
        ("0.1 + 0.2", "0.3"),
        ("1_000 * 3", "3000"),
        ("1e3 / 8", "125"),
        ("- - 5", "5"),
        ("(1.5 + 2.25) * 4", "15"),
        ("10 ** 15", "1000000000000000"),
        ("1 / 7 * 1e-6", "1.428571429e-07"),
        ("-0.0", "0"),
    ],
)
def test_values_and_result_text(expression, text):
    res = CalculatorTool().execute({"expression": expression})
    assert res.success and res.content == text, res.content
    assert res.metadata["expression"] == expression.strip()
    assert format_number(res.metadata["value"]) == text


def test_result_text_rule():
    assert format_number(12345678901234567890) == "12345678901234567890"  # ints are exact
    assert format_number(2.0**52) == "4503599627370496" and format_number(2.0**53) == "9.007199255e+15"
    assert format_number(2 / 3, 4) == "0.6667"


@pytest.mark.parametrize(
    "expression, message",
    [
        ("x + 1", "use * to multiply"),
        ("2 ^ 3", "use ** for powers"),
        ("1,000", "thousands separators"),
        ("١ + ١", "write numbers with the digits 0-9"),
        ("sqrt(2)", "names, functions and units"),
        ("e", "Name is not supported"),
        ("1 .e", "Attribute is not supported"),
        ("1 < 2", "'<' (U+003C) is not allowed"),
        ("(1 + 2", "not a valid arithmetic expression"),
        ("1 +* 2", "not a valid arithmetic expression"),
        ("   ", "must not be empty or blank"),
        ("1" * 201, "too long: 201 characters (limit 200)"),
    ],
)
def test_outside_the_grammar_is_an_invalid_call(expression, message):
    tool = CalculatorTool()
    problems = tool.validate({"expression": expression})
    assert problems and message in problems[0], problems
    res = tool.execute({"expression": expression})  # a direct caller gets a failed result, never an exception
    assert not res.success and res.content.startswith("calculator failed: ")


@pytest.mark.parametrize(
    "expression, message",
    [
        ("1 / 0", "division by zero"),
        ("5 % (2 - 2)", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 ** 65", "exponent too large: 65 (limit 64)"),
        ("9 ** 9 ** 9", "exponent too large"),
        ("10 ** 16", "exceeds the calculator's limit of 1e+15"),
        ("99999999 * 99999999", "exceeds"),
        ("1e999", "not a finite number"),
        ("(-8) ** 0.5", "not a real number"),
        ("1e-300 ** -64", "exceeds"),
    ],
)
def test_failed_arithmetic_is_a_failed_call(expression, message):
    tool = CalculatorTool()
    assert tool.validate({"expression": expression}) == []
    res = tool.execute({"expression": expression})
    assert not res.success and message in res.content, res.content


def test_limits_come_from_the_options():
    tool = CalculatorTool(max_chars=5, max_exponent=3, max_magnitude=100, significant_digits=3)
    assert tool.execute({"expression": "2**3"}).content == "8"
    assert "exponent too large" in tool.execute({"expression": "2**4"}).content
    assert "limit of 100" in tool.execute({"expression": "11*11"}).content
    assert tool.execute({"expression": "1/3"}).content == "0.333"
    assert "too long" in tool.validate({"expression": "1+2+34"})[0]
    with pytest.raises(ValueError, match="max_exponent"):
        CalculatorTool(max_exponent=0)


# ------------------------------------------------------------------- two tools, both formats
@pytest.mark.parametrize("fmt", ["tags", "hermes"])
def test_search_and_calculator_in_one_environment(fmt):
    env = _env(fmt)
    calc = env.fmt.render_call("calculator", {"expression": "12 * (3 + 4)"})
    assert calc == (
        "<calculate>12 * (3 + 4)</calculate>"
        if fmt == "tags"
        else '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * (3 + 4)"}}\n</tool_call>'
    )
    text = (
        env.fmt.render_call("search", {"query": "Ada Vell"})
        + calc
        + env.fmt.render_call("calculator", {"expression": "1/0"})
    )
    res = env.step(text, 0, ["p1"])
    assert [(o.name, o.valid, o.success, o.found_support) for o in res.outcomes] == [
        ("search", True, True, True),
        ("calculator", True, True, False),
        ("calculator", True, False, False),
    ]
    assert (
        env.fmt.render_observation(
            ["Doc 1 (Title: Ada Vell) Ada Vell owns 8 boats.", "84", "Error: calculator failed: division by zero"]
        )
        == res.observation
    )
    assert env.fmt.stop_strings == (
        ["</calculate>", "</search>", "</answer>"] if fmt == "tags" else ["</tool_call>", "</answer>"]
    )
    prompt = env.system_prompt()
    assert "calculator" in prompt and "search" in prompt and "Evaluate an arithmetic expression" in prompt
    if fmt == "tags":
        assert prompt.startswith(
            "You answer questions by searching for the facts you need and calculating with the calculator."
        )
        assert "- <calculate>expression</calculate>: Evaluate" in prompt
        assert env.fmt.usage_hint() == (
            "write <search>your query</search> to search, <calculate>2 * (3 + 4)</calculate> "
            "to calculate or <answer>...</answer> to answer"
        )
        assert env.fmt.parse("<calculator>1</calculator>").calls == []  # the tag is <calculate>


def test_search_only_prompt_and_hint_are_unchanged():
    fmt = ToolEnv([SearchTool(_OneHit(), topk=1)], "tags").fmt
    assert fmt.usage_hint() == "write <search>your query</search> to search or <answer>...</answer> to answer"
    assert fmt.system_prompt().startswith(
        "You answer questions by searching for the facts you need.\n"
        "To call a tool, write its name as a tag around its argument, e.g. "
        "<search>your query</search>. "
    )


def test_invalid_failed_and_successful_calculator_rewards():
    env = _env("tags")
    turns = [
        "<calculate>2 +* 3</calculate>",
        "<calculate>1/0</calculate>",
        "<calculate>2*3</calculate>",
        "<search>Ada</search>",
    ]
    outcomes = [r.outcomes for r in env.step_batch(turns, [0] * 4, [["p1"]] * 4)]
    cfg = RewardConfig(process={"enabled": True, "successful_calculator": 0.05})
    ends = [len(t) for t in turns]
    assert process_rewards(outcomes, cfg) == [
        (0, ends[0], -0.1),
        (1, ends[1], -0.05),
        (2, ends[2], 0.05),
        (3, ends[3], 0.1),
    ]
    assert process_rewards(outcomes, RewardConfig(process={"enabled": True}))[2:] == [(3, ends[3], 0.1)]  # unset: 0


# ---------------------------------------------------------------------------- configuration
def test_options_and_rewards_are_validated_against_the_registry():
    cfg = config_from_dict(
        {
            "env": {"tools": ["search", "calculator"], "calculator": {"max_chars": 50}},
            "reward": {"process": {"successful_calculator": 0.05}},
        }
    )
    assert cfg.env.calculator.max_chars == 50 and cfg.env.search.topk == 1  # an enabled tool gets its defaults
    env = ToolEnv.from_config(cfg.env, _OneHit())
    assert list(env.tools) == ["search", "calculator"] and env.tools["calculator"].max_chars == 50
    assert "calculator" not in config_from_dict({}).env.model_dump()  # not enabled, not given: absent
    assert tool_options("calculator") is CalculatorTool.options and tool_options("search") is SearchTool.options
    for raw, message in [
        ({"env": {"calculator": {"max_char": 5}}}, "env.calculator.max_char: Extra inputs are not permitted"),
        (
            {"env": {"calculator": {"max_chars": 0}}},
            "env.calculator.max_chars: Input should be greater than or equal to 1",
        ),
        (
            {"env": {"calculater": {}}},
            "env.calculater: unknown key (neither an env setting nor a registered tool; tools: calculator, search)",
        ),
        ({"env": {"tools": ["search", "abacus"]}}, "env.tools.1: unknown tool 'abacus'; available: calculator, search"),
        ({"reward": {"process": {"successful_abacus": 1.0}}}, "reward.process.successful_abacus: unknown key"),
        (
            {"reward": {"process": {"successful_calculator": "x"}}},
            "reward.process.successful_calculator: Input should be a valid number",
        ),
        (
            {"reward": {"process": {"successful_calculator": float("nan")}}},
            "reward.process.successful_calculator: Input should be a finite number",
        ),
    ]:
        with pytest.raises(ConfigError) as exc:
            config_from_dict(raw)
        assert message in str(exc.value), str(exc.value)


# -------------------------------------------------------------------- a toy third tool (one file)
@pytest.fixture
def toy_tool():
    """tests/toy_tool.py, imported as a user plug-in is (before the params are loaded)."""
    spec = importlib.util.spec_from_file_location("toy_tool", ROOT / "tests" / "toy_tool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        TOOLS.remove("word_count")


def test_a_third_tool_is_one_file_plus_config(toy_tool):
    """The whole diff that adds the tool: tests/toy_tool.py, plus the config below."""
    cfg = config_from_dict(
        {
            "env": {"tools": ["search", "calculator", "word_count"], "word_count": {"max_words": 3}},
            "reward": {"process": {"enabled": True, "successful_word_count": 0.02}},
        }
    )
    assert cfg.env.word_count.max_words == 3
    with pytest.raises(ConfigError, match="env.word_count.max_word: Extra inputs are not permitted"):
        config_from_dict({"env": {"tools": ["word_count"], "word_count": {"max_word": 3}}})
    for fmt in ("tags", "hermes"):
        cfg.env.format = fmt
        env = ToolEnv.from_config(cfg.env, _OneHit())
        assert env.tools["word_count"].max_words == 3 and "Count the words" in env.system_prompt()
        call = env.fmt.render_call("word_count", {"text": "one two three"})
        assert call.startswith("<count>" if fmt == "tags" else "<tool_call>")
        too_long = env.fmt.render_call("word_count", {"text": "a b c d"})
        res = env.step_batch([call, too_long], [0, 0])
        assert res[0].outcomes[0].success and "3" in res[0].observation
        assert not res[1].outcomes[0].success and "4 words (limit 3)" in res[1].observation
        rewards = process_rewards([res[0].outcomes, res[1].outcomes], cfg.reward)
        assert rewards == [(0, len(call), 0.01), (1, len(too_long), -0.05)]  # its own hook: half of 0.02


# ------------------------------------------------------------------------------- fuzz (>= 1,000)
def _fuzz_cases():
    spec = importlib.util.spec_from_file_location("calculator_fuzz", ROOT / "bench" / "calculator_fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PER_CALL_LIMIT_S = 0.050  # a generous bound; bench/calculator_fuzz.py measures the real times
CODE_EVENTS = ("exec", "import", "open", "os.system", "subprocess.Popen", "os.posix_spawn", "os.exec", "builtins.input")
_events: list[str] = []
_watching = [False]


def _audit(event, args):
    if _watching[0] and event in CODE_EVENTS:
        _events.append(event)


def test_calculator_fuzz_no_exception_no_slow_call_no_code(tmp_path, monkeypatch):
    """Seeded adversarial expressions (huge exponents, deep nesting, names, attributes, lambdas,
    unicode digits, division by zero, ...): every call returns a ToolResult, none takes over
    50 ms, no code runs (no exec/import/open/process audit event, no sentinel file), and the
    same cases through ToolEnv in both formats never raise."""
    fuzz = _fuzz_cases()
    cases = fuzz.adversarial_expressions(seed=0, per_category=100)
    assert len(cases) >= 1000 and len({c for c, _ in cases}) >= 10
    monkeypatch.chdir(tmp_path)
    tool = CalculatorTool()
    fuzz.time_calls(tool, cases[:20])  # warm-up
    if not getattr(sys, "_agentr1_calc_audit", False):
        sys.addaudithook(_audit)  # audit hooks cannot be removed: installed once, gated by _watching
        sys._agentr1_calc_audit = True
    _watching[0] = True
    try:
        rows = fuzz.time_calls(tool, cases)
    finally:
        _watching[0] = False
    assert _events == [], _events
    assert not (tmp_path / fuzz.SENTINEL).exists()
    slow = [(c, e[:40], r["ms"]) for (c, e), r in zip(cases, rows) if r["ms"] > PER_CALL_LIMIT_S * 1000]
    assert slow == []
    for cat in ("attributes", "names", "lambdas_calls_statements"):
        assert not any(r["valid"] for r in rows if r["category"] == cat), cat  # all outside the grammar
    assert not any(r["success"] for r in rows if r["category"] == "division_by_zero")
    assert any(r["success"] for r in rows if r["category"] == "random_arithmetic")
    for fmt in ("tags", "hermes"):
        env = _env(fmt)
        turns = [env.fmt.render_call("calculator", {"expression": e}) for _, e in cases]
        t0 = time.perf_counter()
        results = env.step_batch(turns, [0] * len(turns))
        assert time.perf_counter() - t0 < PER_CALL_LIMIT_S * len(turns)
        assert all(len(r.outcomes) >= 1 and r.reason == "continue" for r in results)
