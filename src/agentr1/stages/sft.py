"""Stage ``sft``: a small supervised cold start from the base policy on oracle demonstrations.

Steps (each timed; the times go into ``timing.json``, which is no DVC output and git-ignored, so
everything DVC tracks - the checkpoint, ``metrics.json``, the loss curve - is the same bits on
every run):

1. ``load``: the validated dataset, the retriever (``agentr1 index``) and the ToolEnv;
2. ``oracle_plans``: the oracle's scripts for the first ``sft.train_examples`` train questions
   with distinct texts and for the questions of ``sft.fresh.worlds`` freshly generated worlds
   (:func:`demo_sets`) - the demonstrations (:mod:`agentr1.rollout.oracle`, a share
   ``sft.oracle_noise`` imperfect, seed ``cfg.seed``);
3. ``policy``: the base policy ``pretrain.out_dir`` (``agentr1 pretrain``: a reader that has
   never seen a tool call); a pretrained ``hf``/``gguf`` policy may have its vocabulary cut to
   the world's tokens first (``model.restrict_vocab``);
4. ``oracle_rollout``: the scripts through the real :class:`RolloutEngine` + ToolEnv
   (token-exact trajectories, ``action_mask`` = the oracle's turns);
5. ``train``: :func:`agentr1.lm.sft.train_sft` (skipped with ``sft.enabled: false``);
   ``copy_probe``: :func:`agentr1.lm.sft.copy_probe` of the base policy and of the cold start on
   clean oracle episodes of up to :data:`agentr1.rollout.oracle.PROBE_EXAMPLES` dev questions (unseen entities; skipped
   without a dev split) - can the model copy the names its calls and answers need? The probe's
   gate (``sft.copy_gate``) is recorded with it;
6. outputs, written only when everything above succeeded (each atomically): the cold-start
   checkpoint (safetensors + tokenizer) in ``sft.out_dir``; ``sft.report_dir`` with
   ``metrics.json`` (oracle episode metrics, the training summary, the copy probe and its gate,
   the model), ``timing.json`` (seconds per step, tokens/s), ``loss.csv`` (DVC plot: step vs
   loss) and ``oracle_examples.jsonl`` (a few oracle trajectories for humans). A failure
   anywhere leaves no partial output.

The cold start and the baselines are evaluated by the ``evaluate`` stage (``agentr1 evaluate
--policy cold_start | base_tool_call | naive_rag``). MLflow (``tracking.enabled``): one run
``sft`` with the loss, lr and gradient norm of every SFT step and the final metrics
(``summary/*``, :func:`agentr1.stages.outputs.summary_metrics`); :func:`log_outputs` logs it
from the outputs (the curve replayed from ``loss.csv`` for ``agentr1 track``).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentr1.data.fresh import make_world
from agentr1.data.schema import gold_unknown
from agentr1.env.load import corpus_env
from agentr1.errors import StageError
from agentr1.eval.quick import episode_metrics, summarize
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.lm.sft import copy_probe, train_sft
from agentr1.models import load_checkpoint, save_checkpoint
from agentr1.models.vocab import restrict_vocabulary
from agentr1.rollout import save_trajectories
from agentr1.rollout.oracle import (
    corpus_titles,
    oracle_rollout,
    plan_all,
    probe_episodes,
    unique_questions,
    world_texts,
)
from agentr1.stages.context import StageContext
from agentr1.stages.outputs import curve_csv, summary_metrics
from agentr1.stages.spec import StageSpec

SPEC = StageSpec("sft", "the SFT cold start from the base policy on oracle demonstrations", order=50)

log = logging.getLogger(__name__)

LOSS_FIELDS = ("step", "loss", "lr", "grad_norm", "action_tokens", "tokens")  # no wall times (timing.json)
# loss-curve field -> the step metric a run logs (live, or replayed from loss.csv by log_outputs)
SFT_METRICS = {"loss": "sft/loss", "lr": "sft/lr", "grad_norm": "sft/grad_norm", "action_tokens": "sft/action_tokens"}
ORACLE_EXAMPLES = 20


@dataclass
class DemoSet:
    """Questions the oracle demonstrates in one environment (the dataset's, or a fresh world's)."""

    questions: list
    env: Any
    corpus: list
    plans: list = field(default_factory=list)


def demo_sets(ctx: StageContext, ds) -> list[DemoSet]:
    """The demonstrations' questions: the first ``sft.train_examples`` distinct train questions
    whose gold passages are in the corpus (not :func:`~agentr1.data.schema.gold_unknown`: the
    oracle cannot script searches it does not know) in the dataset's environment, then
    ``sft.fresh.worlds`` fresh worlds (seeded apart from RL's), each in an environment over its own
    passages."""
    cfg = ctx.cfg
    train = [q for q in unique_questions(ds.split("train")) if not gold_unknown(q)]  # no search to script
    if cfg.sft.train_examples is not None:
        train = train[: cfg.sft.train_examples]
    sets = [DemoSet(train, ctx.env(), ds.corpus)] if train else []
    f = cfg.sft.fresh
    if f.worlds and cfg.data.source != "synthetic":
        raise StageError(
            f"sft.fresh.worlds generates synthetic worlds, but data.source is {cfg.data.source!r}: "
            "set sft.fresh.worlds: 0 for real data"
        )
    taken = frozenset(str(p["title"]) for p in ds.corpus)
    for k in range(f.worlds):
        world = make_world(cfg.data.synthetic, k, f.families, f.questions, f"{cfg.seed}/sft", taken, "sft.fresh")
        env = corpus_env(cfg.env, cfg.retrieval, world.corpus, cfg.seed)
        sets.append(DemoSet(unique_questions(world.questions), env, world.corpus))
    if not sets:
        raise StageError(f"no train questions in {cfg.data.processed_dir}: the oracle has nothing to demonstrate")
    return sets


def _oracle_summary(trajs, plans, reward_cfg) -> dict:
    rows = [episode_metrics(t, reward_cfg) for t in trajs]
    summary = summarize(rows)
    summary["kinds"] = dict(sorted(Counter(p.kind for p in plans).items()))
    summary["action_tokens_mean"] = sum(t.num_action_tokens for t in trajs) / len(trajs)
    summary["tokens_mean"] = sum(len(t.input_ids) for t in trajs) / len(trajs)
    return summary


def copy_gate(copy: dict, gate) -> dict:
    """The copy probe's gate: the cold start's ``start`` and ``continue`` top-1 against
    ``sft.copy_gate`` (``passed`` when both reach theirs)."""
    got = {kind: (copy.get("cold_start") or {}).get(kind, {}).get("top1") for kind in ("start", "continue")}
    need = {"start": gate.start, "continue": gate.continue_}
    return {"thresholds": need, "passed": all(got[k] is not None and got[k] >= need[k] for k in need)}


def run(ctx: StageContext, args: Any = None) -> dict:
    """Run the stage (module docstring); returns the metrics it wrote."""
    t_start = time.perf_counter()
    cfg, times, phase = ctx.cfg, ctx.times, ctx.phase
    scfg = cfg.sft
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if scfg.num_threads is not None:
        torch.set_num_threads(scfg.num_threads)
    with phase("load"):
        ds = ctx.dataset()
        env = ctx.env()
        demos = demo_sets(ctx, ds)
        base = ctx.checkpoint(cfg.pretrain.out_dir, "agentr1 pretrain (dvc repro pretrain)")
    with phase("oracle_plans"):
        plans = _plan_demos(demos, cfg)
    with phase("policy"):
        model, tokenizer = _policy(base, cfg, ds, demos)
        model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "sft: base policy %s (%s) with %.2fM parameters, vocabulary %d",
        base,
        cfg.model.kind,
        n_params / 1e6,
        len(tokenizer),
    )
    oracle, probe_eps, copy = _oracle_episodes(ctx, ds, env, demos, model, tokenizer)
    oracle_summary = _oracle_summary(oracle, plans, cfg.reward)
    log.info(
        "sft: %d oracle episodes, oracle EM %.3f, kinds %s", len(oracle), oracle_summary["em"], oracle_summary["kinds"]
    )
    with phase("train"):
        history = _train(ctx, model, oracle, tokenizer.pad_token_id)
    if probe_eps:
        with phase("probe_cold_start"):
            copy["cold_start"] = copy_probe(model, probe_eps, tokenizer.pad_token_id)
        copy["gate"] = copy_gate(copy, scfg.copy_gate)
        _log_copy(copy)
    metrics = {
        "oracle": oracle_summary,
        "train": _train_summary(
            scfg, history, oracle, sum(len(d.questions) for d in demos if d.corpus is not ds.corpus)
        ),
        "copy": copy,
        "model": {"kind": cfg.model.kind, "parameters": n_params, "vocab_size": len(tokenizer), "device": device},
    }
    _write_outputs(ctx, model, tokenizer, history, oracle, metrics, t_start)
    log.info(
        "sft: oracle EM %.3f, loss %s -> %s in %d steps (total %.0fs)",
        oracle_summary["em"],
        metrics["train"]["first_loss"],
        metrics["train"]["final_loss"],
        len(history),
        times["total"],
    )
    return metrics


def _oracle_episodes(ctx: StageContext, ds, env, demos: list, model, tokenizer) -> tuple[list, list, dict]:
    """The oracle's scripts rolled out (the demonstrations) and the dev copy-probe episodes, with the
    base policy's probe on them; returns the demonstrations, the probe episodes and the ``copy`` block."""
    cfg, phase = ctx.cfg, ctx.phase
    with phase("oracle_rollout"):
        oracle = [t for d in demos for t in oracle_rollout(d.questions, d.env, tokenizer, cfg.rollout, d.plans)]
        probe_eps = probe_episodes(ds, env, tokenizer, cfg, corpus_titles(ds.corpus))
    copy = {"split": "dev", "episodes": len(probe_eps)}
    if probe_eps:
        with phase("probe_base"):
            copy["base"] = copy_probe(model, probe_eps, tokenizer.pad_token_id)
    return oracle, probe_eps, copy


def _train(ctx: StageContext, model, oracle: list, pad_token_id: int) -> list[dict]:
    """SFT on the oracle's episodes (nothing with ``sft.enabled: false`` or 0 steps), each optimizer
    step logged live to MLflow; the per-step history."""
    cfg, scfg = ctx.cfg, ctx.cfg.sft
    if not (scfg.enabled and scfg.steps > 0):
        return []

    def log_step(row: dict) -> None:  # live in MLflow, one point per optimizer step
        ctx.run.logger.log({m: row[k] for k, m in SFT_METRICS.items()}, step=int(row["step"]))

    return train_sft(model, oracle, pad_token_id, scfg, seed=cfg.seed, on_step=log_step, log_every=scfg.log_every)


def _log_copy(copy: dict) -> None:
    log.info(
        "sft: copy probe (dev, teacher-forced top-1 of copyable tokens) base %.3f -> cold start %.3f "
        "(start %.3f, continue %.3f; gate %s)",
        copy["base"]["top1"] or 0,
        copy["cold_start"]["top1"] or 0,
        copy["cold_start"]["start"]["top1"] or 0,
        copy["cold_start"]["continue"]["top1"] or 0,
        "passed" if copy["gate"]["passed"] else "not passed",
    )


def _write_outputs(
    ctx: StageContext, model, tokenizer, history: list[dict], oracle: list, metrics: dict, t_start: float
) -> None:
    """The report folder (loss curve, oracle examples, metrics, timing) and the checkpoint: the report
    appears only if the checkpoint was saved."""
    scfg, times = ctx.cfg.sft, ctx.times
    with atomic_dir(scfg.report_dir) as tmp:
        (tmp / "loss.csv").write_text(curve_csv(history, LOSS_FIELDS))
        save_trajectories(oracle[:ORACLE_EXAMPLES], tmp / "oracle_examples.jsonl")
        with ctx.phase("save_checkpoint"):
            save_checkpoint(model, tokenizer, scfg.out_dir)
        write_json_atomic(Path(tmp) / "metrics.json", metrics)
        log_outputs(ctx, report_dir=tmp)
        times["total"] = round(time.perf_counter() - t_start, 2)
        tokens_per_s = sum(r["tokens"] for r in history) / times["train"] if history and times["train"] else None
        write_json_atomic(Path(tmp) / "timing.json", {"time_s": dict(times), "tokens_per_s": tokens_per_s})


def _plan_demos(demos: list, cfg) -> list:
    """The oracle's scripted plan for every demonstration question (set on each demonstration set,
    and returned in one list); a :class:`StageError` when the data cannot be scripted."""
    scfg = cfg.sft
    try:
        for d in demos:
            d.plans = plan_all(
                d.questions,
                corpus_titles(d.corpus),
                d.env.fmt,
                scfg.oracle_noise,
                cfg.seed,
                d.env.max_turns,
                scfg.oracle_lead_space,
            )
    except (KeyError, ValueError) as exc:
        raise StageError(
            f"cannot script the oracle ({exc}): the sft stage needs the synthetic world's "
            "supporting_ids (one passage per hop, in the corpus) and env.max_turns > hops"
        ) from None
    return [p for d in demos for p in d.plans]


def _policy(base, cfg, ds, demos: list):
    """The base policy, its vocabulary restricted to the world's tokens with ``model.restrict_vocab``."""
    model, tokenizer = load_checkpoint(base, cfg.model.dtype)
    if cfg.model.kind != "scratch" and cfg.model.restrict_vocab:
        texts = [t for d in demos for t in world_texts(ds, d.env, d.questions, d.plans)]
        texts += [f"{p['title']}\n{p['text']}" for d in demos[1:] for p in d.corpus]
        model, tokenizer, cut = restrict_vocabulary(model, tokenizer, texts)
        log.info("sft: vocabulary restricted to the world's tokens: %d -> %d", cut["before"], cut["after"])
    return model, tokenizer


def _train_summary(scfg, history: list[dict], oracle: list, fresh_examples: int) -> dict:
    """metrics.json's ``train`` block: the steps, epochs and the first and final (last 10) loss."""
    tail = history[-10:]
    return {
        "enabled": scfg.enabled,
        "examples": len(oracle),
        "fresh_examples": fresh_examples,
        "steps": len(history),
        "batch_size": scfg.batch_size,
        "epochs": len(history) * scfg.batch_size / len(oracle) if oracle else None,
        "first_loss": history[0]["loss"] if history else None,
        "final_loss": sum(r["loss"] for r in tail) / len(tail) if tail else None,
    }


def log_outputs(
    ctx: StageContext, args: Any = None, replay: bool = False, report_dir: str | Path | None = None
) -> None:
    """The stage's MLflow run from ``metrics.json`` (``summary/*``) in ``report_dir`` (default
    ``sft.report_dir``); with ``replay`` (a run reconstructed by ``agentr1 track``) also the step
    curve a live run logs while it trains, from ``loss.csv``."""
    out = Path(report_dir or ctx.cfg.sft.report_dir)
    ctx.run.log_metrics(summary_metrics(json.loads((out / "metrics.json").read_text())))
    if replay:
        ctx.run.log_curve(out / "loss.csv", SFT_METRICS)
