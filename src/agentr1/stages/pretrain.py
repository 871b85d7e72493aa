"""Stage ``pretrain`` (``agentr1 pretrain``): the base policy, a reader that has never seen a
tool-use episode (the nano world's "pretrained LLM"; the sft stage starts from it and the
``base_tool_call`` baseline is it).

Steps (each timed into ``timing.json``, which is no DVC output):

1. ``world``: the dataset's world rebuilt from its params (``data.synthetic.families``,
   ``data.synthetic.distractor_sentences``, ``seed``; :func:`agentr1.data.world.build_world`
   and its passages) - for the names no pretraining text may hold and for the gate's drills
   over held-out entities. The stage reads no dataset file, so a change of the questions
   (``agentr1 prepare``) does not force a new pretraining;
2. ``policy``: ``model.kind: scratch`` - a tokenizer trained on ``pretrain.tokenizer_docs``
   drill documents of a fresh world, every name part of the inventory one token
   (:data:`agentr1.data.names.PARTS`), and a Llama model initialised with ``seed``
   (:func:`agentr1.models.build.scratch_policy`);
   ``hf``/``gguf`` - the pretrained model as downloaded (:func:`agentr1.models.downloaded_checkpoint`;
   no training);
3. ``pretrain`` (scratch): :func:`agentr1.lm.pretrain.pretrain_reader` on reading drills over a
   stream of fresh worlds (:func:`agentr1.data.drills.pretraining_docs`: no dataset entity, no
   answer to memorize); every ``pretrain.gate.every`` steps the gate on the first gate split
   (the gate curve);
4. ``gate``: :func:`agentr1.lm.pretrain.gate_report` on one-hop and multi-passage drills over
   the entities of ``pretrain.gate.splits`` (:func:`agentr1.data.drills.gate_drills`);
5. outputs, each written atomically and only when all of the above succeeded: the base policy
   (safetensors + tokenizer; for a downloaded model a reference to its cached copy,
   :func:`agentr1.models.write_reference`) in ``pretrain.out_dir``; in ``pretrain.report_dir``
   ``metrics.json`` (the gate, the pretraining summary, the model), ``loss.csv`` (step, loss,
   lr, grad_norm, tokens, targets) and ``gate.csv`` (step, one_hop, multi: the curve).

The nano default's base takes about an hour on two cores, so its output is committed to git (a
DVC output with ``cache: false``, as a user starts from a downloaded model): ``dvc repro``
skips the stage while its lock matches, ``dvc repro -f pretrain`` rebuilds it bit for bit.
MLflow: one run ``pretrain`` with the loss and lr per step, the gate curve and the gate
(``summary/*``); :func:`log_outputs` logs it from the outputs (the curves replayed from the CSVs
for a run reconstructed from ``dvc.lock``).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from agentr1.data.drills import gate_drills, pretraining_docs
from agentr1.data.world import build_world, corpus_rows
from agentr1.errors import StageError
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.models import downloaded_checkpoint, load_checkpoint, save_checkpoint, write_reference
from agentr1.models.build import scratch_policy
from agentr1.lm.pretrain import gate_report, pretrain_reader, reading_accuracy
from agentr1.stages.context import StageContext
from agentr1.stages.outputs import curve_csv, summary_metrics
from agentr1.stages.spec import StageSpec

SPEC = StageSpec("pretrain", "the base policy: a reader pretrained on drills over fresh worlds, and its reading gate",
                 order=40)

log = logging.getLogger(__name__)

LOSS_FIELDS = ("step", "loss", "lr", "grad_norm", "tokens", "targets")
GATE_FIELDS = ("step", "one_hop", "multi")
KINDS = ("one_hop", "multi")
LOSS_METRICS = {"loss": "pretrain/loss", "lr": "pretrain/lr"}  # loss.csv column -> the step metric (live and replayed)


def gate_metrics(cfg) -> dict[str, str]:
    """gate.csv column -> the step metric of the gate curve (on the first gate split)."""
    return {k: f"gate/{cfg.pretrain.gate.splits[0]}.{k}" for k in KINDS}


def run(ctx: StageContext, args: Any = None) -> dict:
    """Run the stage (module docstring); returns the metrics it wrote."""
    t_start = time.perf_counter()
    cfg, pcfg, phase = ctx.cfg, ctx.cfg.pretrain, ctx.phase
    if pcfg.num_threads is not None:
        torch.set_num_threads(pcfg.num_threads)
    with phase("world"):
        taken, drills = _world(cfg)
    with phase("policy"):
        downloaded = None
        if cfg.model.kind == "scratch":
            model, tokenizer = scratch_policy(cfg, taken)
        else:
            downloaded = downloaded_checkpoint(cfg.model)
            model, tokenizer = load_checkpoint(downloaded, cfg.model.dtype, cfg.model.trust_remote_code)
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    n_params = sum(p.numel() for p in model.parameters())
    log.info("pretrain: policy %s with %.2fM parameters, vocabulary %d", cfg.model.kind, n_params / 1e6, len(tokenizer))
    history, curve = [], []
    if cfg.model.kind == "scratch":
        with phase("pretrain"):
            history, curve = _pretrain(ctx, model, tokenizer, taken, drills)
    with phase("gate"):
        result = gate_report(model, tokenizer, drills, pcfg.gate.one_hop, pcfg.gate.multi)
    log.info("pretrain: gate %s (%s)", "passed" if result["passed"] else "not passed",
             ", ".join(f"{s}/{k} {e['accuracy']:.3f}" for s, kinds in result["splits"].items() for k, e in kinds.items()))
    tail = history[-50:]
    metrics = {
        "gate": result,
        "pretrain": {
            "steps": len(history),
            "tokens": sum(r["tokens"] for r in history),
            "targets": sum(r["targets"] for r in history),
            "first_loss": history[0]["loss"] if history else None,
            "final_loss": sum(r["loss"] for r in tail) / len(tail) if tail else None,
        },
        "model": {"kind": cfg.model.kind, "parameters": n_params, "vocab_size": len(tokenizer)},
    }
    _write_outputs(ctx, model, tokenizer, downloaded, history, curve, metrics, t_start)
    log_outputs(ctx)
    return metrics


def _world(cfg) -> tuple[set[str], dict]:
    """Step 1: the dataset's entity names (no pretraining text may hold one) and the gate's
    drills per ``(split, kind)``."""
    syn, gate = cfg.data.synthetic, cfg.pretrain.gate
    try:
        world = build_world(syn, cfg.seed)
    except ValueError as exc:
        raise StageError(str(exc)) from None
    corpus = corpus_rows(world, syn.distractor_sentences, cfg.seed)
    drills = {(split, kind): gate_drills(world, corpus, [split], 1 if kind == "one_hop" else gate.passages,
                                         gate.per_split, cfg.seed)
              for split in gate.splits for kind in KINDS}
    empty = [f"{s}/{k}" for (s, k), d in drills.items() if not d]
    if empty:
        raise StageError(f"the gate has no drills for {empty}: data.synthetic.families of those splits is 0; "
                         "set pretrain.gate.splits to splits with entities")
    return {e.name for e in world.entities}, drills


def _pretrain(ctx: StageContext, model, tokenizer, taken: set[str], drills: dict) -> tuple[list[dict], list[dict]]:
    """Step 3: pretraining on the drill stream, the loss logged every step and the gate on the
    first gate split every ``pretrain.gate.every`` steps; returns (loss rows, gate curve)."""
    cfg, pcfg = ctx.cfg, ctx.cfg.pretrain
    syn, gate, first = cfg.data.synthetic, pcfg.gate, pcfg.gate.splits[0]
    curve: list[dict] = []

    def on_step(row: dict) -> None:
        ctx.run.logger.log({m: row[k] for k, m in LOSS_METRICS.items()}, step=int(row["step"]))
        if gate.every and (row["step"] % gate.every == 0 or row["step"] == pcfg.steps):
            point = {"step": row["step"]}
            for kind in KINDS:
                hits = reading_accuracy(model, tokenizer, drills[(first, kind)])
                point[kind] = sum(hits) / len(hits)
            curve.append(point)
            ctx.run.logger.log({m: point[k] for k, m in gate_metrics(cfg).items()}, step=int(row["step"]))
            log.info("pretrain: step %d gate on %s: one-hop %.3f, multi-passage %.3f", row["step"], first,
                     point["one_hop"], point["multi"])

    docs = pretraining_docs(taken, cfg.seed, pcfg.world_families, pcfg.docs_per_world, syn.distractor_sentences,
                            pcfg.passages, pcfg.questions, pcfg.question_first)
    return pretrain_reader(model, tokenizer, docs, pcfg, on_step=on_step, log_every=pcfg.log_every), curve


def _write_outputs(ctx: StageContext, model, tokenizer, downloaded, history: list[dict], curve: list[dict],
                   metrics: dict, t_start: float) -> None:
    """Step 5: the report files (``pretrain.report_dir``) and the base policy (``pretrain.out_dir``:
    :func:`agentr1.models.save_checkpoint`, or a reference to a downloaded model's cached copy),
    each directory atomic; the policy is saved inside the report's temporary directory's
    lifetime, so a failed save leaves the old report in place."""
    pcfg = ctx.cfg.pretrain
    with atomic_dir(Path(pcfg.report_dir)) as rtmp:
        (rtmp / "loss.csv").write_text(curve_csv(history, LOSS_FIELDS))
        (rtmp / "gate.csv").write_text(curve_csv(curve, GATE_FIELDS))
        write_json_atomic(rtmp / "metrics.json", metrics)
        if downloaded is None:
            save_checkpoint(model, tokenizer, pcfg.out_dir)
        else:  # a downloaded model is its own cached copy: refer to it
            with atomic_dir(Path(pcfg.out_dir)) as tmp:
                write_reference(downloaded, tmp)
        ctx.times["total"] = round(time.perf_counter() - t_start, 2)
        tokens_per_s = metrics["pretrain"]["tokens"] / ctx.times["pretrain"] if history else None
        write_json_atomic(rtmp / "timing.json", {"time_s": dict(ctx.times), "tokens_per_s": tokens_per_s})


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False) -> None:
    """The stage's MLflow run from its outputs in ``pretrain.report_dir``: ``metrics.json``
    (``summary/*``) and the gate curve as artifacts; with ``replay`` (a run reconstructed from
    ``dvc.lock``) also the step curves a live run logs while it trains (``loss.csv``,
    ``gate.csv``)."""
    report = Path(ctx.cfg.pretrain.report_dir)
    ctx.run.log_metrics(summary_metrics(json.loads((report / "metrics.json").read_text())))
    ctx.run.log_artifacts([report / "metrics.json", report / "gate.csv"], artifact_path="pretrain")
    if replay:
        ctx.run.log_curve(report / "loss.csv", LOSS_METRICS)
        ctx.run.log_curve(report / "gate.csv", gate_metrics(ctx.cfg))
