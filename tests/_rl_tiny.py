"""Shared pieces of the trainer tests: a tiny scratch policy and a two-turn toy environment.

ToyEnv: turn 0 may be anything (it counts as one valid search call) and is answered with a fixed
observation (action_mask 0 tokens between the two policy turns); turn 1 is the final answer: its
whole text. With ``reward.metric: subem`` and the gold answer ``GOLD`` (a single letter), the
reward is 1 when the second turn contains that letter - something a random tiny policy does
sometimes and RL can make it do always.
"""

from __future__ import annotations

import torch

from agentr1.config import RewardConfig, RolloutConfig, ScratchModelConfig, TrainConfig
from agentr1.env.base import CallOutcome, StepResult
from agentr1.models import build_scratch_model, train_tokenizer

GOLD = "e"
OBS = "\n<information>Doc 1 (Vantrix Holdings): founded by Zorvath Quellin in Brindlemoor.</information>\n"
TINY = ScratchModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64, max_position=256
)
QUESTIONS = [
    {
        "id": f"q{i}",
        "question": f"Question number {i}: who founded company {i}?",
        "answers": [GOLD],
        "supporting_ids": [f"p{i}"],
    }
    for i in range(12)
]


class ToyEnv:
    format = "tags"
    stop_strings = ["</search>", "</answer>"]

    def system_prompt(self) -> str:
        return "Search with <search> query </search>, answer with <answer> x </answer>."

    def user_prompt(self, question: str) -> str:
        return f"Question: {question}"

    def step_batch(self, turn_texts, turn_indices, supporting_ids=None):
        out = []
        for text, k in zip(turn_texts, turn_indices):
            if k == 0:
                oc = CallOutcome(name="search", valid=True, success=True, end=len(text), found_support=True)
                out.append(StepResult(OBS, False, "continue", outcomes=[oc]))
            else:
                out.append(StepResult("", True, "answer", answer=text, outcomes=[]))
        return out


def tiny_tokenizer():
    env = ToyEnv()
    texts = [env.system_prompt(), OBS] + [env.user_prompt(q["question"]) for q in QUESTIONS]
    return train_tokenizer(texts * 10, TINY.vocab_size)


def tiny_policy(tok, seed: int = 0):
    return build_scratch_model(TINY, tok, seed=seed)


def rollout_cfg(**kw) -> RolloutConfig:
    return RolloutConfig(**{"max_turn_tokens": 3, "max_total_tokens": 200, "batch_size": 64, **kw})


def reward_cfg(**kw) -> RewardConfig:
    return RewardConfig(**{"metric": "subem", **kw})


def train_cfg(**kw) -> TrainConfig:
    base = {
        "steps": 4,
        "batch_questions": 4,
        "group_size": 4,
        "estimator": "grpo",
        "lr": 0.01,
        "mini_batches": 2,
        "micro_batch_size": 4,
        "kl": {"mode": "loss", "coef": 0.01},
        "dev": {"every": 0, "examples": 4},
        "checkpoint": {"every": 2},
        "collapse": {"reward_drop": None},
        "filter_groups": {"enabled": False},  # one round of rollouts per step (tests/test_trainer.py tests it on)
    }
    for k, v in kw.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return TrainConfig.model_validate(base)


def params_of(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
