"""Tool-call formats: round trips, malformed attempts, stop strings, multi-call policy, prompts."""

from __future__ import annotations

import json

import pytest

from agentr1.env.base import ToolResult
from agentr1.env.formats import HermesFormat, TagFormat, get_format, select_calls
from agentr1.env.search import SearchTool
from agentr1.env.tools import Tool
from agentr1.registry import FORMATS
from agentr1.retrieval.base import Hit, Retriever


class _NoRetriever(Retriever):
    def search(self, queries, k):
        return [[Hit("d0", "T", "text", 1.0)] for _ in queries]


def _search_tool() -> SearchTool:
    return SearchTool(_NoRetriever(), topk=2, max_query_chars=64, passage_max_chars=100)


@pytest.fixture(params=["tags", "hermes"])
def fmt(request):
    return get_format(request.param, tools=[_search_tool()])


def test_registry():
    assert FORMATS.names() == ["hermes", "tags"]
    assert isinstance(get_format("tags"), TagFormat)
    assert isinstance(get_format("hermes"), HermesFormat)
    with pytest.raises(ValueError, match="unknown tool-call format 'xml'.*hermes"):
        get_format("xml")


@pytest.mark.parametrize("query", ["who founded Korvash", 'Ada "the" Vell\'s city', "Zoë Ångström 北京"])
def test_call_round_trip(fmt, query):
    prefix = "<think>I need the city.</think>\n"
    call_text = fmt.render_call("search", {"query": query})
    text = prefix + call_text
    parsed = fmt.parse(text)
    assert parsed.errors == [] and parsed.answer is None
    [call] = parsed.calls
    assert call.name == "search" and call.arguments == {"query": query}
    assert (call.start, call.end) == (len(prefix), len(text))
    assert call.raw == call_text == text[call.start : call.end]


def test_answer_round_trip(fmt):
    text = "<think>done</think>" + fmt.render_answer("Korvash")
    parsed = fmt.parse(text)
    assert parsed.answer == "Korvash" and parsed.answer_end == len(text)
    assert parsed.calls == [] and parsed.errors == []


def test_two_calls_keep_their_offsets(fmt):
    a = fmt.render_call("search", {"query": "first"})
    b = fmt.render_call("search", {"query": "second"})
    text = f"{a} then {b}"
    calls = fmt.parse(text).calls
    assert [c.arguments["query"] for c in calls] == ["first", "second"]
    assert [(c.start, c.end) for c in calls] == [(0, len(a)), (len(a) + 6, len(text))]


def test_observation_rendering(fmt):
    obs = fmt.render_observation(["Doc 1 (Title: A) x", "Error: boom"])
    assert "Doc 1 (Title: A) x" in obs and "Error: boom" in obs
    assert obs.count(fmt.OBS_OPEN) == 2 and obs.count(fmt.OBS_CLOSE) == 2
    parsed = fmt.parse(obs)  # an observation never reads as a call
    assert parsed.calls == [] and parsed.errors == [] and parsed.answer is None


def test_tag_format_specifics():
    fmt = get_format("tags", tools=[_search_tool()])
    assert fmt.render_call("search", {"query": "q"}) == "<search>q</search>"
    assert fmt.render_observation(["x"]) == "\n\n<information>x</information>\n\n"
    # content is stripped; the tool's single required string parameter is filled
    [call] = fmt.parse("<search>  padded query \n</search>").calls
    assert call.arguments == {"query": "padded query"}
    # other tags are plain text
    assert fmt.parse("<lookup>x</lookup> <b>bold</b>").calls == []


def test_hermes_format_specifics():
    fmt = get_format("hermes", tools=[_search_tool()])
    text = fmt.render_call("search", {"query": "q"})
    assert text == '<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>'
    assert fmt.render_observation(["x"]) == "\n<tool_response>\nx\n</tool_response>\n"
    # arguments given as a JSON-encoded string are accepted
    [call] = fmt.parse('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"q\\"}"}</tool_call>').calls
    assert call.arguments == {"query": "q"}
    # unknown tool names parse (the environment rejects them)
    [call] = fmt.parse('<tool_call>{"name": "calc", "arguments": {"x": 1}}</tool_call>').calls
    assert call.name == "calc"


@pytest.mark.parametrize(
    "text, message",
    [
        ("<search>no closing tag", "unclosed <search> tag"),
        ("<search>q</answer>", "<search> was closed by </answer>"),
        ("words </search>", "stray </search>"),
        ("<answer>  </answer>", "empty answer"),
        ("<answer>Korvash", "unclosed <answer> tag"),
        ("stray </answer>", "stray </answer>"),
    ],
)
def test_tag_malformed(text, message):
    fmt = get_format("tags", tools=[_search_tool()])
    parsed = fmt.parse(text)
    assert parsed.calls == [] and parsed.answer is None
    [err] = parsed.errors
    assert message in err and "<search>your query</search>" in err  # says how to fix it
    assert parsed.error_ends == [len(text)]


@pytest.mark.parametrize(
    "body, message",
    [
        ("{bad json", "invalid JSON"),
        ('{"name": "search", "arguments": {"query": "q"}', "invalid JSON"),
        ('["search", {"query": "q"}]', "must hold a JSON object"),
        ('{"arguments": {"query": "q"}}', "has no 'name'"),
        ('{"name": "", "arguments": {}}', "has no 'name'"),
        ('{"name": "search"}', "has no 'arguments'"),
        ('{"name": "search", "arguments": ["q"]}', "must be a JSON object, got list"),
        ('{"name": "search", "arguments": "not json"}', "unparsable string"),
        ("[" * 5000 + "]" * 5000, "invalid JSON"),
    ],
)
def test_hermes_malformed(body, message):
    fmt = get_format("hermes", tools=[_search_tool()])
    text = f"<tool_call>{body}</tool_call>"
    parsed = fmt.parse(text)
    assert parsed.calls == []
    [err] = parsed.errors
    assert message in err
    assert parsed.error_ends == [len(text)]


def test_hermes_unclosed_and_mismatched():
    fmt = get_format("hermes", tools=[_search_tool()])
    parsed = fmt.parse('<tool_call>{"name": "search", "arguments": {"query": "q"}}')
    assert parsed.calls == [] and "unclosed <tool_call>" in parsed.errors[0]
    parsed = fmt.parse('<tool_call>{"name": "search"}<answer>x</answer>')
    assert parsed.answer is None and "closed by </answer>" in parsed.errors[0]


def test_stop_strings():
    assert get_format("tags", tools=[_search_tool()]).stop_strings == ["</search>", "</answer>"]
    assert get_format("hermes", tools=[_search_tool()]).stop_strings == ["</tool_call>", "</answer>"]


def _first_stop_cut(text: str, stops: list[str]) -> str:
    hits = [(text.find(s), s) for s in stops if s in text]
    if not hits:
        return text
    pos, s = min(hits)
    return text[: pos + len(s)]


@pytest.mark.parametrize(
    "tail",
    [
        "<search>q1</search> more text <search>q2</search>",
        "<answer>A</answer><search>q</search>",
        "<search>q</answer> junk",
        "oops </search><answer>A</answer>",
        '<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call><answer>B</answer>',
        "<tool_call>{bad</tool_call> <tool_call>",
    ],
)
def test_text_cut_after_first_stop_string_parses_the_same(fmt, tail):
    text = "<think>plan</think>" + tail
    cut = _first_stop_cut(text, fmt.stop_strings)
    full = select_calls(fmt.parse(text), "first", 3)
    short = select_calls(fmt.parse(cut), "first", 3)
    assert full == short
    assert len(full.calls) + len(full.errors) + (full.answer is not None) <= 1


def test_multi_call_first_and_all(fmt):
    calls = [fmt.render_call("search", {"query": f"q{i}"}) for i in range(4)]
    text = " ".join(calls)
    first = select_calls(fmt.parse(text), "first", 3)
    assert [c.arguments["query"] for c in first.calls] == ["q0"] and first.errors == []
    every = select_calls(fmt.parse(text), "all", 3)
    assert [c.arguments["query"] for c in every.calls] == ["q0", "q1", "q2"]
    assert every.errors == ["not executed: at most 3 calls per turn"]
    assert every.error_ends == [len(text)]


def test_multi_call_all_stops_at_answer(fmt):
    text = (
        fmt.render_call("search", {"query": "a"}) + fmt.render_answer("X") + fmt.render_call("search", {"query": "b"})
    )
    sel = select_calls(fmt.parse(text), "all", 3)
    assert [c.arguments["query"] for c in sel.calls] == ["a"] and sel.answer == "X"
    sel = select_calls(fmt.parse(text), "first", 3)
    assert sel.answer is None and len(sel.calls) == 1
    with pytest.raises(ValueError):
        select_calls(fmt.parse(text), "some", 3)


def test_system_prompts_describe_tools_and_answer():
    tool = _search_tool()
    for name in ("tags", "hermes"):
        fmt = get_format(name, tools=[tool])
        prompt = fmt.system_prompt()
        assert json.dumps(tool.parameters) in prompt
        assert tool.description in prompt
        assert "<answer>" in prompt and "</answer>" in prompt
        assert "<think>" not in prompt
        assert "<think>" in get_format(name, tools=[tool], think=True).system_prompt()
        assert fmt.user_prompt("  Where was Ada born? ") == "Question: Where was Ada born?"
    assert "<search>query</search>" in get_format("tags", tools=[tool]).system_prompt()
    assert "<tools>" in get_format("hermes", tools=[tool]).system_prompt()


class _TwoArgs(Tool):
    name = "two"
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a", "b"],
    }

    def execute(self, args):
        return ToolResult("", True)


def test_tag_format_takes_json_arguments_for_other_schemas():
    fmt = get_format("tags", tools=[_TwoArgs(), _search_tool()])
    text = fmt.render_call("two", {"a": "x", "b": "y"})
    assert text == '<two>{"a": "x", "b": "y"}</two>'
    assert fmt.parse(text).calls[0].arguments == {"a": "x", "b": "y"}
    assert "- <two>JSON arguments object</two>:" in fmt.system_prompt()
    assert "write <two>{...}</two> to call two, <search>your query</search> to search or <answer>" in fmt.usage_hint()
    for bad, message in (("<two>[1]</two>", "got list"), ("<two>a=x</two>", "JSONDecodeError")):
        [err] = fmt.parse(bad).errors
        assert "<two> must hold a JSON object of arguments" in err and message in err
    assert get_format("hermes", tools=[_TwoArgs()]).parse(
        '<tool_call>{"name": "two", "arguments": {"a": "x", "b": "y"}}</tool_call>'
    ).calls[0].arguments == {"a": "x", "b": "y"}
