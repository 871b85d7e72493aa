"""``rollout.backend: vllm`` in the RL trainer: one vLLM engine per rank, synced every rollout.

The engine is built once, on first use, from the start checkpoint (``model_path``); before every
rollout (training and dev) the current policy weights are loaded into it
(``VLLMBackend.load_weights``) - a colocated "hybrid engine". Under FSDP the caller gathers the
full weights first (``full_params``), as :meth:`agentr1.rl.sampling.Sampling.collect` does.
"""

from __future__ import annotations

from agentr1.rl.distributed import unwrap
from agentr1.rollout import make_backend


class WeightSync:
    """The rank's vLLM engine, built from ``model_path`` on first :meth:`synced`."""

    def __init__(self, model_path: str | None) -> None:
        self.model_path = model_path
        self.engine = None

    def synced(self, rollout_cfg, policy):
        """The engine with ``policy``'s current weights loaded."""
        if self.engine is None:
            self.engine = make_backend(rollout_cfg, model_path=self.model_path)
        self.engine.load_weights(unwrap(policy).named_parameters())
        return self.engine
