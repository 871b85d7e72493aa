"""Answer metrics, the outcome reward (format + answer) and process rewards, hand-computed."""

from __future__ import annotations

import pytest

from agentr1.config import RewardConfig
from agentr1.env import SearchTool, ToolEnv
from agentr1.env.base import CallOutcome
from agentr1.env.rewards import (
    episode_format,
    episode_format_ok,
    exact_match,
    f1_score,
    format_score,
    normalize_answer,
    outcome_reward,
    process_rewards,
    substring_exact_match,
)
from agentr1.registry import METRICS
from agentr1.retrieval.base import Hit, Retriever


def ok(end=10, support=False):
    return CallOutcome("search", True, True, end, support)


def failed(end=10):
    return CallOutcome("search", True, False, end, False, "search failed: retriever error")


def invalid(end=10):
    return CallOutcome(None, False, False, end, False, "invalid JSON")


def test_normalize_answer():
    assert normalize_answer("  The  Lume-River, Korvash! ") == "lumeriver korvash"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("Theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("") == ""


def test_exact_and_substring_match():
    assert exact_match("the Korvash.", ["korvash"]) == 1.0
    assert exact_match("Korvash city", ["Korvash"]) == 0.0
    assert exact_match("Lume", ["Korvash", "lume"]) == 1.0  # max over golds
    assert exact_match("Korvash", "Korvash") == 1.0  # a single gold string
    assert substring_exact_match("It is Korvash city", ["korvash"]) == 1.0
    assert substring_exact_match("Korv", ["Korvash"]) == 0.0
    assert substring_exact_match("anything", ["", "the"]) == 0.0  # blank golds never match


def test_f1():
    # pred tokens {ada, vell, painter}, gold {ada, vell}: P = 2/3, R = 1, F1 = 2*(2/3)/(5/3) = 0.8
    assert f1_score("Ada Vell, the painter", ["Ada Vell"]) == pytest.approx(0.8)
    # pred {oren}, gold {oren, tal}: P = 1, R = 1/2, F1 = 2/3; max with a second gold that matches
    assert f1_score("Oren", ["Oren Tal"]) == pytest.approx(2 / 3)
    assert f1_score("Oren", ["Oren Tal", "oren"]) == 1.0
    assert f1_score("yes", ["yes"]) == 1.0
    # HotpotQA: when either side is yes/no/noanswer, anything but an exact match scores 0
    assert f1_score("yes it is", ["yes"]) == 0.0
    assert f1_score("no", ["no way"]) == 0.0
    assert f1_score("", ["x"]) == 0.0


def test_metric_registry():
    assert METRICS.names() == ["em", "f1", "subem"]
    assert METRICS.get("f1") is f1_score and METRICS.get("em") is exact_match

    @METRICS.register("first_letter_test")
    def first_letter(pred, golds):
        return float(any(pred[:1].lower() == g[:1].lower() for g in golds))

    try:
        cfg = RewardConfig(metric="first_letter_test")  # a registered metric is a valid reward.metric
        assert outcome_reward("kappa", ["Korvash"], 1.0, cfg) == 1.0
    finally:
        METRICS.remove("first_letter_test")
    with pytest.raises(ValueError, match="unknown answer metric 'bleu'"):
        outcome_reward("x", ["x"], 1.0, RewardConfig(), metric="bleu")


# --------------------------------------------------------------------------- format score cases
@pytest.mark.parametrize(
    "outcomes, answered, attempts, valid, f, is_ok",
    [
        ([[ok(), ok()], [ok()]], True, 3, 3, 1.0, True),  # v = 1, a = 1
        ([], True, 0, 0, 1.0, True),  # no call: v = 1 (vacuous), a = 1
        ([[ok()], [failed()]], True, 2, 2, 1.0, True),  # an execution failure is not a format error
        ([[ok()], [invalid()]], True, 2, 1, 0.75, False),  # v = 1/2: 0.5*0.5 + 0.5
        ([[ok()], [invalid(), invalid()], [ok()]], True, 4, 2, 0.75, False),
        ([[ok()], [ok()]], False, 2, 2, 0.5, False),  # no answer: a = 0
        ([[invalid()], [ok(), ok()]], False, 3, 2, 1 / 3, False),  # 0.5 * 2/3
        ([[invalid()]], False, 1, 0, 0.0, False),
        ([], False, 0, 0, 0.5, False),
    ],
)
def test_format_score(outcomes, answered, attempts, valid, f, is_ok):
    rep = episode_format(outcomes, answered)
    assert (rep.attempts, rep.valid, rep.answered, rep.ok) == (attempts, valid, answered, is_ok)
    assert rep.score == pytest.approx(f) == format_score(outcomes, answered)
    assert episode_format_ok(outcomes, answered) is is_ok


@pytest.mark.parametrize(
    "answer, golds, f, metric, lam, expected",
    [
        ("Korvash", ["korvash"], 1.0, "em", 0.0, 1.0),  # valid format, right: R = m = 1
        ("Lume", ["korvash"], 1.0, "em", 0.0, 0.0),  # valid format, wrong: R = m = 0
        ("the city of Korvash", ["Korvash"], 1.0, "em", 0.0, 0.0),
        ("the city of Korvash", ["Korvash"], 1.0, "subem", 0.0, 1.0),
        ("Ada Vell, the painter", ["Ada Vell"], 1.0, "f1", 0.0, 0.8),
        ("Korvash", ["korvash"], 0.75, "em", 0.0, -0.25),  # invalid format: R = f - 1, answer ignored
        ("Lume", ["korvash"], 0.75, "em", 0.0, -0.25),
        (None, ["korvash"], 0.5, "em", 0.0, -0.5),  # no answer
        (None, ["korvash"], 0.0, "em", 0.0, -1.0),
        ("Lume", ["korvash"], 1.0, "em", 0.2, 0.2),  # lambda: valid & wrong = lambda
        ("Korvash", ["korvash"], 1.0, "em", 0.2, 1.0),  # valid & right = 1
        ("Ada Vell, the painter", ["Ada Vell"], 1.0, "f1", 0.2, 0.2 + 0.8 * 0.8),
        ("Korvash", ["korvash"], 0.75, "em", 0.2, -0.25),  # lambda does not touch invalid formats
    ],
)
def test_outcome_reward(answer, golds, f, metric, lam, expected):
    cfg = RewardConfig(metric=metric, format_score=lam)
    assert outcome_reward(answer, golds, f, cfg) == pytest.approx(expected)


def test_outcome_reward_rejects_inconsistent_input():
    with pytest.raises(ValueError, match="requires a final answer"):
        outcome_reward(None, ["x"], 1.0, RewardConfig())


# -------------------------------------------------------------------------------- process rewards
def test_process_rewards_values_and_placement():
    cfg = RewardConfig(process={"enabled": True, "invalid_call": -0.1, "failed_call": -0.05, "successful_search": 0.1})
    turns = [
        [ok(20, support=True)],  # turn 0: search returned a supporting passage
        [invalid(35), ok(12, support=False)],  # turn 1: (listed out of order on purpose)
        [failed(18)],  # turn 2: valid, retriever failed
        [],
    ]
    assert process_rewards(turns, cfg) == [(0, 20, 0.1), (1, 35, -0.1), (2, 18, -0.05)]
    assert process_rewards(turns, RewardConfig()) == []  # disabled by default


def test_rewards_from_a_real_episode():
    """ToolEnv outcomes -> format score, outcome and process rewards, placed on the closing char."""

    class R(Retriever):
        def search(self, queries, k):
            return [[Hit("p-ada" if "Ada" in q else "p-x", "T", "Ada Vell was born in Korvash.", 1.0)] for q in queries]

    env = ToolEnv([SearchTool(R())], "tags", max_turns=4)
    turns = [
        "<think>who</think><search>Ada Vell</search>",
        "<search>Korvash",  # unclosed (e.g. cut by max tokens)
        "<search>Lume river</search>",
        "<answer>Korvash</answer>",
    ]
    outcomes, answer = [], None
    for t, text in enumerate(turns):
        res = env.step(text, t, ["p-ada"])
        outcomes.append(res.outcomes)
        answer = res.answer
    assert answer == "Korvash"
    rep = episode_format(outcomes, answered=True)
    assert (rep.attempts, rep.valid, rep.score, rep.ok) == (3, 2, pytest.approx(0.5 * 2 / 3 + 0.5), False)
    cfg = RewardConfig(process={"enabled": True})
    assert outcome_reward(answer, ["korvash"], rep.score, cfg) == pytest.approx(rep.score - 1)
    placed = process_rewards(outcomes, cfg)
    assert placed == [(0, len(turns[0]), 0.1), (1, len(turns[1]), -0.1)]
    for t, end, _ in placed:
        assert end <= len(turns[t]) and turns[t][:end].endswith(("</search>", "Korvash"))


def test_gold_that_normalizes_to_nothing_never_matches():
    # "?" and "the" normalize to "": such a gold must not reward an empty (or article-only) answer
    assert normalize_answer("?") == "" and normalize_answer("The") == ""
    for pred in ("the", "", "?", "a an"):
        assert exact_match(pred, ["?"]) == 0.0
        assert exact_match(pred, "the") == 0.0
        assert f1_score(pred, ["?"]) == 0.0
        assert substring_exact_match(pred, ["?"]) == 0.0
    assert outcome_reward("", ["?"], 1.0, RewardConfig()) == 0.0
    # a blank gold next to a real one changes nothing for the real one
    assert exact_match("Korvash", ["?", "korvash"]) == 1.0
    assert f1_score("Ada Vell", ["", "Ada Vell"]) == 1.0
    assert exact_match("the", ["?", "korvash"]) == 0.0
