"""ToolEnv and SearchTool: execution, batching, every malformed case, episode ends, truncation."""

from __future__ import annotations

import pytest

from agentr1.config import config_from_dict
from agentr1.env import ToolEnv
from agentr1.env.base import ToolResult
from agentr1.env.search import NO_RESULTS, SearchTool, format_passages
from agentr1.env.tools import Tool, make_tool
from agentr1.registry import TOOLS
from agentr1.retrieval.base import Hit, Retriever, RetrieverError

PASSAGES = [
    Hit("p-ada", "Ada Vell", "Ada Vell is a painter born in Korvash.", 0.0),
    Hit("p-korvash", "Korvash", "Korvash is a city on the Lume river, founded by Oren Tal.", 0.0),
    Hit("p-oren", "Oren Tal", "Oren Tal was a merchant. " + "He traded salt. " * 40, 0.0),
]


class FakeRetriever(Retriever):
    """In-memory retriever: hits ranked by the number of query words in title + text."""

    def __init__(self, passages=PASSAGES, fail: BaseException | None = None):
        self.passages = list(passages)
        self.fail = fail
        self.calls: list[tuple[list[str], int]] = []

    def search(self, queries, k):
        self.calls.append((list(queries), k))
        if self.fail is not None:
            raise self.fail
        out = []
        for q in queries:
            words = set(q.lower().split())
            scored = [(sum(w in (h.title + " " + h.text).lower() for w in words), h) for h in self.passages]
            hits = [Hit(h.id, h.title, h.text, float(s)) for s, h in sorted(scored, key=lambda x: -x[0]) if s > 0]
            out.append(hits[:k])
        return out


def make_env(fmt="tags", retriever=None, **kw) -> ToolEnv:
    retriever = retriever or FakeRetriever()
    tool = SearchTool(retriever, topk=2, max_query_chars=40, passage_max_chars=80)
    kw.setdefault("max_turns", 4)
    return ToolEnv([tool], fmt, **kw)


def call(env: ToolEnv, query) -> str:
    return env.fmt.render_call("search", {"query": query})


# ----------------------------------------------------------------------------------- search tool
def test_search_tool_formats_passages_and_ids():
    tool = SearchTool(FakeRetriever(), topk=2, max_query_chars=40, passage_max_chars=30)
    res = tool.execute({"query": "Korvash city"})
    assert res.success
    assert res.content.splitlines()[0] == "Doc 1 (Title: Korvash) Korvash is a city on the Lume…"
    assert res.content.splitlines()[1].startswith("Doc 2 (Title: Ada Vell) ")
    assert res.metadata == {"ids": ["p-korvash", "p-ada"], "query": "Korvash city"}
    assert format_passages([], 10) == NO_RESULTS
    assert tool.execute({"query": "zzz"}).content == NO_RESULTS


def test_search_tool_batches_one_retriever_call():
    r = FakeRetriever()
    tool = SearchTool(r, topk=1)
    res = tool.execute_batch([{"query": "Ada"}, {"query": ""}, {"query": "Oren"}, {"q": 1}])
    assert [x.success for x in res] == [True, False, True, False]
    assert r.calls == [(["Ada", "Oren"], 1)]
    assert "empty query" in res[1].content and "needs a 'query'" in res[3].content


@pytest.mark.parametrize(
    "args, message",
    [
        ({"query": ""}, "empty query"),
        ({"query": "   "}, "empty query"),
        ({"query": "x" * 41}, "query too long: 41 characters (limit 40)"),
        ({"query": 7}, "must be a string"),
        ({}, "needs a 'query'"),
    ],
)
def test_search_tool_bad_queries_fail_cleanly(args, message):
    r = FakeRetriever()
    res = SearchTool(r, max_query_chars=40).execute(args)
    assert not res.success and message in res.content
    assert r.calls == []


@pytest.mark.parametrize(
    "exc, message",
    [
        (RetrieverError("server at 127.0.0.1:8765 is down"), "retriever error: server at 127.0.0.1:8765 is down"),
        (TimeoutError("read timed out after 10 s"), "retriever timed out: read timed out after 10 s"),
        (KeyError("index"), "retriever raised KeyError"),
    ],
)
def test_search_tool_retriever_failures(exc, message):
    res = SearchTool(FakeRetriever(fail=exc)).execute_batch([{"query": "a"}, {"query": "b"}])
    assert [x.success for x in res] == [False, False]
    assert all(message in x.content for x in res)


def test_search_tool_malformed_retriever_answer():
    class Short(Retriever):
        def search(self, queries, k):
            return [[]]

    res = SearchTool(Short()).execute_batch([{"query": "a"}, {"query": "b"}])
    assert not any(x.success for x in res) and "1 result lists for 2 queries" in res[0].content


def test_tool_validate_and_registry():
    tool = SearchTool(FakeRetriever(), max_query_chars=40)
    assert tool.validate({"query": "ok"}) == []
    assert tool.validate({"query": ""}) == ["argument 'query': must not be empty or blank"]
    assert tool.validate({"query": "x" * 41}) == ["argument 'query': too long: 41 characters (limit 40)"]
    assert tool.validate({"query": 3}) == ["argument 'query': must be of type string, got int"]
    assert tool.validate({}) == ["'query' is required"]
    assert "Additional properties" in tool.validate({"query": "a", "extra": 1})[0]
    assert tool.validate(["q"]) == ["arguments must be a JSON object, got list"]
    tool.max_arg_chars = 20
    assert tool.validate({"query": "x" * 30})[0].startswith("arguments too large")
    assert TOOLS.names() == ["calculator", "search"]
    assert isinstance(make_tool("search", retriever=FakeRetriever()), SearchTool)
    with pytest.raises(ValueError, match="unknown tool 'nope'"):
        make_tool("nope")


# ---------------------------------------------------------------------------------- environment
@pytest.mark.parametrize("fmt", ["tags", "hermes"])
def test_successful_search_and_support_flag(fmt):
    env = make_env(fmt)
    text = "<think>find Ada</think>" + call(env, "Ada Vell")
    res = env.step(text, 0, supporting_ids=["p-ada"])
    assert (res.done, res.reason, res.answer) == (False, "continue", None)
    assert "Doc 1 (Title: Ada Vell) Ada Vell is a painter born in Korvash." in res.observation
    assert res.observation.startswith(env.fmt.render_observation([""])[:3])
    [out] = res.outcomes
    assert (out.name, out.valid, out.success, out.found_support, out.error) == ("search", True, True, True, None)
    assert out.end == len(text)
    assert not env.step(text, 0, supporting_ids=["p-other"]).outcomes[0].found_support
    assert not env.step(text, 0).outcomes[0].found_support


@pytest.mark.parametrize("fmt", ["tags", "hermes"])
def test_answer_no_call_and_max_turns(fmt):
    env = make_env(fmt, max_turns=3)
    res = env.step("<think>ok</think>" + env.fmt.render_answer(" Korvash "), 1)
    assert (res.done, res.reason, res.answer, res.observation, res.outcomes) == (True, "answer", "Korvash", "", [])
    res = env.step("I think the answer is Korvash.", 0)
    assert (res.done, res.reason, res.answer, res.observation, res.outcomes) == (True, "no_call", None, "", [])
    # last allowed turn: a call is not executed and the episode ends without an observation
    r = FakeRetriever()
    env = make_env(fmt, retriever=r, max_turns=3)
    res = env.step(call(env, "Ada"), 2)
    assert (res.done, res.reason, res.observation) == (True, "max_turns", "")
    [out] = res.outcomes
    assert out.valid and not out.success and out.error == "not executed: turn limit reached"
    assert r.calls == []
    assert env.step("nothing", 2).reason == "max_turns"
    assert env.step(env.fmt.render_answer("X"), 2).reason == "answer"  # answering on the last turn
    assert env.step(call(env, "Ada"), 1).reason == "continue"


def test_step_batch_groups_calls_per_tool():
    r = FakeRetriever()
    env = make_env("hermes", retriever=r, multi_call="all", max_calls_per_turn=2)
    turns = [
        call(env, "Ada") + call(env, "Korvash"),
        env.fmt.render_answer("Korvash"),
        call(env, "Oren"),
        '<tool_call>{"name": "search", "arguments": {"query": ""}}</tool_call>',
    ]
    res = env.step_batch(turns, [0, 1, 0, 0], [["p-korvash"], [], ["p-x"], []])
    assert r.calls == [(["Ada", "Korvash", "Oren"], 2)]  # one retriever call for the batch
    assert [x.reason for x in res] == ["continue", "answer", "continue", "continue"]
    assert [o.found_support for o in res[0].outcomes] == [False, True]  # "Ada" does not return p-korvash
    assert res[0].observation.count("<tool_response>") == 2
    assert [o.valid for o in res[3].outcomes] == [False]
    assert "must not be empty or blank" in res[3].observation
    assert env.stop_strings == ["</answer>"]
    assert make_env("hermes").stop_strings == ["</tool_call>", "</answer>"]


def test_multi_call_first_executes_only_the_first():
    r = FakeRetriever()
    env = make_env("tags", retriever=r)
    res = env.step(call(env, "Ada") + call(env, "Oren"), 0)
    assert r.calls == [(["Ada"], 2)] and len(res.outcomes) == 1


def test_calls_over_the_cap_and_before_an_answer():
    r = FakeRetriever()
    env = make_env("tags", retriever=r, multi_call="all", max_calls_per_turn=1)
    res = env.step(call(env, "Ada") + call(env, "Oren"), 0)
    assert r.calls == [(["Ada"], 2)]
    assert [(o.valid, o.success) for o in res.outcomes] == [(True, True), (False, False)]
    assert "Error: not executed: at most 1 calls per turn" in res.observation
    env = make_env("tags", retriever=r, multi_call="all", max_calls_per_turn=3)
    res = env.step(call(env, "Ada") + env.fmt.render_answer("X"), 0)
    assert (res.reason, res.answer) == ("answer", "X")
    assert res.outcomes[0].valid and res.outcomes[0].error == "not executed: the turn gave the final answer"
    assert r.calls == [(["Ada"], 2)]  # nothing new executed


MALFORMED = [
    ("hermes", "<tool_call>{not json}</tool_call>", "invalid JSON"),
    (
        "hermes",
        '<tool_call>{"name": "calculator", "arguments": {"x": "1+1"}}</tool_call>',
        "unknown tool 'calculator'; available tools: search",
    ),
    ("hermes", '<tool_call>{"name": "search", "arguments": {}}</tool_call>', "'query' is required"),
    ("hermes", '<tool_call>{"name": "search", "arguments": {"query": 42}}</tool_call>', "must be of type string"),
    (
        "hermes",
        '<tool_call>{"name": "search", "arguments": {"query": "a", "k": 5}}</tool_call>',
        "Additional properties",
    ),
    (
        "hermes",
        '<tool_call>{"name": "search", "arguments": {"query": "' + "x" * 41 + '"}}</tool_call>',
        "too long: 41 characters",
    ),
    ("hermes", '<tool_call>{"name": "search", "arguments": {"query": " "}}</tool_call>', "must not be empty or blank"),
    ("hermes", '<tool_call>{"name": "search", "arguments": {"query": "Ada"}}', "unclosed <tool_call>"),
    ("tags", "<search></search>", "must not be empty or blank"),
    ("tags", "<search>" + "y" * 41 + "</search>", "too long: 41 characters"),
    ("tags", "<search>Ada Vell", "unclosed <search>"),
    ("tags", "<search>Ada</answer>", "closed by </answer>"),
]


@pytest.mark.parametrize("fmt, text, message", MALFORMED)
def test_malformed_calls_become_error_observations(fmt, text, message):
    r = FakeRetriever()
    env = make_env(fmt, retriever=r)
    res = env.step(text, 0)
    assert (res.done, res.reason) == (False, "continue")
    [out] = res.outcomes
    assert not out.valid and not out.success and message in out.error
    assert out.end == len(text)
    assert "Error: " in res.observation and message in res.observation
    assert r.calls == []


@pytest.mark.parametrize(
    "exc, message",
    [
        (RetrieverError("connection refused"), "retriever error: connection refused"),
        (TimeoutError("slow"), "retriever timed out: slow"),
    ],
)
def test_retriever_failure_is_a_failed_valid_call(exc, message):
    env = make_env("tags", retriever=FakeRetriever(fail=exc))
    res = env.step(call(env, "Ada"), 0, ["p-ada"])
    [out] = res.outcomes
    assert out.valid and not out.success and not out.found_support and message in out.error
    assert "Error: search failed: " + message in res.observation


class _Echo(Tool):
    name = "echo"
    description = "Echo the text back."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    def __init__(self, crash: str = ""):
        self.crash = crash

    def validate(self, args):
        if self.crash == "validate":
            raise RuntimeError("validator bug")
        if self.crash == "missing_dependency":
            raise ModuleNotFoundError("No module named 'jsonschema'")
        return super().validate(args)

    def execute(self, args):
        if self.crash == "execute":
            raise RuntimeError("tool bug")
        if self.crash == "missing_dependency_execute":
            raise ModuleNotFoundError("No module named 'faiss'")
        if self.crash == "wrong":
            return "not a ToolResult"
        return ToolResult(args["text"][::-1], True)


@pytest.mark.parametrize(
    "crash, message",
    [
        ("validate", "validation failed (RuntimeError: validator bug)"),
        ("execute", "echo failed: RuntimeError: tool bug"),
        ("wrong", "returned 1 results"),
    ],
)
def test_misbehaving_tools_never_raise(crash, message):
    env = ToolEnv({"echo": _Echo(crash)}, "tags", max_turns=3)
    res = env.step("<echo>abc</echo>", 0)
    assert res.reason == "continue" and not res.outcomes[0].success
    assert message in res.outcomes[0].error
    ok = ToolEnv([_Echo()], "tags").step("<echo>abc</echo>", 0)
    assert ok.observation == "\n\n<information>cba</information>\n\n" and ok.outcomes[0].success


def test_a_missing_dependency_is_no_silent_invalid_call():
    """A validator that cannot import what it needs (an installation without jsonschema: seen on a
    GPU machine, where every search became an "invalid call" and the runs trained on that) stops
    the step instead of scoring the model's call as malformed."""
    env = ToolEnv({"echo": _Echo("missing_dependency")}, "tags", max_turns=3)
    with pytest.raises(ModuleNotFoundError, match="jsonschema"):
        env.step("<echo>abc</echo>", 0)
    env = ToolEnv({"echo": _Echo("missing_dependency_execute")}, "tags", max_turns=3)
    with pytest.raises(ModuleNotFoundError, match="faiss"):
        env.step("<echo>abc</echo>", 0)


def test_registered_user_tool_works_in_both_formats():
    @TOOLS.register("reverse_test_tool")
    class Reverse(_Echo):
        name = "reverse_test_tool"

    try:
        tool = make_tool("reverse_test_tool")
    finally:
        TOOLS.remove("reverse_test_tool")
    for fmt in ("tags", "hermes"):
        env = ToolEnv([tool], fmt)
        res = env.step(env.fmt.render_call("reverse_test_tool", {"text": "abc"}), 0)
        assert res.outcomes[0].success and "cba" in res.observation


def test_observation_is_truncated_keeping_the_wrappers():
    long = [Hit(f"p{i}", f"T{i}", "word " * 200, 1.0) for i in range(3)]
    env = ToolEnv(
        [SearchTool(FakeRetriever(long), topk=3, passage_max_chars=1000)],
        "tags",
        multi_call="all",
        observation_max_chars=400,
    )
    res = env.step("<search>word</search><search>word</search><search></search>", 0)
    assert len(res.observation) <= 400
    assert res.observation.count("<information>") == 3 and res.observation.count("</information>") == 3
    assert "must not be empty or blank" in res.observation  # the short error block is kept whole
    assert "…" in res.observation


@pytest.mark.parametrize("fmt", ["tags", "hermes"])
@pytest.mark.parametrize("attempts", [4, 30, 57, 200])
def test_many_unexecuted_calls_do_not_crowd_out_the_results(fmt, attempts):
    """Issue 26 item 7: with multi_call all, 'not executed' error blocks shared the observation
    budget with the executed results: at 30 attempts no result text survived the 1,600-character
    cap, at 57+ the observation was cut mid-tag."""
    env = make_env(fmt, multi_call="all", max_calls_per_turn=3, observation_max_chars=1600)
    queries = ["Ada", "Korvash", "Oren"] + ["Ada"] * (attempts - 3)
    res = env.step("".join(call(env, q) for q in queries), 0)
    obs = res.observation
    assert len(obs) <= 1600 and len(res.outcomes) == attempts
    assert [o.success for o in res.outcomes] == [True] * 3 + [False] * (attempts - 3)
    opening, closing = env.fmt.OBS_OPEN, env.fmt.OBS_CLOSE
    assert obs.count(opening) == obs.count(closing) and obs.rstrip().endswith(closing)  # whole blocks only
    first_error = obs.index("Error:")
    for title in ("Ada Vell", "Korvash", "Oren Tal"):  # every executed result, before any error
        assert 0 <= obs.index(f"(Title: {title})") < first_error
    assert f"not executed: at most 3 calls per turn ({attempts - 3} attempts)" in obs or attempts == 4
    assert obs.count("Error:") <= 4  # a bounded tail, however many attempts


def test_a_tiny_observation_budget_keeps_whole_blocks():
    env = make_env("tags", multi_call="all", max_calls_per_turn=3, observation_max_chars=64)
    res = env.step("".join(call(env, q) for q in ["Ada", "Korvash", "Oren", "x", "y"]), 0)
    obs = res.observation
    assert len(obs) <= 64 and obs.count("<information>") == obs.count("</information>") == 1
    assert "Ada" in obs


def test_bad_inputs_to_step_batch_do_not_raise():
    env = make_env("hermes")
    res = env.step_batch([None, "\x00\ud800<tool_call>", ""], [0, 0, 0])  # type: ignore[list-item]
    assert res[0].reason == "continue" and "could not read the turn" in res[0].outcomes[0].error
    assert res[1].reason == "continue" and not res[1].outcomes[0].valid
    assert res[2].reason == "no_call"
    with pytest.raises(ValueError):
        env.step_batch(["a"], [0, 1])


@pytest.mark.parametrize(
    "args, message",
    [
        ((None, [0]), r"turn_texts must be a list"),
        (("<search>a</search>", [0] * 18), r"turn_texts must be a list"),
        ((["<search>a</search>"], None), r"turn_indices must be a list"),
        ((["a", "b"], [0, None]), r"turn_indices\[1\] must be an int >= 0 \(got None\)"),
        ((["a"], [-1]), r"turn_indices\[0\] must be an int >= 0 \(got -1\)"),
        ((["a"], [True]), r"turn_indices\[0\] must be an int >= 0 \(got True\)"),
        (
            (["a", "b"], [0, 0], [["p1"], "p1"]),
            r"supporting_ids\[1\] must be a list of passage ids or None \(got str\)",
        ),
        ((["a"], [0], [3]), r"supporting_ids\[0\] must be a list of passage ids or None \(got int\)"),
        ((["a"], [0], "p1"), r"supporting_ids must be a list"),
    ],
)
def test_step_batch_refuses_malformed_batches_naming_the_index(args, message):
    """The batch's structure is the caller's contract (a ValueError before any tool runs); what a
    model generates never raises (a turn that is not a string is a malformed turn)."""
    retriever = FakeRetriever()
    env = make_env("tags", retriever)
    with pytest.raises(ValueError, match=message):
        env.step_batch(*args)
    assert retriever.calls == []
    res = env.step_batch(["<search>Ada</search>", None], [0, 0], [None, ["p1"]])  # None support = none known
    assert res[0].outcomes[0].success and not res[0].outcomes[0].found_support
    assert "could not read the turn" in res[1].outcomes[0].error


def test_from_config():
    cfg = config_from_dict(
        {"env": {"format": "hermes", "max_turns": 2, "multi_call": "all", "search": {"topk": 1, "max_query_chars": 10}}}
    )
    env = ToolEnv.from_config(cfg.env, FakeRetriever())
    assert env.format == env.fmt.name == "hermes" and env.max_turns == 2 and env.multi_call == "all"
    tool = env.tools["search"]
    assert (tool.topk, tool.max_query_chars) == (1, 10)
    assert '"maxLength": 10' in env.system_prompt()
    with pytest.raises(ValueError, match="needs a retriever"):
        ToolEnv.from_config(cfg.env, None)
    with pytest.raises(ValueError):
        ToolEnv([tool, tool], "tags")
