"""score_episode: every field of one episode's score, by hand, and the callers that build on it."""

from __future__ import annotations

import pytest

from agentr1.config import RewardConfig
from agentr1.env.base import CallOutcome, StepResult
from agentr1.env.rewards import EpisodeScore, score_episode
from agentr1.eval.quick import episode_metrics
from agentr1.rollout import Trajectory
from agentr1.tracking.traces import episode_em
from test_env_fuzz import episode as fuzz_episode

PROCESS = {"enabled": True, "invalid_call": -0.2, "failed_call": -0.1, "successful_search": 0.3}


OBS = "<o>"  # 3 observation tokens after each turn that continues


def episode(turns: list[tuple[str, list[CallOutcome]]], answer: str | None, golds=("Ada Vell",)) -> Trajectory:
    """The trajectory of ``turns`` (one token per character, :func:`test_env_fuzz.episode`); the
    last turn ends the episode with ``answer``."""
    steps = [(text, StepResult(OBS, False, "continue", outcomes=outcomes)) for text, outcomes in turns[:-1]]
    text, outcomes = turns[-1]
    steps.append((text, StepResult("", True, "answer" if answer else "no_call", answer=answer, outcomes=outcomes)))
    return fuzz_episode(steps, list(golds))


TURN0 = "<search>Ada</search><search>Bo"  # a valid search that found support, then an unclosed one
TURN1 = "<search>Korvash</search>"  # valid, but the retriever failed
TURN2 = "<answer>the Ada vell!</answer>"
OUTCOMES = [
    [CallOutcome("search", True, True, 20, True), CallOutcome(None, False, False, len(TURN0), error="unclosed")],
    [CallOutcome("search", True, False, len(TURN1), error="retriever down")],
    [],
]


def test_every_field_by_hand():
    t = episode(list(zip((TURN0, TURN1, TURN2), OUTCOMES)), answer="the Ada vell!")
    s = score_episode(t, RewardConfig(metric="f1", format_score=0.1, process=PROCESS))
    # f = 0.5 * 2/3 + 0.5 * 1 (2 of 3 attempts valid, answered) -> invalid format, R = f - 1
    f = 0.5 * (2 / 3) + 0.5
    turn1_start = len(TURN0) + len(OBS)
    assert s == EpisodeScore(
        reward=f - 1.0,
        em=1.0,
        subem=1.0,
        f1=1.0,
        format_score=f,
        format_ok=False,
        answered=True,
        tool_calls=3,
        valid_calls=2,
        searches_found_support=1,
        process=((19, 0.3), (len(TURN0) - 1, -0.2), (turn1_start + len(TURN1) - 1, -0.1)),
    )
    assert t.response_ids[19] == 1 and TURN0[19] == ">"  # the closing character of the first call
    with pytest.raises(AttributeError):
        s.reward = 1.0  # frozen


def test_valid_format_scores_the_metric_and_no_answer_scores_zero():
    clean = episode(
        [("<search>Ada</search>", [CallOutcome("search", True, True, 20, False)]), (TURN2, [])], "Ada Vell x"
    )
    s = score_episode(clean, RewardConfig(metric="f1", format_score=0.2))
    p, r = 2 / 3, 1.0  # f1 of "ada vell x" against "ada vell"
    assert (s.format_ok, s.format_score, s.em, s.subem) == (True, 1.0, 0.0, 1.0)
    assert s.f1 == pytest.approx(2 * p * r / (p + r)) and s.reward == pytest.approx(0.2 + 0.8 * s.f1)
    assert s.process == () and s.searches_found_support == 0
    none = score_episode(episode([("<think>hm</think>", [])], None), RewardConfig())
    assert (none.reward, none.em, none.f1, none.answered, none.format_score, none.tool_calls) == (
        -0.5,
        0.0,
        0.0,
        False,
        0.5,
        0,
    )


def test_callers_read_the_same_score():
    t = episode(list(zip((TURN0, TURN1, TURN2), OUTCOMES)), answer="Ada Vell")
    cfg = RewardConfig()
    s = score_episode(t, cfg)
    row = episode_metrics(t, cfg)
    assert row == {
        "em": s.em,
        "subem": s.subem,
        "f1": s.f1,
        "format_ok": 0.0,
        "reward": s.reward,
        "tool_calls": 3.0,
        "searches_found_support": 1.0,
        "turns": 3.0,
        "answered": 1.0,
        "reason": "answer",
    }
    assert list(row) == [
        "em",
        "subem",
        "f1",
        "format_ok",
        "reward",
        "tool_calls",
        "searches_found_support",
        "turns",
        "answered",
        "reason",
    ]  # the column order of the committed evaluation files
    assert episode_em(t) == s.em == 1.0
