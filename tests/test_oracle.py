"""The oracle policy: scripts, noise at its seeded rate, and oracle episodes through the real
RolloutEngine + ToolEnv (BM25 over a tiny world) that are token-exact like policy rollouts."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import tiny_world as tw
from agentr1.config import RolloutConfig
from agentr1.env import get_format
from agentr1.env.search import SearchTool
from agentr1.rollout.engine import decode, encode
from agentr1.rollout.oracle import (
    NOISE_KINDS,
    OracleBackend,
    corpus_titles,
    oracle_rollout,
    oracle_texts,
    plan_all,
    plan_episode,
    unique_questions,
)

torch.set_num_threads(1)
TITLES = corpus_titles(tw.corpus())
ROLLOUT = RolloutConfig(max_turn_tokens=64, max_total_tokens=1024, batch_size=4)


def _setup(fmt: str, noise: float = 0.0, seed: int = 0, lead_space: bool = False):
    env = tw.env(fmt)
    qs = unique_questions(tw.questions())
    plans = plan_all(qs, TITLES, env.fmt, noise, seed, env.max_turns, lead_space)
    tok = tw.tokenizer(oracle_texts(qs, env, plans))
    return env, qs, plans, tok


@pytest.mark.parametrize("fmt,lead_space", [("tags", False), ("tags", True), ("hermes", False)])
def test_noise_free_oracle_answers_correctly_through_the_engine(fmt, lead_space):
    env, qs, plans, tok = _setup(fmt, lead_space=lead_space)
    trajs = oracle_rollout(qs, env, tok, ROLLOUT, plans)
    assert len(trajs) == len(qs)
    for q, plan, t in zip(qs, plans, trajs):
        assert plan.kind == "clean"
        assert t.reason == "answer" and t.answer == q["answers"][0]
        assert t.num_turns == len(q["supporting_ids"]) + 1
        # every search call was valid, executed, and found the hop's supporting passage
        searches = [o for turn in t.outcomes[:-1] for o in turn]
        assert len(searches) == len(q["supporting_ids"])
        assert all(o.valid and o.success and o.found_support for o in searches)


@pytest.mark.parametrize("fmt", ["tags", "hermes"])
def test_action_mask_covers_exactly_the_oracle_turns(fmt):
    env, qs, plans, tok = _setup(fmt, noise=0.5, seed=3)
    trajs = oracle_rollout(qs, env, tok, ROLLOUT, plans)
    for plan, t in zip(plans, trajs):
        t.check()
        assert t.turn_texts == list(plan.turns)
        expected = sum(len(encode(tok, turn)) for turn in plan.turns)
        assert t.num_action_tokens == expected
        for k, (s, e) in enumerate(t.turn_spans):
            assert t.action_mask[s:e] == [1] * (e - s)
            assert decode(tok, t.response_ids[s:e]) == plan.turns[k]
        # everything between turns is the env's observation, mask 0, tokenized once
        for k in range(len(t.turn_spans) - 1):
            gap = slice(t.turn_spans[k][1], t.turn_spans[k + 1][0])
            assert set(t.action_mask[gap]) == {0}
            assert t.observations[k] in decode(tok, t.response_ids[gap])
        assert decode(tok, t.input_ids) == t.prompt_text + t.response_text


def _many_questions(n: int) -> list[dict]:
    base = tw.questions()
    return [dict(base[i % 2], id=f"q{i}") for i in range(n)]


def test_noise_makes_the_seeded_share_of_episodes_imperfect():
    fmt = get_format("tags", [SearchTool(tw.retriever())])
    qs = _many_questions(3000)
    plans = plan_all(qs, TITLES, fmt, 0.3, seed=7, max_turns=4)
    counts = Counter(p.kind for p in plans)
    imperfect = sum(counts[k] for k in NOISE_KINDS)
    assert abs(imperfect / len(qs) - 0.3) < 0.03
    # 2-hop questions can get all three kinds; 1-hop ones cannot answer early
    two_hop = Counter(p.kind for p, q in zip(plans, qs) if q["hops"] == 2)
    for kind in NOISE_KINDS:
        assert abs(two_hop[kind] / sum(two_hop.values()) - 0.1) < 0.025
    one_hop = Counter(p.kind for p, q in zip(plans, qs) if q["hops"] == 1)
    assert one_hop["early_answer"] == 0 and one_hop["wrong_query"] > 0
    # seeded: same seed -> same plans; another seed -> different ones; decisions per question id
    assert plan_all(qs, TITLES, fmt, 0.3, 7, 4) == plans
    assert plan_all(qs, TITLES, fmt, 0.3, 8, 4) != plans
    assert plan_all(qs[500:], TITLES, fmt, 0.3, 7, 4) == plans[500:]
    assert all(p.kind == "clean" for p in plan_all(qs[:300], TITLES, fmt, 0.0, 7, 4))
    assert all(p.kind != "clean" for p in plan_all(qs[:300], TITLES, fmt, 1.0, 7, 4))


def test_per_kind_noise_shares():
    fmt = get_format("tags", [SearchTool(tw.retriever())])
    qs = _many_questions(3000)
    shares = {"early_answer": 0.5, "wrong_query": 0.1}
    plans = plan_all(qs, TITLES, fmt, shares, seed=7, max_turns=4)
    two_hop = Counter(p.kind for p, q in zip(plans, qs) if q["hops"] == 2)
    n = sum(two_hop.values())
    assert abs(two_hop["early_answer"] / n - 0.5) < 0.04 and abs(two_hop["wrong_query"] / n - 0.1) < 0.03
    assert two_hop["redundant_query"] == 0 and abs(two_hop["clean"] / n - 0.4) < 0.04
    # a kind that does not fit (1 hop cannot answer early) leaves the episode clean
    one_hop = Counter(p.kind for p, q in zip(plans, qs) if q["hops"] == 1)
    assert one_hop["early_answer"] == 0 and one_hop["clean"] > one_hop["wrong_query"] > 0
    assert plan_all(qs, TITLES, fmt, shares, 7, 4) == plans
    with pytest.raises(ValueError, match="unknown oracle noise kind"):
        plan_all(qs[:5], TITLES, fmt, {"typo_query": 0.5}, 7, 4)


def test_each_imperfect_kind_is_what_it_says():
    fmt = get_format("tags", [SearchTool(tw.retriever())])
    q = tw.questions()[0]  # 2 hops: film -> company -> founder
    film, company = (TITLES[i] for i in q["supporting_ids"])
    seen = {}
    for seed in range(200):
        plan = plan_episode(q, TITLES, fmt, 1.0, seed, 4)
        seen.setdefault(plan.kind, plan)
    assert set(seen) == set(NOISE_KINDS)
    call = lambda title: fmt.render_call("search", {"query": title})  # noqa: E731
    wrong = seen["wrong_query"].turns
    assert len(wrong) == 4 and wrong[-1] == fmt.render_answer(q["answers"][0])
    assert [t for t in wrong[:-1] if t in (call(film), call(company))] == [call(film), call(company)]
    extra = [t for t in wrong[:-1] if t not in (call(film), call(company))]
    assert len(extra) == 1 and extra[0][len("<search>") : -len("</search>")] in TITLES.values()
    assert seen["redundant_query"].turns in (
        (call(film), call(film), call(company), fmt.render_answer(q["answers"][0])),
        (call(film), call(company), call(company), fmt.render_answer(q["answers"][0])),
    )
    assert seen["early_answer"].turns == (call(film), fmt.render_answer(company))


def test_imperfect_episodes_through_the_engine():
    env, qs, plans, tok = _setup("tags", noise=1.0, seed=1)
    trajs = oracle_rollout(qs, env, tok, ROLLOUT, plans)
    for q, plan, t in zip(qs, plans, trajs):
        assert t.reason == "answer" and t.turn_texts == list(plan.turns)
        correct = t.answer == q["answers"][0]
        assert correct == (plan.kind != "early_answer")


def test_backend_refuses_unknown_prompts_and_conflicting_scripts():
    env, qs, plans, tok = _setup("tags")
    backend = OracleBackend(tok)
    backend.register([1, 2, 3], ["<search>x</search>"])
    with pytest.raises(ValueError, match="different oracle scripts"):
        backend.register([1, 2, 3], ["<answer>y</answer>"])
    with pytest.raises(KeyError):
        backend.generate([[9, 9, 9]], 8, [], 0.0, 1.0, 0)
    out = backend.generate([[1, 2, 3]], 2, [], 0.0, 1.0, 0)[0]
    assert len(out.token_ids) == 2 and out.finish == "length" and out.logprobs == [0.0, 0.0]


def test_unique_questions_keeps_the_first_of_each_text():
    qs = tw.questions()
    dup = [qs[0], dict(qs[0], id="other"), qs[1]]
    assert [q["id"] for q in unique_questions(dup)] == [qs[0]["id"], qs[1]["id"]]


def test_script_that_cannot_fit_the_turn_limit_is_an_error():
    fmt = get_format("tags", [SearchTool(tw.retriever())])
    with pytest.raises(ValueError, match="max_turns"):
        plan_episode(tw.questions()[0], TITLES, fmt, 0.0, 0, max_turns=2)
