"""Fuzz: thousands of random / garbled turns through ToolEnv — nothing escapes, every result is a
parsed call, an answer, an error observation, or a documented episode end (no_call, max_turns) —
and every episode they make up scores (``score_episode``, as the trainer does) to a finite reward."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentr1.config import RewardConfig
from agentr1.env import SearchTool, StepResult, ToolEnv, select_calls
from agentr1.env.rewards import score_episode
from agentr1.retrieval.base import Hit, Retriever, RetrieverError
from agentr1.rollout import Trajectory

FORMATS = ("tags", "hermes")
POLICIES = ("first", "all")
N_TURNS_PER_CASE = 512  # 4 cases (2 formats x 2 policies) = 2,048 generated turns, 1,024 per format
BATCH = 16
MAX_TURNS = 3
OBS_MAX = 200
GOLDS = [["Korvash"], ["yes"], ["Ada Vell", "Ada"], ["the"], ["北京 Zoë"], [""], []]
REWARDS = [
    RewardConfig(metric="em"),
    RewardConfig(metric="subem", format_score=0.1, process={"enabled": True}),
    RewardConfig(
        metric="f1",
        format_score=1.0,
        # the ends of the documented range (-1..1; +-1e300 is refused by the config, issue 48 item 9)
        process={"enabled": True, "invalid_call": -1.0, "failed_call": 1.0, "successful_search": 1e-300},
    ),
]


class FlakyRetriever(Retriever):
    """Deterministic passages; every 7th batch raises (alternating RetrieverError/TimeoutError)."""

    def __init__(self):
        self.n = 0

    def search(self, queries, k):
        self.n += 1
        if self.n % 7 == 0:
            raise (RetrieverError("index offline") if self.n % 2 else TimeoutError("no answer in 10 s"))
        return [
            [
                Hit(f"p{(len(q) + j) % 5}", f"Title {j}", f"passage {j} about {q[:20]} " * 3, 1.0 / (j + 1))
                for j in range(k)
            ]
            for q in queries
        ]


FRAGMENTS = [
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<information>",
    "</information>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "{",
    "}",
    "[",
    "]",
    '"',
    ":",
    ",",
    '"name"',
    '"arguments"',
    '"search"',
    '"query"',
    "null",
    "true",
    "1e999",
    "\\",
    "\\u00e9",
    "\n",
    " ",
    "Ada Vell",
    "Korvash",
    "北京",
    "Zoë",
    "🙂",
    "\x00",
    "\u202e",
    "\ud800",
    "<",
    ">",
    "/",
    "</",
    "x" * 300,
    '{"name": "search", "arguments": {"query": "Ada"}}',
    '{"name": "search", "arguments": {}}',
    '{"name": "calc", "arguments": {"q": 1}}',
    '{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}',
]


def random_turn(rng: random.Random, env: ToolEnv) -> str:
    """Mix of valid calls/answers, tag and JSON fragments, unicode and random characters."""
    parts = []
    for _ in range(rng.randint(0, 8)):
        r = rng.random()
        if r < 0.2:
            q = rng.choice(["Ada", "", " ", "Korvash river", "x" * 300, "Zoë 北京 🙂", 'a"b'])
            parts.append(env.fmt.render_call("search", {"query": q}))
        elif r < 0.3:
            parts.append(env.fmt.render_answer(rng.choice(["Korvash", "", "  ", "yes"])))
        elif r < 0.8:
            parts.append(rng.choice(FRAGMENTS))
        else:
            parts.append("".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(1, 12))))
    text = "".join(parts)
    if parts and rng.random() < 0.3:  # cut anywhere, like a max-token truncation
        text = text[: rng.randint(0, len(text))]
    return text


def check_result(env: ToolEnv, text: str, turn_index: int, res: StepResult) -> str:
    """Classify one result and check its invariants; returns the category."""
    assert isinstance(res, StepResult)
    for o in res.outcomes:
        assert 0 <= o.end <= len(text)
        assert o.success <= o.valid  # success implies valid
        assert o.success or (isinstance(o.error, str) and o.error)
        assert o.found_support <= o.success
    if res.reason == "answer":
        assert res.done and res.observation == "" and isinstance(res.answer, str) and res.answer.strip()
        return "answer"
    assert res.answer is None
    if res.reason == "max_turns":
        assert res.done and res.observation == "" and turn_index >= MAX_TURNS - 1
        assert not any(o.success for o in res.outcomes)
        return "max_turns"
    if res.reason == "no_call":
        assert res.done and res.observation == "" and res.outcomes == []
        return "no_call"
    assert res.reason == "continue" and not res.done
    assert res.outcomes and 0 < len(res.observation) <= OBS_MAX
    if any(o.success for o in res.outcomes):
        return "call"
    assert "Error" in res.observation
    return "error"


def episode(turns: list[tuple[str, StepResult]], golds: list[str]) -> Trajectory:
    """The trajectory the rollout engine would build from these turns (one token per character:
    each turn's text, then its observation with action_mask 0)."""
    t = Trajectory(qid="q", question="?", golds=golds, prompt_ids=[0])
    for text, res in turns:
        start = len(t.response_ids)
        t.response_ids += [1] * len(text)
        t.action_mask += [1] * len(text)
        t.turn_spans.append((start, len(t.response_ids)))
        t.turn_texts.append(text)
        t.turn_char_ends.append(list(range(1, len(text) + 1)))
        t.outcomes.append(list(res.outcomes))
        if res.answer is not None:
            t.answer = res.answer
        t.reason = res.reason
        if not res.done:
            t.response_ids += [2] * len(res.observation)
            t.action_mask += [0] * len(res.observation)
            t.observations.append(res.observation)
    t.logprobs = [0.0] * len(t.response_ids)
    t.check()
    return t


def check_scores(turns: list[tuple[str, StepResult]], rng: random.Random) -> None:
    """The trainer's scoring of the episode: a finite reward in [-1, 1], finite process rewards on
    policy tokens."""
    traj = episode(turns, rng.choice(GOLDS))
    for cfg in REWARDS:
        score = score_episode(traj, cfg)
        assert math.isfinite(score.reward) and -1.0 <= score.reward <= 1.0, (score, turns)
        for pos, value in score.process:
            assert math.isfinite(value) and 0 <= pos < len(traj.response_ids) and traj.action_mask[pos] == 1


def test_fuzz_budget():
    assert N_TURNS_PER_CASE * len(POLICIES) >= 1000  # per format
    assert N_TURNS_PER_CASE * len(POLICIES) * len(FORMATS) >= 2000


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("multi_call", POLICIES)
def test_fuzz_generated_turns(fmt, multi_call):
    rng = random.Random(f"{fmt}-{multi_call}-1234")
    env = ToolEnv(
        [SearchTool(FlakyRetriever(), topk=2, max_query_chars=64)],
        fmt,
        max_turns=MAX_TURNS,
        multi_call=multi_call,
        max_calls_per_turn=3,
        observation_max_chars=OBS_MAX,
    )
    seen: dict[str, int] = {}
    open_episodes: list[list[tuple[str, StepResult]]] = [[] for _ in range(BATCH)]  # one per batch slot
    n_episodes = 0
    for _ in range(N_TURNS_PER_CASE // BATCH):
        texts = [random_turn(rng, env) for _ in range(BATCH)]
        idx = [rng.choice([0, 0, 0, 1, 1, MAX_TURNS - 1, MAX_TURNS]) for _ in texts]
        support = [[f"p{rng.randrange(5)}"] for _ in texts]
        results = env.step_batch(texts, idx, support)
        assert len(results) == BATCH
        for slot, (text, i, res) in enumerate(zip(texts, idx, results)):
            cat = check_result(env, text, i, res)
            seen[cat] = seen.get(cat, 0) + 1
            open_episodes[slot].append((text, res))
            if res.done or len(open_episodes[slot]) == MAX_TURNS:  # an episode ends (or is cut, as max_length)
                check_scores(open_episodes[slot], rng)
                open_episodes[slot], n_episodes = [], n_episodes + 1
            if multi_call == "first":
                assert len(res.outcomes) <= 1
                # parsing is unchanged when the text is cut right after its first stop string
                ends = [text.find(s) + len(s) for s in env.stop_strings if s in text]
                cut = text[: min(ends)] if ends else text
                assert select_calls(env.fmt.parse(cut), "first", 3) == select_calls(env.fmt.parse(text), "first", 3)
            for c in env.fmt.parse(text).calls:
                assert text[c.start : c.end] == c.raw and any(c.raw.endswith(s) for s in env.fmt.call_stop_strings)
    for turns in open_episodes:
        if turns:
            check_scores(turns, rng)
            n_episodes += 1
    assert sum(seen.values()) == N_TURNS_PER_CASE
    assert set(seen) == {"answer", "max_turns", "no_call", "call", "error"}, seen  # every path exercised
    assert n_episodes >= N_TURNS_PER_CASE // MAX_TURNS


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    text=st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=12).map("".join),
    turn_index=st.integers(0, MAX_TURNS),
    fmt=st.sampled_from(["tags", "hermes"]),
)
def test_fuzz_hypothesis(text, turn_index, fmt):
    env = ToolEnv([SearchTool(FlakyRetriever(), topk=2)], fmt, max_turns=MAX_TURNS, observation_max_chars=OBS_MAX)
    res = env.step(text, turn_index, ["p1"])
    check_result(env, text, turn_index, res)
    check_scores([(text, res)], random.Random(repr(text)))
