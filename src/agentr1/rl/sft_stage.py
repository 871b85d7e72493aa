"""Stage ``sft``: oracle trajectories -> supervised cold start -> dev EM of it and the baselines.

Steps (each timed; the times go into ``metrics.json`` under ``time_s``):

1. ``load``: the validated dataset, the retriever (``agentr1 index``) and the ToolEnv;
2. ``oracle_plans``: the oracle's scripts for the first ``sft.train_examples`` train questions
   with distinct texts (:mod:`agentr1.rollout.oracle`, noise ``sft.oracle_noise``, seed
   ``cfg.seed``);
3. ``policy``: ``model.kind: scratch`` - the oracle episodes are played as text through the env,
   the tokenizer is trained on the corpus + those episode texts (system prompt, questions, calls,
   observations, answers), and the model is initialised with seed ``cfg.seed``; ``hf``/``gguf`` -
   :func:`agentr1.models.load_policy`;
4. ``eval_base``: the *base tool call* baseline with the untrained base policy (before any
   training, so no copy of the base weights is kept);
5. ``oracle_rollout``: the scripts through the real :class:`RolloutEngine` + ToolEnv
   (token-exact trajectories, ``action_mask`` = the oracle's turns);
6. ``train``: :func:`agentr1.rl.sft.train_sft` (skipped with ``sft.enabled: false``);
7. ``eval_cold_start`` and ``eval_naive_rag``: greedy, on the first ``sft.eval_examples`` dev
   questions (all by default), with the cold-start policy;
8. outputs, written only when everything above succeeded (each atomically): the checkpoint
   (safetensors + tokenizer) in ``sft.out_dir``; ``sft.report_dir`` with ``metrics.json``,
   ``loss.csv`` (DVC plot: step vs loss) and ``oracle_examples.jsonl`` (a few oracle
   trajectories for humans). A failure anywhere leaves no partial output.

The untrained scratch base is not saved: it is ``build_scratch_model(cfg.model.scratch,
<tokenizer of the sft checkpoint>, seed=cfg.seed)``, rebuilt bit-identically on demand.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import time
from collections import Counter
from pathlib import Path

import torch

from agentr1.data.schema import read_dataset
from agentr1.data.validation import require_validated
from agentr1.env import ToolEnv
from agentr1.errors import StageError
from agentr1.eval.baselines import base_tool_call, naive_rag
from agentr1.eval.quick import episode_metrics, evaluate_tool_policy, summarize
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.models import load_policy, save_checkpoint
from agentr1.retrieval.base import RetrieverError
from agentr1.rl.sft import train_sft
from agentr1.rollout import make_backend, save_trajectories
from agentr1.rollout.oracle import corpus_titles, oracle_rollout, oracle_texts, plan_all, unique_questions

log = logging.getLogger(__name__)

LOSS_FIELDS = ("step", "loss", "lr", "grad_norm", "action_tokens", "tokens", "elapsed_s")
ORACLE_EXAMPLES = 20


@contextlib.contextmanager
def _phase(times: dict[str, float], name: str):
    log.info("sft: %s ...", name)
    t0 = time.perf_counter()
    yield
    times[name] = round(time.perf_counter() - t0, 2)
    log.info("sft: %s done in %.1fs", name, times[name])


def loss_csv(history: list[dict]) -> str:
    """The loss curve as CSV (header :data:`LOSS_FIELDS`)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=LOSS_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: (round(row[k], 6) if isinstance(row[k], float) else row[k]) for k in LOSS_FIELDS})
    return buf.getvalue()


def _load_env(cfg):
    try:
        from agentr1.retrieval.factory import load_retriever

        retriever = load_retriever(cfg)
    except (RetrieverError, FileNotFoundError) as exc:
        raise StageError(f"cannot load the retriever ({exc}): run `agentr1 index` first") from None
    return ToolEnv.from_config(cfg.env, retriever)


def _questions(ds, cfg):
    train = unique_questions(ds.split("train"))
    if cfg.sft.train_examples is not None:
        train = train[: cfg.sft.train_examples]
    dev = ds.split("dev")
    if cfg.sft.eval_examples is not None:
        dev = dev[: cfg.sft.eval_examples]
    if not train:
        raise StageError(f"no train questions in {cfg.data.processed_dir}: the oracle has nothing to demonstrate")
    if not dev:
        raise StageError(f"no dev questions in {cfg.data.processed_dir}: the cold start cannot be evaluated")
    return train, dev


def _oracle_summary(trajs, plans, reward_cfg) -> dict:
    rows = [episode_metrics(t, reward_cfg) for t in trajs]
    summary = summarize(rows)
    summary["kinds"] = dict(sorted(Counter(p.kind for p in plans).items()))
    summary["action_tokens_mean"] = sum(t.num_action_tokens for t in trajs) / len(trajs)
    summary["tokens_mean"] = sum(len(t.input_ids) for t in trajs) / len(trajs)
    return summary


def run_sft(cfg, args=None) -> dict:
    """Run the stage (module docstring); returns the metrics it wrote."""
    t_start = time.perf_counter()
    require_validated(cfg)
    times: dict[str, float] = {}
    scfg = cfg.sft
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if scfg.num_threads is not None:
        torch.set_num_threads(scfg.num_threads)
    with _phase(times, "load"):
        ds = read_dataset(cfg.data.processed_dir)
        env = _load_env(cfg)
        train_q, dev_q = _questions(ds, cfg)
    with _phase(times, "oracle_plans"):
        titles = corpus_titles(ds.corpus)
        try:
            plans = plan_all(train_q, titles, env.fmt, scfg.oracle_noise, cfg.seed, env.max_turns, scfg.oracle_lead_space)
        except (KeyError, ValueError) as exc:
            raise StageError(f"cannot script the oracle ({exc}): the sft stage needs the synthetic world's "
                             "supporting_ids (one passage per hop, in the corpus) and env.max_turns > hops") from None
    with _phase(times, "policy"):
        texts = None
        if cfg.model.kind == "scratch":
            texts = [f"{p['title']}\n{p['text']}" for p in ds.corpus] + oracle_texts(train_q, env, plans)
        model, tokenizer = load_policy(cfg.model, tokenizer_texts=texts, seed=cfg.seed)
        model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("sft: policy %s with %.2fM parameters, vocabulary %d", cfg.model.kind, n_params / 1e6, len(tokenizer))
    with _phase(times, "eval_base"):
        base_summary, _ = base_tool_call(make_backend(cfg.rollout, model, tokenizer), tokenizer, env, cfg.rollout,
                                         dev_q, cfg.reward, seed=cfg.seed)
    with _phase(times, "oracle_rollout"):
        oracle = oracle_rollout(train_q, env, tokenizer, cfg.rollout, plans)
    oracle_summary = _oracle_summary(oracle, plans, cfg.reward)
    log.info("sft: %d oracle episodes, oracle EM %.3f, kinds %s", len(oracle), oracle_summary["em"], oracle_summary["kinds"])
    history: list[dict] = []
    with _phase(times, "train"):
        if scfg.enabled and scfg.steps > 0:
            history = train_sft(model, oracle, tokenizer.pad_token_id, scfg, seed=cfg.seed, log_every=scfg.log_every)
    backend = make_backend(cfg.rollout, model, tokenizer)
    with _phase(times, "eval_cold_start"):
        cold_summary, _ = evaluate_tool_policy(backend, tokenizer, env, cfg.rollout, dev_q, cfg.reward, seed=cfg.seed)
    with _phase(times, "eval_naive_rag"):
        rag_summary, _ = naive_rag(backend, tokenizer, env, cfg.rollout, dev_q, cfg.reward, seed=cfg.seed)
    tail = history[-10:]
    metrics = {
        "cold_start": cold_summary,
        "base_tool_call": base_summary,
        "naive_rag": rag_summary,
        "oracle": oracle_summary,
        "train": {
            "enabled": scfg.enabled,
            "steps": len(history),
            "first_loss": history[0]["loss"] if history else None,
            "final_loss": sum(r["loss"] for r in tail) / len(tail) if tail else None,
            "tokens_per_s": sum(r["tokens"] for r in history) / times["train"] if history and times["train"] else None,
        },
        "model": {"kind": cfg.model.kind, "parameters": n_params, "vocab_size": len(tokenizer), "device": device},
        "eval_split": "dev",
        "eval_examples": len(dev_q),
        "policies": {"cold_start": "sft", "base_tool_call": "untrained base", "naive_rag": "sft"},
    }
    with atomic_dir(scfg.report_dir) as tmp:  # the report appears only if the checkpoint was saved
        (tmp / "loss.csv").write_text(loss_csv(history))
        save_trajectories(oracle[:ORACLE_EXAMPLES], tmp / "oracle_examples.jsonl")
        with _phase(times, "save_checkpoint"):
            save_checkpoint(model, tokenizer, scfg.out_dir)
        times["total"] = round(time.perf_counter() - t_start, 2)
        metrics["time_s"] = dict(times)
        write_json_atomic(Path(tmp) / "metrics.json", metrics)
    log.info("sft: dev EM cold start %.3f | base tool call %.3f | naive RAG %.3f (total %.0fs)",
             cold_summary["em"], base_summary["em"], rag_summary["em"], times["total"])
    return metrics
