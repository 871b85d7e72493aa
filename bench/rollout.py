"""Rollout throughput: the multi-turn engine (with tool observations) vs one plain ``generate``.

Both sides use the same policy, batch and HF backend. The multi-turn side runs
``RolloutEngine.rollout`` against a scripted env (fixed observation, answer after ``--turns``
turns; no retrieval cost, so the numbers isolate the engine: per-turn prefill of the tokens after
the cached history, observation tokenization, stop handling, bookkeeping). The plain side generates, for the
same prompts, as many new tokens in one ``generate`` call as the longest multi-turn response
(policy + observation tokens) - the same total sequence length.

Reported: generated (policy) tokens/s for both, the engine's split between generate and env
time, and the ratio. The model is the scratch policy sized by ``params.yaml`` (``model.scratch``)
unless flags override it; its weights are random, so EOS/stop strings are rare and turns run to
``--turn-tokens``.

    python bench/rollout.py --batch 8 --turns 3 --turn-tokens 32 --repeats 3

The two modes are alternated ``--repeats`` times in one run (seconds: medians; ratio: the median of
the per-round tokens/s ratios), so load from other processes on a shared machine hits both.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from agentr1.config import load_config
from agentr1.env.base import CallOutcome, StepResult
from agentr1.io import write_json_atomic
from agentr1.models import build_scratch_model, train_tokenizer
from agentr1.rollout import RolloutEngine
from agentr1.rollout.hf import HFBackend

PARTS = ["zor", "vath", "quel", "lin", "brin", "dle", "moor", "van", "trix", "kael", "vesh", "tar", "om", "brel"]


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(PARTS) for _ in range(rng.randint(2, 3))).capitalize()


def _corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"{_name(rng)} {_name(rng)} was born in {_name(rng)} and founded {_name(rng)} Holdings in {rng.randint(1800, 2000)}."
        for _ in range(n)
    ]


class ScriptedEnv:
    """Fixed observation after every turn; the episode answers after ``turns`` turns."""

    format = "tags"
    stop_strings = ["</search>", "</answer>"]

    def __init__(self, turns: int, observation: str):
        self.turns, self.observation = turns, observation

    def system_prompt(self) -> str:
        return "Answer the question. Search with <search> query </search>; answer with <answer> x </answer>."

    def user_prompt(self, question: str) -> str:
        return f"Question: {question}"

    def step_batch(self, turn_texts, turn_indices, supporting_ids=None):
        out = []
        for text, k in zip(turn_texts, turn_indices):
            oc = [CallOutcome(name="search", valid=True, success=True, end=len(text))]
            if k + 1 >= self.turns:
                out.append(StepResult("", True, "answer", answer="x", outcomes=oc))
            else:
                out.append(StepResult(self.observation, False, "continue", outcomes=oc))
        return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--turn-tokens", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=None, help="override model.scratch.hidden_size")
    ap.add_argument("--layers", type=int, default=None, help="override model.scratch.num_layers")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="alternated multi-turn / plain rounds")
    ap.add_argument("--out", default="bench/results/rollout.json")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    cfg = load_config(args.params)
    scratch = cfg.model.scratch
    if args.hidden:
        scratch = scratch.model_copy(update={"hidden_size": args.hidden, "intermediate_size": 4 * args.hidden})
    if args.layers:
        scratch = scratch.model_copy(update={"num_layers": args.layers})
    texts = _corpus(2000, args.seed)
    tok = train_tokenizer(texts, scratch.vocab_size)
    model = build_scratch_model(scratch, tok, seed=args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    observation = "\n<information>" + " ".join(texts[:3]) + "</information>\n"
    env = ScriptedEnv(args.turns, observation)
    rcfg = cfg.rollout.model_copy(
        update={"max_turn_tokens": args.turn_tokens, "max_total_tokens": scratch.max_position, "batch_size": args.batch}
    )
    backend = HFBackend(model, tok)
    engine = RolloutEngine(backend, env, tok, rcfg)
    rng = random.Random(args.seed + 1)
    questions = [
        {"id": f"q{i}", "question": f"Who founded {_name(rng)} Holdings?", "answers": ["x"]} for i in range(args.batch)
    ]

    engine.rollout(questions[:1], seed=args.seed)  # warm-up (allocator, first-call overheads)
    # --repeats rounds alternating multi-turn / plain (same seeds: same work every round); the
    # reported seconds are the medians, the ratio the median of the per-round ratios
    multi_runs, plain_runs, ratios = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        trajs = engine.rollout(questions, seed=args.seed)
        multi_runs.append(time.perf_counter() - t0)
        gen_tokens = sum(t.num_action_tokens for t in trajs)
        resp_len = max(len(t.response_ids) for t in trajs)
        prompts = [t.prompt_ids for t in trajs]
        t0 = time.perf_counter()
        plain = backend.generate(prompts, resp_len, [], rcfg.temperature, rcfg.top_p, args.seed)
        plain_runs.append(time.perf_counter() - t0)
        plain_tokens = sum(len(g.token_ids) for g in plain)
        ratios.append((gen_tokens / multi_runs[-1]) / (plain_tokens / plain_runs[-1]))
    multi_s, plain_s = statistics.median(multi_runs), statistics.median(plain_runs)

    st = engine.stats
    result = {
        "machine": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "threads": args.threads,
        },
        "model": {"params": n_params, "hidden": scratch.hidden_size, "layers": scratch.num_layers, "vocab": len(tok)},
        "setup": {
            "batch": args.batch,
            "turns": args.turns,
            "turn_tokens": args.turn_tokens,
            "response_len_max": resp_len,
            "prompt_len_max": max(len(p) for p in prompts),
        },
        "multi_turn": {
            "seconds": multi_s,
            "generated_tokens": gen_tokens,
            "observation_tokens": st["observation_tokens"],
            "tokens_per_s": gen_tokens / multi_s,
            "generate_s": st["generate_s"],
            "env_s": st["env_s"],
            "backend_calls": st["backend_calls"],
        },
        "plain_generate": {
            "seconds": plain_s,
            "generated_tokens": plain_tokens,
            "tokens_per_s": plain_tokens / plain_s,
        },
    }
    result["ratio_multi_over_plain"] = statistics.median(ratios)
    result["ratio_samples"] = [round(r, 3) for r in ratios]
    result["multi_turn"]["seconds_samples"] = [round(x, 3) for x in multi_runs]
    result["plain_generate"]["seconds_samples"] = [round(x, 3) for x in plain_runs]
    print(
        f"model {n_params / 1e6:.2f}M params (hidden {scratch.hidden_size}, {scratch.num_layers} layers), batch {args.batch}, "
        f"{args.turns} turns x {args.turn_tokens} tokens, response length {resp_len}"
    )
    print(f"{'mode':<22}{'gen tokens':>12}{'seconds':>10}{'tokens/s':>11}")
    for name, key in (("multi-turn (tools)", "multi_turn"), ("plain generate", "plain_generate")):
        r = result[key]
        print(f"{name:<22}{r['generated_tokens']:>12}{r['seconds']:>10.2f}{r['tokens_per_s']:>11.1f}")
    print(
        f"ratio multi/plain (median of {args.repeats} alternated rounds {result['ratio_samples']}): "
        f"{result['ratio_multi_over_plain']:.2f}  (engine: generate {st['generate_s']:.2f}s, env {st['env_s']:.3f}s)"
    )
    out = Path(args.out)
    write_json_atomic(out, result)
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
