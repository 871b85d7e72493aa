"""The RL trainer's resumable state: what a checkpoint carries, saving, resuming, rolling back.

A checkpoint (:func:`agentr1.rl.checkpoint.save_state`; in memory without a ``state_dir``, for
the collapse guard's roll-backs only) carries the policy's and the critic's weights and optimizer
states, the torch and Python RNG states, the step and optimizer-step counters, ``lr_scale``, the
roll-back count, the metric history, the collapse guard's reward window and events, and the
run's params (a resume must match them, :func:`agentr1.rl.checkpoint.check_resume`), among them
the digests of the files the run reads besides its params (:func:`input_digests`: the retrieval
index and the processed dataset), which a resume must match too (:func:`check_inputs`: an index
rebuilt with other BM25 params between the kill and the resume would change the episodes).

The lr schedulers are a pure function of the optimizer-step counters (:mod:`agentr1.rl.optim`):
they are rebuilt, not saved, whenever the counters or ``lr_scale`` are set from outside the
update (a loaded checkpoint, a roll-back).

Roll-back (``train.collapse.action: rollback``, :func:`agentr1.rl.collapse.respond`): the last
checkpoint is restored but the events and the roll-back count are kept, and the base lr is
multiplied by ``lr_factor``.

:class:`Resumable` is the part of :class:`agentr1.rl.trainer.Trainer` that does this.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import random
from pathlib import Path
from typing import Any

import torch

from agentr1.config import flatten
from agentr1.errors import StageError
from agentr1.io import tree_digest
from agentr1.rl import checkpoint as ckpt
from agentr1.rl import collapse
from agentr1.rl.distributed import unwrap

log = logging.getLogger(__name__)


class Resumable:
    """Checkpointing, resuming and rolling back the trainer (module docstring); a mixin of it."""

    def _params(self, extra: dict[str, Any] | None) -> dict[str, Any]:
        """What this run trains with, as dotted keys (``train.*``, ``rollout.*``, ``reward.*``, the
        seed, the train questions' ids; ``extra``: what the caller adds, e.g. ``env.*``)."""
        ids = "\n".join(str(q.get("id", "")) for q in self.train_questions)
        params: dict[str, Any] = {
            "seed": self.seed,
            "data.train_questions": f"{len(self.train_questions)} ids, sha256 "
            f"{hashlib.sha256(ids.encode()).hexdigest()[:16]}",
        }
        for name, section in (("train", self.tcfg), ("rollout", self.rollout_cfg), ("reward", self.reward_cfg)):
            if hasattr(section, "model_dump"):
                params.update(flatten(section.model_dump(mode="json"), f"{name}."))
        params.update(extra or {})
        return params

    def _on_collapse(self, step: int, reason: str) -> None:
        """Record the collapse and respond (:func:`agentr1.rl.collapse.respond`); a roll-back
        restores the last checkpoint but keeps the events and the roll-back count, and scales the lr."""
        c = self.tcfg.collapse
        self.events.append({"step": step, "reason": reason, "action": c.action})
        if collapse.respond(c, step, reason, self.rollbacks) == "skip":
            return
        rollbacks, scale, events = self.rollbacks + 1, self.lr_scale * c.lr_factor, list(self.events)
        self.restore()
        self.rollbacks, self.lr_scale, self.events = rollbacks, scale, events
        self._build_schedulers()
        log.warning("collapse guard: %s at step %d -> rolled back to step %d, lr x%.3g", reason, step, self.step, scale)

    def _record(self, step: int, metrics: dict[str, float]) -> None:
        """Append a step's metrics to the (checkpointed) history; rank 0 logs them."""
        self.history.append({"step": step, **metrics})
        if self.logger is not None and self.dist.is_main:
            self.logger.log(metrics, step=step)

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tensors: dict[str, Any] = {
            "policy": {k: v.detach().cpu().clone() for k, v in unwrap(self.actor).model.state_dict().items()},
            "optimizer": self.opt.state_dict(),
            "rng": {"torch": torch.get_rng_state()},
        }
        if self.critic is not None:
            tensors["critic"] = {k: v.detach().cpu().clone() for k, v in unwrap(self.critic).state_dict().items()}
            tensors["critic_optimizer"] = self.critic_opt.state_dict()
        meta = {
            "step": self.step,
            "opt_steps": self.opt_steps,
            "critic_opt_steps": self.critic_opt_steps,
            "lr_scale": self.lr_scale,
            "rollbacks": self.rollbacks,
            "history": self.history,
            "guard_rewards": self.guard_rewards,
            "events": self.events,
            "python_random": _jsonable(random.getstate()),
            "params": self.params,
        }
        return tensors, meta

    def load_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        missing = {"policy", "optimizer"} | ({"critic", "critic_optimizer"} if self.critic is not None else set())
        if missing - set(tensors):
            raise StageError(f"checkpoint lacks {sorted(missing - set(tensors))} (a different estimator/run?)")
        unwrap(self.actor).model.load_state_dict(tensors["policy"])
        self.opt.load_state_dict(tensors["optimizer"])
        if self.critic is not None:
            unwrap(self.critic).load_state_dict(tensors["critic"])
            self.critic_opt.load_state_dict(tensors["critic_optimizer"])
        torch.set_rng_state(tensors["rng"]["torch"])
        random.setstate(_tupled(meta["python_random"]))
        self.step, self.opt_steps, self.critic_opt_steps = meta["step"], meta["opt_steps"], meta["critic_opt_steps"]
        self.lr_scale, self.rollbacks = meta["lr_scale"], meta["rollbacks"]
        self._build_schedulers()
        self.history = [dict(h) for h in meta["history"]]
        self.guard_rewards, self.events = list(meta["guard_rewards"]), list(meta["events"])

    def save(self) -> None:
        """Checkpoint the current state (rank 0 writes ``state_dir``; in memory without one)."""
        if self.dist.active and self.dist.strategy == "fsdp":
            raise StageError(
                "resumable checkpoints and roll-backs are not implemented under FSDP (sharded optimizer "
                "state): set train.checkpoint.every: 0 and train.collapse.action: skip or stop, or use ddp"
            )
        tensors, meta = self.state()
        if self.state_dir is None:
            self._memory_state = (copy.deepcopy(tensors), copy.deepcopy(meta))
        elif self.dist.is_main:
            ckpt.save_state(self.state_dir, tensors, meta)
        self.dist.barrier()

    def restore(self) -> None:
        """Load the last checkpoint (from ``state_dir``, or the in-memory one)."""
        if self.state_dir is None:
            if self._memory_state is None:
                raise StageError("no checkpoint to roll back to")
            tensors, meta = copy.deepcopy(self._memory_state)
        else:
            tensors, meta = ckpt.load_state(self.state_dir)
        self.load_state(tensors, meta)

    def resume(self) -> None:
        """Continue the state in ``state_dir`` (``agentr1 train --resume``): like :meth:`restore`,
        but first :class:`StageError` when it was trained with other params (each key named) or is
        already past ``train.steps`` (:func:`agentr1.rl.checkpoint.check_resume`)."""
        if self.state_dir is None:
            raise StageError("resume needs a state_dir")
        tensors, meta = ckpt.load_state(self.state_dir)
        saved = meta.get("params")
        if saved is not None:
            check_inputs(self.state_dir, meta.get("step"), saved, self.params)
            meta = {**meta, "params": _without_inputs(saved)}
        ckpt.check_resume(self.state_dir, meta, _without_inputs(self.params), self.tcfg.steps)
        self.load_state(tensors, meta)


# run_params keys of the files a run reads (:func:`input_digests`) -> what they are, for messages
INPUTS = {"inputs.index": "the retrieval index", "inputs.dataset": "the processed dataset"}


def input_digests(retrieval_cfg, processed_dir: str | Path) -> dict[str, dict[str, str | None]]:
    """The run params (:data:`INPUTS` keys) that pin what a run reads besides its params: the
    retrieval index (``retrieval.index_dir``, or the server ``retrieval.url``, which has no
    digest here: only its URL is compared) and the processed dataset (questions and corpus,
    ``data.processed_dir``), each ``{"source": path or URL, "sha256": tree digest}``."""
    url = getattr(retrieval_cfg, "url", None)
    index = (
        {"source": url, "sha256": None}
        if url
        else {"source": str(retrieval_cfg.index_dir), "sha256": tree_digest(retrieval_cfg.index_dir)}
    )
    return {
        "inputs.index": index,
        "inputs.dataset": {"source": str(processed_dir), "sha256": tree_digest(processed_dir)},
    }


def check_inputs(path: Path, step: Any, saved: dict[str, Any], current: dict[str, Any]) -> None:
    """:class:`StageError` when the index or dataset this run reads is not the one the state in
    ``path`` was trained on (each named with both digests and sources). A state saved before the
    digests were recorded resumes with a warning: its inputs cannot be checked."""
    missing = [key for key in INPUTS if key in current and key not in saved]
    if missing:
        log.warning(
            "the training state in %s was saved without the digests of %s (an older version): cannot check "
            "that this run reads the same files",
            path,
            " and ".join(INPUTS[k] for k in missing),
        )
    diff = [
        f"{INPUTS[key]}: saved {_show(saved[key])}, now {_show(current.get(key))}"
        for key in INPUTS
        if key in saved and not _same(saved[key], current.get(key))
    ]
    if diff:
        raise StageError(
            f"cannot resume the training state in {path} (step {step}): it was trained on other files than this run "
            "reads:\n  - " + "\n  - ".join(diff) + "\nrebuild the original ones (restore the params they were built "
            "with, e.g. retrieval.*, and rerun `agentr1 index` / `agentr1 prepare`), or rerun without --resume to "
            "train from the cold start on the current ones"
        )


def _same(saved: Any, current: Any) -> bool:
    if not isinstance(saved, dict) or not isinstance(current, dict):
        return saved == current
    if saved.get("sha256") is None or current.get("sha256") is None:  # a server: only where it is
        return saved.get("source") == current.get("source") and saved.get("sha256") == current.get("sha256")
    return saved.get("sha256") == current.get("sha256")  # the same files, wherever they are now


def _show(entry: Any) -> str:
    if not isinstance(entry, dict):
        return "nothing" if entry is None else str(entry)
    digest = entry.get("sha256")
    return f"{entry.get('source')} (sha256 {digest[:16]})" if digest else f"{entry.get('source')} (a server, no digest)"


def _without_inputs(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in INPUTS}


def _jsonable(x):
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x


def _tupled(x):
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x
