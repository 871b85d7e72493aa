"""What every evaluation rollout needs, in one object: :class:`EvalSetup`.

The evaluations of :mod:`agentr1.eval` (greedy agent rollouts, sampled rollouts, the naive-RAG
baseline) all run a policy's ``backend`` with its ``tokenizer`` in a ToolEnv ``env`` under a
rollout config, score the episodes with a reward config and seed the backend's generations
with ``seed``. A variant (another backend that records its calls, the env of a retrieval log,
another seed per chunk) is :func:`dataclasses.replace` of the setup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EvalSetup:
    """``backend`` (:mod:`agentr1.rollout` backend: ``generate(prompts, max_new_tokens, stops,
    temperature, top_p, seed)``), ``tokenizer``, ``env`` (a ToolEnv), ``rollout`` (``cfg.rollout``
    or a copy: batch size, turn limits, sampling), ``reward`` (``cfg.reward``) and ``seed`` (the
    base seed of the rollouts)."""

    backend: Any
    tokenizer: Any
    env: Any
    rollout: Any
    reward: Any
    seed: int = 0
