"""The two baselines of the paper's comparison (run by ``agentr1 evaluate --policy base_tool_call|naive_rag``).

*Base tool call* (:func:`base_tool_call`): a policy that was not trained with RL, run greedily
inside the ToolEnv exactly like the trained agent (same prompt, same tools, same turn limits).
The evaluate stage runs it with the **base policy** (``pretrain.out_dir``: for ``model.kind:
scratch`` the reader of ``agentr1 pretrain``, which never saw a tool call; for ``hf``/``gguf``
the pretrained model as downloaded) - the paper's "prompted base model" baseline, with no tool
training at all. The cold-start
policy in the same setting is reported separately as the cold start's own score.

*Naive RAG* (:func:`naive_rag`): retrieve the top-k passages once with the question as the query
(the env's own search tool, so k, passage cuts and the observation text are exactly what a
search call returns), put them in the prompt in the observation format, as if the policy had
searched the question itself::

    <chat prompt: system + question + assistant header> <observation> <answer>

and let the policy write the answer in one turn. The ``<answer>`` opening tag is part of the
prompt (``force_answer=True``, default): a policy trained to search would otherwise spend its
only turn on another call. The turn ends at ``</answer>`` or the per-turn token limit. The
evaluate stage runs it with the **cold-start policy** (the same weights as the cold start, so the two
numbers isolate "one retrieval, one answer" against "multi-turn search").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentr1.env.formats import ANSWER_CLOSE, ANSWER_OPEN
from agentr1.env.rewards import score_episode
from agentr1.eval.quick import evaluate_tool_policy, score_row, summarize
from agentr1.eval.setup import EvalSetup
from agentr1.rollout.engine import RolloutEngine, decode, encode
from agentr1.rollout.trajectory import Trajectory


def base_tool_call(setup: EvalSetup, questions: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[Trajectory]]:
    """The base-tool-call baseline: greedy rollouts of ``setup.backend``'s policy in ``setup.env``
    (see :func:`agentr1.eval.quick.evaluate_tool_policy`)."""
    return evaluate_tool_policy(setup, questions)


def retrieve_observation(env, question: str, tool: str = "search") -> str:
    """The observation text a ``tool`` call with ``question`` as its query would produce."""
    result = env.tools[tool].execute_batch([{"query": question}])[0]
    content = result.content if result.success else f"Error: {result.content}"
    return env.fmt.render_observation([content])


def naive_rag_prompt(
    engine: RolloutEngine, question: Mapping[str, Any], observation: str, force_answer: bool = True
) -> list[int]:
    """Token ids of the naive-RAG prompt (module docstring): the episode prompt, the observation
    (wrapped as the engine wraps observations), then ``<answer>`` when ``force_answer``."""
    ids = engine.prompt_ids(question) + engine.observation_ids(observation, "")
    if force_answer:
        ids += encode(engine.tokenizer, ANSWER_OPEN)
    return ids


def naive_rag(
    setup: EvalSetup, questions: Sequence[Mapping[str, Any]], force_answer: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the naive-RAG baseline greedily (generations seeded with ``setup.seed``, at most
    ``setup.rollout.batch_size`` prompts per backend call); returns the summary (em/subem/f1,
    format_ok, reward, answered, tool_calls = 0, turns = 1, ``seconds``) and one record per
    question (prompt text, the answer turn, the parsed answer and its scores)."""
    t0 = time.perf_counter()
    backend, tokenizer, env, rollout_cfg = setup.backend, setup.tokenizer, setup.env, setup.rollout
    engine = RolloutEngine(backend, env, tokenizer, rollout_cfg)
    prefix = ANSWER_OPEN if force_answer else ""
    prompts = [naive_rag_prompt(engine, q, retrieve_observation(env, q["question"]), force_answer) for q in questions]
    stops = [ANSWER_CLOSE] if force_answer else list(env.stop_strings)
    gens = []
    for start in range(0, len(prompts), rollout_cfg.batch_size):
        chunk = prompts[start : start + rollout_cfg.batch_size]
        gens += backend.generate(chunk, rollout_cfg.max_turn_tokens, stops, 0.0, 1.0, setup.seed)
    rows, records = [], []
    for q, ids, gen in zip(questions, prompts, gens):
        turn = prefix + decode(tokenizer, gen.token_ids)
        parsed = env.fmt.parse(turn)
        answer = parsed.answer
        golds = list(q.get("answers", []))
        score = score_episode(
            Trajectory(str(q["id"]), q["question"], golds, ids, outcomes=[[]], answer=answer), setup.reward
        )
        row = {
            **score_row(score),
            "turns": 1.0,
            "answered": float(score.answered),
            "reason": "answer" if answer is not None else gen.finish,
        }
        rows.append(row)
        records.append(
            {
                "qid": str(q["id"]),
                "prompt_text": decode(tokenizer, ids),
                "turn_text": turn,
                "answer": answer,
                "golds": golds,
                **{k: v for k, v in row.items()},
            }
        )
    summary = summarize(rows)
    summary["seconds"] = time.perf_counter() - t0
    return summary, records
