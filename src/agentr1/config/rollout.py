"""``rollout``: the multi-turn rollout engine and its backends."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from agentr1.config.base import _Section
from agentr1.registry import BACKENDS


class VLLMConfig(_Section):
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    enforce_eager: bool = False
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"


class RolloutConfig(_Section):
    """The multi-turn rollout engine (``agentr1.rollout``).

    ``max_turn_tokens`` caps one policy turn, ``max_total_tokens`` the whole sequence (prompt +
    response); ``batch_size`` is the most prompts handed to the backend in one call.
    ``observation_wrap``: ``inline`` appends the observation text as is (the tag format, one
    assistant message); ``chat`` closes the assistant message and wraps the observation in a
    user message of the chat template; ``auto`` = ``chat`` for an env whose ``format`` is
    ``hermes``, else ``inline``."""

    backend: Annotated[str, AfterValidator(BACKENDS.check)] = "hf"
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_turn_tokens: int = Field(48, ge=1)
    max_total_tokens: int = Field(2048, ge=16)
    batch_size: int = Field(16, ge=1)
    observation_wrap: Literal["auto", "inline", "chat"] = "auto"
    vllm: VLLMConfig = VLLMConfig()

    @model_validator(mode="after")
    def _room_for_a_turn(self) -> RolloutConfig:
        # the first turn gets min(max_turn_tokens, max_total_tokens - prompt) tokens and a prompt is
        # at least one token: below max_turn_tokens + 1 not even one full turn fits after any prompt
        # (the exact prompt length needs the tokenizer: the trainer refuses episodes left with no turn)
        if self.max_total_tokens <= self.max_turn_tokens:
            raise ValueError(
                f"max_total_tokens ({self.max_total_tokens}) leaves no room for a prompt plus one turn of "
                f"max_turn_tokens ({self.max_turn_tokens}): raise rollout.max_total_tokens above "
                f"max_turn_tokens + the prompt's length (at least {self.max_turn_tokens + 1}), or lower "
                "rollout.max_turn_tokens"
            )
        return self
