"""Stage ``sft``: oracle trajectories -> the base policy -> supervised cold start.

Steps (each timed; the times go into ``timing.json``, which is no DVC output and git-ignored, so
everything DVC tracks - checkpoints, ``metrics.json``, the loss curves - is the same bits on every
run):

1. ``load``: the validated dataset, the retriever (``agentr1 index``) and the ToolEnv;
2. ``oracle_plans``: the oracle's scripts for the first ``sft.train_examples`` train questions
   with distinct texts (:mod:`agentr1.rollout.oracle`, noise ``sft.oracle_noise``, seed
   ``cfg.seed``);
3. ``policy``: ``model.kind: scratch`` - the oracle episodes are played as text through the env,
   the tokenizer is trained on the corpus + those episode texts (system prompt, questions, calls,
   observations, answers) with every word of a passage title (each part of an entity name) kept
   one token, and the model is initialised with seed ``cfg.seed``; ``hf``/``gguf`` -
   :func:`agentr1.models.load_policy`;
4. ``pretrain`` (scratch models with ``sft.pretrain.steps`` > 0): LM pretraining
   (:func:`agentr1.rl.sft.pretrain_lm`), the stand-in for a pretrained LLM, on the texts
   ``sft.pretrain.texts`` picks (:func:`pretrain_texts`): the oracle transcripts of the train
   questions (every token a target; this is what teaches the model to copy names), the corpus
   passages (single or in linked chains), or both;
   ``save_init``: the base policy - pretrained, not tuned on tool use (checkpoint in
   ``sft.init_dir``: the ``base_tool_call`` baseline of ``agentr1 evaluate``);
5. ``oracle_rollout``: the scripts through the real :class:`RolloutEngine` + ToolEnv
   (token-exact trajectories, ``action_mask`` = the oracle's turns);
6. ``train``: :func:`agentr1.rl.sft.train_sft` (skipped with ``sft.enabled: false``);
   ``copy_probe``: :func:`agentr1.rl.sft.copy_probe` of the base policy and of the cold start on
   clean oracle episodes of up to :data:`PROBE_EXAMPLES` dev questions (unseen entities; skipped
   without a dev split) - can the model copy the names its calls and answers need?
7. outputs, written only when everything above succeeded (each atomically): the cold-start
   checkpoint (safetensors + tokenizer) in ``sft.out_dir``, the base policy in ``sft.init_dir``;
   ``sft.report_dir`` with ``metrics.json`` (oracle episode metrics, the training summary, the
   copy probe, the model), ``timing.json`` (seconds per step, tokens/s), ``loss.csv`` (DVC plot: step vs loss),
   ``pretrain_loss.csv`` (the same for pretraining; header only when it is off) and ``oracle_examples.jsonl`` (a few oracle trajectories for humans). A failure anywhere
   leaves no partial output.

The cold start and the baselines are evaluated by the ``evaluate`` stage (``agentr1 evaluate
--policy cold_start | base_tool_call | naive_rag``). MLflow (``tracking.enabled``): one run
``sft`` with the pretraining loss, the loss, lr and gradient norm of every SFT step and the
final metrics (``summary/*``, :func:`summary_metrics`); :func:`log_outputs` logs it from the
outputs (the curves replayed from the CSVs for ``agentr1 track``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from agentr1.data.drills import one_hop_questions, regenerate
from agentr1.errors import StageError
from agentr1.eval.quick import episode_metrics, summarize
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.models import load_policy, save_checkpoint
from agentr1.models.vocab import restrict_vocabulary
from agentr1.rl.sft import copy_probe, pretrain_lm, title_links, train_sft
from agentr1.rollout import save_trajectories
from agentr1.rollout.oracle import corpus_titles, oracle_rollout, oracle_texts, plan_all, unique_questions
from agentr1.stages.context import StageContext

log = logging.getLogger(__name__)

LOSS_FIELDS = ("step", "loss", "lr", "grad_norm", "action_tokens", "tokens")  # no wall times: DVC outputs are the
PRETRAIN_FIELDS = ("step", "loss", "lr", "grad_norm", "tokens")                # same bits on every run (timing.json)
# loss-curve field -> the step metric a run logs (live, or replayed from loss.csv / pretrain_loss.csv by log_outputs)
SFT_METRICS = {"loss": "sft/loss", "lr": "sft/lr", "grad_norm": "sft/grad_norm", "action_tokens": "sft/action_tokens"}
PRETRAIN_METRICS = {"loss": "pretrain/loss", "lr": "pretrain/lr"}
ORACLE_EXAMPLES = 20
PROBE_EXAMPLES = 64


def loss_csv(history: list[dict], fields: tuple[str, ...] = LOSS_FIELDS) -> str:
    """A loss curve as CSV (header ``fields``; :data:`LOSS_FIELDS` for SFT)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: (round(row[k], 6) if isinstance(row[k], float) else row[k]) for k in fields})
    return buf.getvalue()


def _questions(ds, cfg):
    train = unique_questions(ds.split("train"))
    if cfg.sft.train_examples is not None:
        train = train[: cfg.sft.train_examples]
    if not train:
        raise StageError(f"no train questions in {cfg.data.processed_dir}: the oracle has nothing to demonstrate")
    return train


def probe_episodes(ds, env, tokenizer, cfg, titles: dict[str, str], limit: int = PROBE_EXAMPLES) -> list:
    """Clean oracle episodes (no noise) of the first ``limit`` distinct dev questions, the inputs
    of the copy probe; ``[]`` without a dev split."""
    questions = unique_questions(ds.split("dev"))[:limit]
    if not questions:
        return []
    plans = plan_all(questions, titles, env.fmt, 0.0, cfg.seed, env.max_turns, cfg.sft.oracle_lead_space)
    return oracle_rollout(questions, env, tokenizer, cfg.rollout, plans)


def world_texts(ds, env, questions, plans) -> list[str]:
    """Everything a policy of this world reads or writes, for ``model.restrict_vocab``: the
    passages, the questions of every split and the oracle's episode texts (system prompt, calls,
    observations, answers)."""
    passages = [f"{p['title']}\n{p['text']}" for p in ds.corpus]
    asked = [str(q["question"]) for split in sorted(ds.questions) for q in ds.split(split)]
    return passages + asked + oracle_texts(questions, env, plans)


def pretrain_texts(ds, env, cfg, titles: dict[str, str]) -> tuple[list[str], list[list[int]] | None]:
    """The texts of ``sft.pretrain`` (``PretrainConfig``) and, for linked corpus chains, the
    passages' title links: ``episodes`` - the oracle transcripts (noise ``pretrain.noise``, no
    system prompt) of every distinct train question and, with ``pretrain.drills`` on the
    synthetic world, of a one-hop reading drill per train entity and fact
    (:mod:`agentr1.data.drills`); ``corpus`` - the passages; ``mix`` - both."""
    pcfg = cfg.sft.pretrain
    texts: list[str] = []
    if pcfg.texts in ("corpus", "mix"):
        texts += [f"{p['title']}\n{p['text']}" for p in ds.corpus]
    if pcfg.texts in ("episodes", "mix"):
        questions = list(unique_questions(ds.split("train")))
        if pcfg.drills and cfg.data.source == "synthetic":
            try:
                world = regenerate(cfg.data.synthetic, cfg.seed, ds.corpus)
            except ValueError as exc:
                raise StageError(str(exc)) from None
            questions += one_hop_questions(world, "train")
        elif pcfg.drills:
            log.info("sft: sft.pretrain.drills skipped: they need the synthetic world (data.source %s)", cfg.data.source)
        plans = plan_all(questions, titles, env.fmt, pcfg.noise, cfg.seed, env.max_turns, cfg.sft.oracle_lead_space)
        texts += oracle_texts(questions, env, plans, system=False)
    links = None
    if pcfg.chain > 1:  # texts: corpus (config)
        links = title_links([p["title"] for p in ds.corpus], [p["text"] for p in ds.corpus])
    return texts, links


def _oracle_summary(trajs, plans, reward_cfg) -> dict:
    rows = [episode_metrics(t, reward_cfg) for t in trajs]
    summary = summarize(rows)
    summary["kinds"] = dict(sorted(Counter(p.kind for p in plans).items()))
    summary["action_tokens_mean"] = sum(t.num_action_tokens for t in trajs) / len(trajs)
    summary["tokens_mean"] = sum(len(t.input_ids) for t in trajs) / len(trajs)
    return summary


def summary_metrics(tree: dict, prefix: str = "summary/") -> dict[str, float]:
    """``{"summary/<key>.<subkey>...": value}`` for the numeric leaves of a (nested) metrics
    dict: the stage's one-off numbers in one ``summary`` section of MLflow's charts, two levels
    deep at most (``copy.base.continue.top1``), apart from the step curves."""
    out: dict[str, float] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(summary_metrics(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = value
    return out


def run(ctx: StageContext, args: Any = None) -> dict:
    """Run the stage (module docstring); returns the metrics it wrote."""
    t_start = time.perf_counter()
    cfg, run, times, phase = ctx.cfg, ctx.run, ctx.times, ctx.phase
    scfg = cfg.sft
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if scfg.num_threads is not None:
        torch.set_num_threads(scfg.num_threads)
    with contextlib.ExitStack() as outputs:
        with phase("load"):
            ds = ctx.dataset()
            env = ctx.env()
            train_q = _questions(ds, cfg)
        with phase("oracle_plans"):
            titles = corpus_titles(ds.corpus)
            try:
                plans = plan_all(train_q, titles, env.fmt, scfg.oracle_noise, cfg.seed, env.max_turns, scfg.oracle_lead_space)
            except (KeyError, ValueError) as exc:
                raise StageError(f"cannot script the oracle ({exc}): the sft stage needs the synthetic world's "
                                 "supporting_ids (one passage per hop, in the corpus) and env.max_turns > hops") from None
        with phase("policy"):
            texts = None
            if cfg.model.kind == "scratch":
                passages = [f"{p['title']}\n{p['text']}" for p in ds.corpus]
                texts = passages + oracle_texts(train_q, env, plans)
                whole = [w for p in ds.corpus for w in str(p["title"]).split()]  # entity names: one token per part
            model, tokenizer = load_policy(cfg.model, tokenizer_texts=texts, seed=cfg.seed,
                                           whole_words=whole if texts is not None else ())
            if cfg.model.kind != "scratch" and cfg.model.restrict_vocab:
                model, tokenizer, cut = restrict_vocabulary(model, tokenizer, world_texts(ds, env, train_q, plans))
                log.info("sft: vocabulary restricted to the world's tokens: %d -> %d", cut["before"], cut["after"])
            model.to(device)
        n_params = sum(p.numel() for p in model.parameters())
        log.info("sft: policy %s with %.2fM parameters, vocabulary %d", cfg.model.kind, n_params / 1e6, len(tokenizer))
        pre_history: list[dict] = []
        if scfg.pretrain.steps > 0 and cfg.model.kind == "scratch":
            with phase("pretrain"):
                pre_texts, links = pretrain_texts(ds, env, cfg, titles)
                pre_history = pretrain_lm(model, tokenizer, pre_texts, scfg.pretrain, seed=cfg.seed, on_step=lambda r: run.logger.log(
                    {m: r[k] for k, m in PRETRAIN_METRICS.items()}, step=int(r["step"])), links=links)
        elif scfg.pretrain.steps > 0:
            log.info("sft: sft.pretrain skipped: model.kind %s is pretrained already", cfg.model.kind)
        with phase("save_init"):  # renamed into sft.init_dir only when the whole stage succeeds
            init_tmp = outputs.enter_context(atomic_dir(scfg.init_dir))
            model.save_pretrained(init_tmp)
            tokenizer.save_pretrained(init_tmp)
        with phase("oracle_rollout"):
            oracle = oracle_rollout(train_q, env, tokenizer, cfg.rollout, plans)
            probe_eps = probe_episodes(ds, env, tokenizer, cfg, titles)
        copy = {"split": "dev", "episodes": len(probe_eps)}
        if probe_eps:
            with phase("probe_base"):
                copy["base"] = copy_probe(model, probe_eps, tokenizer.pad_token_id)
        oracle_summary = _oracle_summary(oracle, plans, cfg.reward)
        log.info("sft: %d oracle episodes, oracle EM %.3f, kinds %s", len(oracle), oracle_summary["em"], oracle_summary["kinds"])

        def log_step(row: dict) -> None:  # live in MLflow, one point per optimizer step
            run.logger.log({m: row[k] for k, m in SFT_METRICS.items()}, step=int(row["step"]))

        history: list[dict] = []
        with phase("train"):
            if scfg.enabled and scfg.steps > 0:
                history = train_sft(model, oracle, tokenizer.pad_token_id, scfg, seed=cfg.seed, on_step=log_step,
                                    log_every=scfg.log_every)
        if probe_eps:
            with phase("probe_cold_start"):
                copy["cold_start"] = copy_probe(model, probe_eps, tokenizer.pad_token_id)
            log.info("sft: copy probe (dev, teacher-forced top-1 of copyable tokens) base %.3f -> cold start %.3f "
                     "(start %.3f, continue %.3f)", copy["base"]["top1"] or 0, copy["cold_start"]["top1"] or 0,
                     copy["cold_start"]["start"]["top1"] or 0, copy["cold_start"]["continue"]["top1"] or 0)
        tail = history[-10:]
        pre_tail = pre_history[-10:]
        metrics = {
            "oracle": oracle_summary,
            "pretrain": {
                "steps": len(pre_history),
                "first_loss": pre_history[0]["loss"] if pre_history else None,
                "final_loss": sum(r["loss"] for r in pre_tail) / len(pre_tail) if pre_tail else None,
            },
            "train": {
                "enabled": scfg.enabled,
                "steps": len(history),
                "first_loss": history[0]["loss"] if history else None,
                "final_loss": sum(r["loss"] for r in tail) / len(tail) if tail else None,
            },
            "copy": copy,
            "model": {"kind": cfg.model.kind, "parameters": n_params, "vocab_size": len(tokenizer), "device": device},
        }
        with atomic_dir(scfg.report_dir) as tmp:  # the report appears only if the checkpoints were saved
            (tmp / "loss.csv").write_text(loss_csv(history))
            (tmp / "pretrain_loss.csv").write_text(loss_csv(pre_history, PRETRAIN_FIELDS))
            save_trajectories(oracle[:ORACLE_EXAMPLES], tmp / "oracle_examples.jsonl")
            with phase("save_checkpoint"):
                save_checkpoint(model, tokenizer, scfg.out_dir)
            write_json_atomic(Path(tmp) / "metrics.json", metrics)
            log_outputs(ctx, report_dir=tmp)
            times["total"] = round(time.perf_counter() - t_start, 2)
            tokens_per_s = sum(r["tokens"] for r in history) / times["train"] if history and times["train"] else None
            write_json_atomic(Path(tmp) / "timing.json", {"time_s": dict(times), "tokens_per_s": tokens_per_s})
    log.info("sft: oracle EM %.3f, loss %s -> %s in %d steps (total %.0fs)", oracle_summary["em"],
             metrics["train"]["first_loss"], metrics["train"]["final_loss"], len(history), times["total"])
    return metrics


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False, report_dir: str | Path | None = None) -> None:
    """The stage's MLflow run from ``metrics.json`` (``summary/*``) in ``report_dir`` (default
    ``sft.report_dir``); with ``replay`` (a run reconstructed by ``agentr1 track``) also the step
    curves a live run logs while it trains, from ``loss.csv`` and ``pretrain_loss.csv``."""
    out = Path(report_dir or ctx.cfg.sft.report_dir)
    ctx.run.log_metrics(summary_metrics(json.loads((out / "metrics.json").read_text())))
    if replay:
        ctx.run.log_curve(out / "pretrain_loss.csv", PRETRAIN_METRICS)
        ctx.run.log_curve(out / "loss.csv", SFT_METRICS)
