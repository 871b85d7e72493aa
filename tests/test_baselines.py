"""Baselines and the quick evaluation: the naive-RAG prompt and answer parsing, base tool call
through the ToolEnv, and the per-episode metrics."""

from __future__ import annotations

import pytest
import torch

import tiny_world as tw
from agentr1.config import RewardConfig, RolloutConfig
from agentr1.env.base import CallOutcome
from agentr1.eval.baselines import base_tool_call, naive_rag, naive_rag_prompt, retrieve_observation
from agentr1.eval.quick import episode_metrics, greedy, summarize
from agentr1.eval.setup import EvalSetup
from agentr1.rollout import Generation, RolloutEngine, Trajectory
from agentr1.rollout.engine import decode, encode
from agentr1.rollout.oracle import OracleBackend, corpus_titles, oracle_texts, plan_all, unique_questions

torch.set_num_threads(1)
ROLLOUT = RolloutConfig(max_turn_tokens=32, max_total_tokens=1024, batch_size=4, temperature=1.0)
REWARD = RewardConfig()


@pytest.fixture(scope="module")
def world():
    env = tw.env("tags")
    qs = unique_questions(tw.questions())
    plans = plan_all(qs, corpus_titles(tw.corpus()), env.fmt, 0.0, 0, env.max_turns)
    tok = tw.tokenizer(oracle_texts(qs, env, plans))
    return env, qs, plans, tok


class ScriptedAnswer:
    """A backend whose every continuation is ``text`` (tokenized); records what it was given."""

    def __init__(self, tok, text):
        self.ids = encode(tok, text)
        self.calls = []

    def generate(self, prompts, max_new_tokens, stop_strings, temperature, top_p, seed):
        self.calls.append((prompts, max_new_tokens, stop_strings, temperature))
        return [Generation(self.ids[:max_new_tokens], [0.0] * len(self.ids[:max_new_tokens]), "stop") for _ in prompts]


def test_naive_rag_prompt_is_prompt_observation_answer_tag(world):
    env, qs, _, tok = world
    q = qs[0]
    engine = RolloutEngine(None, env, tok, ROLLOUT)
    obs = retrieve_observation(env, q["question"])
    assert obs == env.fmt.render_observation([env.tools["search"].execute({"query": q["question"]}).content])
    assert obs.strip().startswith("<information>Doc 1 (Title: ") and "Doc 2" in obs and "Doc 3" not in obs  # topk 2
    text = decode(tok, naive_rag_prompt(engine, q, obs))
    assert text == decode(tok, engine.prompt_ids(q)) + obs + "<answer>"
    film = q["question"].split("produced ")[1].rstrip("?")
    assert f"(Title: {film})" in obs  # the question's entity is retrieved
    assert decode(tok, naive_rag_prompt(engine, q, obs, force_answer=False)).endswith(obs)


def test_naive_rag_parses_the_answer_and_scores_it(world):
    env, qs, _, tok = world
    q = qs[0]
    backend = ScriptedAnswer(tok, f" {q['answers'][0]}</answer>")
    summary, records = naive_rag(EvalSetup(backend, tok, env, ROLLOUT, REWARD), qs[:3])
    assert records[0]["answer"] == q["answers"][0] and records[0]["em"] == 1.0
    assert records[0]["turn_text"] == f"<answer> {q['answers'][0]}</answer>"
    assert summary["n"] == 3 and summary["answered"] == 1.0 and summary["format_ok"] == 1.0
    assert summary["em"] == pytest.approx(sum(r["answers"][0] == q["answers"][0] for r in qs[:3]) / 3)
    prompts, max_new, stops, temperature = backend.calls[0]
    assert stops == ["</answer>"] and temperature == 0.0 and max_new == ROLLOUT.max_turn_tokens
    assert summary["tool_calls"] == 0.0


def test_naive_rag_without_an_answer_scores_zero(world):
    env, qs, _, tok = world
    summary, records = naive_rag(EvalSetup(ScriptedAnswer(tok, " I am not sure"), tok, env, ROLLOUT, REWARD), qs[:2])
    assert records[0]["answer"] is None
    assert summary["em"] == 0.0 and summary["answered"] == 0.0 and summary["format_ok"] == 0.0
    assert summary["reward"] == -0.5  # format score 0.5 (no call attempts, no answer) -> 0.5 - 1


def test_base_tool_call_runs_the_policy_greedily_in_the_env(world):
    env, qs, plans, tok = world
    oracle = OracleBackend(tok)
    engine = RolloutEngine(oracle, env, tok, ROLLOUT)
    for q, plan in zip(qs, plans):
        oracle.register(engine.prompt_ids(q), plan.turns)
    seen = []
    inner = oracle.generate
    oracle.generate = lambda *a: (seen.append(a[3]), inner(*a))[1]
    summary, trajs = base_tool_call(EvalSetup(oracle, tok, env, ROLLOUT, REWARD), qs)
    assert set(seen) == {0.0}  # greedy whatever the rollout temperature
    assert summary["n"] == len(qs) and summary["em"] == 1.0 and summary["format_ok"] == 1.0
    assert summary["tool_calls"] == pytest.approx(sum(q["hops"] for q in qs) / len(qs))
    assert summary["searches_found_support"] == summary["tool_calls"]
    assert summary["reasons"] == {"answer": len(qs)}
    assert greedy(ROLLOUT).temperature == 0.0 and ROLLOUT.temperature == 1.0


def _traj(answer, outcomes):
    return Trajectory(
        qid="x",
        question="q",
        golds=["Ada Vell"],
        prompt_ids=[1],
        answer=answer,
        turn_spans=[(0, 1)] * (len(outcomes) + (answer is not None)),
        outcomes=outcomes,
    )


def test_episode_metrics_by_hand():
    ok = CallOutcome("search", True, True, 10, True)
    bad = CallOutcome(None, False, False, 5, False, "unclosed")
    row = episode_metrics(_traj("ada vell", [[ok], [bad], []]), REWARD)
    assert row["em"] == 1.0 and row["f1"] == 1.0 and row["format_ok"] == 0.0
    assert row["tool_calls"] == 2.0 and row["searches_found_support"] == 1.0
    assert row["reward"] == pytest.approx(0.75 - 1.0)  # f = 0.5 * 1/2 + 0.5 * 1
    row2 = episode_metrics(_traj("Bo", [[ok], []]), REWARD)
    assert row2["em"] == 0.0 and row2["format_ok"] == 1.0 and row2["reward"] == 0.0
    s = summarize([row, row2])
    assert s["n"] == 2 and s["em"] == 0.5 and s["tool_calls"] == 1.5 and s["format_ok"] == 0.5
    assert summarize([]) == {"n": 0}
