"""agentr1.rollout: token-exact trajectories, the multi-turn rollout engine and its backends
(a transformers causal LM with the KV cache kept across turns; vLLM on GPU, imported lazily)."""

from agentr1.rollout.backends import Backend, Generation, first_stop
from agentr1.rollout.engine import RolloutEngine
from agentr1.rollout.factory import make_backend
from agentr1.rollout.trajectory import Trajectory, collate, load_trajectories, save_trajectories

__all__ = [
    "Backend",
    "Generation",
    "RolloutEngine",
    "Trajectory",
    "collate",
    "first_stop",
    "load_trajectories",
    "make_backend",
    "save_trajectories",
]
