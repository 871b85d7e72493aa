"""Stage ``evaluate``: one policy, greedy, on every split of ``evaluate.splits``.

``agentr1 evaluate --policy NAME``, where NAME is

* a named run of params ``runs`` (kind ``rl``): the checkpoint ``<train.out_dir>/<NAME>/checkpoint``
  written by ``agentr1 train --run NAME``;
* ``cold_start``: the SFT checkpoint ``sft.out_dir``, run as an agent in the ToolEnv;
* ``base_tool_call``: the base policy ``pretrain.out_dir`` (``agentr1 pretrain``: it reads, but was
  never trained on a tool call), run as an agent in the ToolEnv - the paper's prompted-base-model
  baseline;
* ``naive_rag``: the cold-start weights, one retrieval with the question as the query, then one
  answer turn (:func:`agentr1.eval.baselines.naive_rag`).

For each split, the first ``evaluate.max_examples`` questions (all when null) are rolled out
greedily (:func:`agentr1.eval.quick.evaluate_tool_policy`), ``evaluate.batch_size`` questions per
engine call (also the most prompts per backend call), and scored per question
(:func:`agentr1.eval.quick.episode_metrics`, plus ``early_answer``: a multi-hop question answered
before the episode's retrievals had returned all its supporting passages,
:mod:`agentr1.eval.support`, whose log records the ids every call returned while the policy runs);
:func:`agentr1.eval.metrics.summarize_split` adds the bootstrap CIs and the breakdowns by question
type and hop count.

Outputs, in ``<evaluate.out_dir>/<NAME>/`` (one atomic directory; a failure leaves the old one):

* ``metrics.json`` (DVC metrics; deterministic - no wall-clock times): ``policy``, ``kind``,
  ``checkpoint``, ``overrides`` (the run's overrides of ``train``; null for baselines),
  ``eval_data`` (fingerprint of the evaluated question ids), ``seed``, ``bootstrap``,
  ``splits: {split: summary}`` and the flat keys ``<split>/<metric>`` (``test/em``,
  ``test/em_ci_lower``, ``ood/f1``, ...) that MLflow and the promotion gate read;
* ``episodes.jsonl``: one row per question, sorted by split then id (:data:`EPISODE_FIELDS`);
* ``timing.json``: seconds per phase, the device and the MLflow run / registry outcome (no DVC
  output and git-ignored, so that everything DVC tracks is the same bits on every run).

MLflow (``tracking.enabled``): one run ``evaluate@<NAME>`` (``evaluate_baseline@<NAME>`` for the
baselines, matching their ``dvc.lock`` key) with the flat metrics at step 0, a seeded sample of
``tracking.trace_sample`` episodes per split as traces, every episode of a split as a table
``eval/<split>_trajectories.json`` (a run that ``agentr1 track`` reconstructs from the outputs:
the same episodes' root spans and ``eval/<split>_episodes.json``, :func:`log_outputs`); for RL
runs and the cold start with ``evaluate.register``, the checkpoint is logged (model
``policy-<NAME>``, the metrics logged with it, once) and registered as a version of
``tracking.registered_model`` with its provenance: tags ``agentr1.train_run_id`` (the ``train@``
run whose checkpoint digest matches), ``agentr1.checkpoint_sha256``, ``agentr1.variant`` and a
description with the headline EM. An RL
policy becomes ``challenger`` and the promotion gate (``tracking.gate_metric``) moves
``champion`` only when the challenger beats it beyond the CI (the first one becomes champion);
the cold start is a baseline: alias ``cold_start``, never ``challenger``, never gated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentr1.errors import StageError
from agentr1.eval.baselines import naive_rag
from agentr1.eval.metrics import MEANS, SCORES, summarize_split
from agentr1.eval.quick import calls_by_tool, episode_metrics, evaluate_tool_policy, sample_policy, sampling_summary
from agentr1.eval.support import early_answer, recording
from agentr1.io import atomic_dir, tree_digest, write_json_atomic
from agentr1.models import is_checkpoint, load_checkpoint, resolve_checkpoint
from agentr1.rollout import make_backend
from agentr1.rollout.engine import decode
from agentr1.rollout.trajectory import Trajectory
from agentr1.stages.context import StageContext
from agentr1.tracking.run import CHECKPOINT_TAG

log = logging.getLogger(__name__)

BASELINES = ("cold_start", "base_tool_call", "naive_rag")
# early_answer (appended last): 1.0 for a multi-hop question answered before its supporting passages
# were all retrieved, 0.0 otherwise (single-hop or unanswered: 0.0); agentr1.eval.support
EPISODE_FIELDS = ("id", "split", "question", "type", "hops", "em", "f1", "subem", "format_ok", "answered",
                  "tool_calls", "turns", "reward", "answer", "golds", "reason", "early_answer")
FLAT_KEYS = ("n", *MEANS, *(f"{m}_ci_{side}" for m in SCORES for side in ("lower", "upper")))


@dataclass(frozen=True)
class Policy:
    """What ``--policy NAME`` resolves to: the kind, its checkpoint, the DVC stage key (used as
    the MLflow run name) and whether it goes to the model registry."""

    name: str
    kind: str  # rl | cold_start | base_tool_call | naive_rag
    checkpoint: Path
    registrable: bool
    run_name: str
    produced_by: str


def resolve_policy(cfg, name: str | None) -> Policy:
    """The :class:`Policy` of ``name``; :class:`StageError` naming the allowed names for an unknown
    one and the stage to run first when its checkpoint is missing."""
    allowed = f"the runs in params `runs` ({', '.join(sorted(cfg.runs))}) or the baselines {', '.join(BASELINES)}"
    if not name:
        raise StageError(f"--policy NAME is required: NAME is one of {allowed}")
    if name in cfg.runs and name in BASELINES:
        raise StageError(f"run {name!r} in params `runs` shadows the baseline of the same name: rename the run")
    if name in cfg.runs:
        ckpt = Path(cfg.train_for(name).out_dir) / name / "checkpoint"
        policy = Policy(name, "rl", ckpt, True, f"evaluate@{name}",
                        f"`agentr1 train --run {name}` (or `dvc repro train@{name}`)")
    elif name in BASELINES:
        base = name == "base_tool_call"
        ckpt = Path(cfg.pretrain.out_dir if base else cfg.sft.out_dir)
        policy = Policy(name, name, ckpt, name == "cold_start", f"evaluate_baseline@{name}",
                        "`agentr1 pretrain` (or `dvc repro pretrain`)" if base else "`agentr1 sft` (or `dvc repro sft`)")
    else:
        raise StageError(f"unknown policy {name!r}: --policy takes {allowed}")
    if not is_checkpoint(policy.checkpoint):
        raise StageError(f"no checkpoint for policy {name!r} in {policy.checkpoint}: run {policy.produced_by} first")
    return policy


def _check_gate_metric(cfg) -> None:
    """The gate reads ``<split>/<metric>`` (+ CI) from the evaluation: fail before any work when
    this evaluation would not produce it."""
    metric = cfg.tracking.gate_metric
    split, _, name = metric.partition("/")
    if split not in cfg.evaluate.splits or name not in SCORES:
        raise StageError(
            f"tracking.gate_metric {metric!r} is not produced by this evaluation (evaluate.splits "
            f"{cfg.evaluate.splits}, metrics {list(SCORES)}): add the split, pick another metric, or set "
            "evaluate.register: false"
        )


def select_questions(ds, splits: Sequence[str], max_examples: int | None) -> dict[str, list[dict[str, Any]]]:
    """The first ``max_examples`` questions (all when ``None``) of each split, in dataset order."""
    out = {}
    for split in splits:
        qs = ds.split(split)
        if not qs:
            raise StageError(f"split {split!r} has no questions in the processed data: remove it from evaluate.splits")
        out[split] = list(qs if max_examples is None else qs[:max_examples])
    return out


def eval_data_fingerprint(questions: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """``<split>+<split>:<sha256[:16]>`` of the evaluated question ids per split (the registry's
    ``agentr1.eval_data`` tag: the gate compares only versions evaluated on the same questions)."""
    ids = {split: sorted(str(q["id"]) for q in qs) for split, qs in questions.items()}
    digest = hashlib.sha256(json.dumps(ids, sort_keys=True).encode()).hexdigest()[:16]
    return f"{'+'.join(questions)}:{digest}"


def episode_row(q: Mapping[str, Any], split: str, scores: Mapping[str, Any], answer: str | None) -> dict[str, Any]:
    """One line of ``episodes.jsonl`` (:data:`EPISODE_FIELDS`)."""
    row = {"id": str(q["id"]), "split": split, "question": q["question"], "type": q.get("type"),
           "hops": None if q.get("hops") is None else int(q["hops"])}
    row.update({k: float(scores[k]) for k in MEANS})
    row.update(answer=answer, golds=[str(g) for g in q.get("answers", [])], reason=str(scores.get("reason", "")))
    return {k: row[k] for k in EPISODE_FIELDS}


class _RecordingBackend:
    """A backend wrapper keeping each (prompt ids, generation) pair, in call order."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.calls: list[tuple[list[int], Any]] = []

    def generate(self, prompts, max_new_tokens, stop_strings, temperature, top_p, seed):
        gens = self.backend.generate(prompts, max_new_tokens, stop_strings, temperature, top_p, seed)
        self.calls += [(list(p), g) for p, g in zip(prompts, gens)]
        return gens


def per_tool_names(env) -> list[str]:
    """The env's tools when it has several (rows then get ``calls_by_tool``), else ``[]`` (one
    tool: ``tool_calls`` is its count, and the rows keep their fields)."""
    return list(env.tools) if len(env.tools) > 1 else []


def _tool_policy_batch(backend, tokenizer, env, rollout_cfg, reward_cfg, questions, split, seed):
    """Greedy agent rollouts in the ToolEnv -> (rows, trajectories with their outcome reward); the
    passage ids the calls returned are recorded for ``early_answer`` (:mod:`agentr1.eval.support`)."""
    with recording(env) as log:
        _, trajs = evaluate_tool_policy(backend, tokenizer, log.env, rollout_cfg, questions, reward_cfg, seed=seed)
    rows, tools = [], per_tool_names(env)
    for q, t in zip(questions, trajs):
        scores = episode_metrics(t, reward_cfg)
        scores["early_answer"] = early_answer(q, bool(scores["answered"]), log.retrieved(t))
        t.outcome_reward = float(scores["reward"])
        rows.append(episode_row(q, split, scores, t.answer))
        if tools:
            rows[-1]["calls_by_tool"] = calls_by_tool(t, tools)
    return rows, trajs


def sampled(backend, tokenizer, env, cfg, questions: Mapping[str, Sequence[dict]]) -> dict[str, Any]:
    """``evaluate.sampling``: ``k`` samples per question of every split at the RL temperature
    (seeded from ``seed``), summarized by :func:`agentr1.eval.quick.sampling_summary`."""
    k = cfg.evaluate.sampling.k
    per_call = max(cfg.evaluate.batch_size // k, 1)
    out: dict[str, Any] = {"k": k, "temperature": cfg.rollout.temperature, "top_p": cfg.rollout.top_p, "splits": {}}
    for split, qs in questions.items():
        ems: list[list[float]] = []
        for start in range(0, len(qs), per_call):
            ems += sample_policy(backend, tokenizer, env, cfg.rollout, qs[start : start + per_call], cfg.reward, k,
                                 seed=cfg.seed + start)
        out["splits"][split] = sampling_summary(qs, ems)
    return out


def _naive_rag_batch(backend, tokenizer, env, rollout_cfg, reward_cfg, questions, split, seed):
    """Naive RAG -> (rows, one-turn trajectories: the prompt holds the retrieved passages and the
    ``<answer>`` tag, the response is exactly the generated tokens). It makes no call: for
    ``early_answer`` its retrieved passages are those of its one retrieval, in the prompt."""
    rec = _RecordingBackend(backend)
    with recording(env) as log:
        _, records = naive_rag(rec, tokenizer, env, rollout_cfg, questions, reward_cfg, seed=seed)
        retrieved = log.take("search")
    if len(rec.calls) != len(records) or len(retrieved) != len(records):
        raise RuntimeError(f"naive_rag made {len(rec.calls)} generations and {len(retrieved)} retrievals for "
                           f"{len(records)} questions")
    rows, trajs = [], []
    for q, r, (prompt_ids, gen), passages in zip(questions, records, rec.calls, retrieved):
        r = {**r, "early_answer": early_answer(q, r["answer"] is not None, passages)}
        ids = list(gen.token_ids)
        text = decode(tokenizer, ids)
        t = Trajectory(
            qid=str(q["id"]), question=q["question"], golds=list(r["golds"]), prompt_ids=prompt_ids,
            response_ids=ids, action_mask=[1] * len(ids), logprobs=[float(x) for x in gen.logprobs][: len(ids)],
            turn_spans=[(0, len(ids))], turn_texts=[text], outcomes=[[]], answer=r["answer"], reason=r["reason"],
            outcome_reward=float(r["reward"]), prompt_text=r["prompt_text"], response_text=text,
        )
        trajs.append(t)
        rows.append(episode_row(q, split, r, r["answer"]))
        if per_tool_names(env):
            rows[-1]["calls_by_tool"] = calls_by_tool(t, per_tool_names(env))
    return rows, trajs


def _progress(total: int, desc: str):
    """A tqdm bar on an interactive stderr, else ``None`` (log lines instead)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="batch", dynamic_ncols=True)


def flat_metrics(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``{"<split>/<key>": value}`` for the split-level numbers (:data:`FLAT_KEYS`)."""
    return {f"{split}/{k}": s[k] for split, s in summaries.items() for k in FLAT_KEYS if k in s}


def _register(cfg, run, policy: Policy, flat: dict[str, float], eval_data: str) -> dict[str, Any]:
    """Register the evaluated checkpoint with its provenance: the ``train@`` run that wrote the
    weights (found by the checkpoint digest it tagged), the digest, the variant and a description
    with the headline EM. A trained policy becomes ``challenger`` and goes through the gate; a
    baseline (the cold start) gets its own alias (its name) and never takes ``challenger``."""
    from agentr1.tracking.registry import CHALLENGER, describe_version, promote, train_run_of

    digest = tree_digest(policy.checkpoint)
    rl = policy.kind == "rl"
    train_run = train_run_of(run.client(), run.experiment_id, digest) if rl else None
    tags = {CHECKPOINT_TAG: digest, "agentr1.variant": policy.name, "agentr1.policy_kind": policy.kind}
    if train_run is not None:
        tags["agentr1.train_run_id"] = train_run.info.run_id
    mv = run.log_model(policy.checkpoint, flat, eval_data=eval_data, name=f"policy-{policy.name}",
                       alias=CHALLENGER if rl else policy.name, tags=tags,
                       description=describe_version(policy.name, flat, train_run))
    info: dict[str, Any] = {"model": cfg.tracking.registered_model, "version": str(mv.version),
                            "train_run_id": tags.get("agentr1.train_run_id")}
    if rl:
        info["promotion"] = promote(cfg.tracking.registered_model, cfg.tracking.gate_metric).to_dict()
    return info


def _registers(cfg, policy: Policy) -> bool:
    return policy.registrable and cfg.evaluate.register_ and cfg.tracking.enabled


def _run_tags(policy: Policy, eval_data: str) -> dict[str, str]:
    return {"agentr1.policy": policy.name, "agentr1.policy_kind": policy.kind, "agentr1.eval_data": eval_data}


def read_episodes(cfg, out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """``episodes.jsonl`` of an evaluation, per split, in the order the episodes were played (the
    questions :func:`select_questions` picks); :class:`StageError` when the file and the
    processed data disagree on the questions."""
    from agentr1.data.schema import read_dataset

    rows = {(r["split"], r["id"]): r for r in map(json.loads, (out_dir / "episodes.jsonl").read_text().splitlines())}
    questions = select_questions(read_dataset(cfg.data.processed_dir), cfg.evaluate.splits, cfg.evaluate.max_examples)
    order = [(split, str(q["id"])) for split, qs in questions.items() for q in qs]
    if sorted(order) != sorted(rows):
        raise StageError(f"{out_dir / 'episodes.jsonl'} holds other questions than evaluate.splits/max_examples pick from "
                         f"{cfg.data.processed_dir}: re-run the evaluation (`dvc repro`)")
    return {split: [rows[(split, str(q["id"]))] for q in qs] for split, qs in questions.items()}


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False,
                trajectories: Mapping[str, Sequence[Trajectory]] | None = None,
                out_dir: str | Path | None = None) -> dict[str, Any]:
    """The stage's MLflow run from ``metrics.json`` and ``episodes.jsonl`` in ``out_dir``
    (default ``<evaluate.out_dir>/<policy>``): the policy tags, the flat metrics (logged with the
    registered model when the policy is registered, else to the run), per split a seeded sample
    of ``tracking.trace_sample`` episodes as traces and every episode as a table, then the
    registration and, for an RL policy, the gate (:func:`_register`). ``trajectories`` (a live
    run's, per split) give full traces and the table ``eval/<split>_trajectories.json``; without
    them (a run reconstructed by ``agentr1 track``) the traces are the episodes' root spans and
    the table is ``eval/<split>_episodes.json``. Returns the registry outcome (version, train
    run, gate decision; ``{}`` when not registered)."""
    cfg, run = ctx.cfg, ctx.run
    policy = resolve_policy(cfg, getattr(args, "policy", None))
    out = Path(out_dir or Path(cfg.evaluate.out_dir) / policy.name)
    metrics = json.loads((out / "metrics.json").read_text())
    # the flat keys metrics.json holds: the split summaries' and, for a sampled policy, sampled EM / pass@k
    flat = {k: v for k, v in metrics.items() if "/" in k and isinstance(v, (int, float))}
    eval_data = metrics["eval_data"]
    register = _registers(cfg, policy)
    if register:
        _check_gate_metric(cfg)
    run.set_tags(_run_tags(policy, eval_data))
    if not register:  # a registered model's metrics are logged with it, to this run (once)
        run.logger.log(flat, step=0)
    tags = {"agentr1.policy": policy.name}
    if trajectories is not None:
        for split, trajs in trajectories.items():
            run.log_traces(trajs, split=split, tags=tags)
            run.log_table(trajs, f"eval/{split}_trajectories.json")
    else:
        for split, rows in read_episodes(cfg, out).items():
            run.log_episode_traces(rows, split=split, tags=tags)
            run.log_episode_table(rows, f"eval/{split}_episodes.json")
    return _register(cfg, run, policy, flat, eval_data) if register else {}


def before(cfg, args: Any = None) -> None:
    """Fail before any run or work on a bad ``--policy``, a missing checkpoint or a gate metric
    this evaluation would not produce."""
    if _registers(cfg, resolve_policy(cfg, getattr(args, "policy", None))):
        _check_gate_metric(cfg)


def names(cfg, args: Any = None) -> tuple[str, str | None]:
    """The policy's ``dvc.lock`` key as the run name; RL runs log their effective config."""
    policy = resolve_policy(cfg, getattr(args, "policy", None))
    return policy.run_name, policy.name if policy.kind == "rl" else None


def run(ctx: StageContext, args: Any = None) -> dict[str, Any]:
    """Run the stage (module docstring); returns the metrics it wrote."""
    t_start = time.perf_counter()
    cfg, run, times = ctx.cfg, ctx.run, ctx.times
    ecfg = cfg.evaluate
    policy = resolve_policy(cfg, getattr(args, "policy", None))
    register = _registers(cfg, policy)
    with ctx.phase("load", digits=3, quiet=True):
        questions = select_questions(ctx.dataset(), ecfg.splits, ecfg.max_examples)
        env = ctx.env()
        if ecfg.num_threads is not None:
            torch.set_num_threads(ecfg.num_threads)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model, tokenizer = load_checkpoint(policy.checkpoint, cfg.model.dtype, cfg.model.trust_remote_code)
        rollout_cfg = cfg.rollout.model_copy(update={"batch_size": ecfg.batch_size})
        if rollout_cfg.backend == "hf":
            model.to(device)
        backend = make_backend(rollout_cfg, model, tokenizer, model_path=str(resolve_checkpoint(policy.checkpoint)))
    batch_fn = _naive_rag_batch if policy.kind == "naive_rag" else _tool_policy_batch
    eval_data = eval_data_fingerprint(questions)
    n_batches = sum(-(-len(qs) // ecfg.batch_size) for qs in questions.values())
    log.info("evaluate@%s (%s): %s from %s, %d batch(es) of <= %d", policy.name, policy.kind,
             ", ".join(f"{s} {len(q)}" for s, q in questions.items()), policy.checkpoint, n_batches, ecfg.batch_size)

    run.set_tags(_run_tags(policy, eval_data))
    rows: dict[str, list[dict[str, Any]]] = {}
    trajs: dict[str, list[Trajectory]] = {}
    bar, done = _progress(n_batches, f"evaluate@{policy.name}"), 0
    try:
        for split, qs in questions.items():
            rows[split], trajs[split] = [], []
            with ctx.phase(f"rollout_{split}", digits=3, quiet=True):
                for start in range(0, len(qs), ecfg.batch_size):
                    r, t = batch_fn(backend, tokenizer, env, rollout_cfg, cfg.reward, qs[start : start + ecfg.batch_size],
                                    split, cfg.seed)
                    rows[split] += r
                    trajs[split] += t
                    done += 1
                    if bar is not None:
                        bar.set_postfix_str(split)
                        bar.update(1)
                    else:
                        log.info("evaluate@%s: %s batch %d/%d done", policy.name, split, done, n_batches)
    finally:
        if bar is not None:
            bar.close()
    with ctx.phase("summarize", digits=3, quiet=True):
        summaries = {split: summarize_split(rows[split], ecfg.bootstrap, cfg.seed) for split in questions}
    flat = flat_metrics(summaries)
    sampling = None
    if policy.name in ecfg.sampling.policies and policy.kind != "naive_rag":
        with ctx.phase("sampling", digits=3):
            sampling = sampled(backend, tokenizer, env, cfg, questions)
        for split, entry in sampling["splits"].items():
            flat[f"{split}/sampled_em"] = entry["sampled_em"]
            flat[f"{split}/pass_at_{ecfg.sampling.k}"] = entry["pass_at_k"]
            log.info("evaluate@%s %s: sampled EM %.3f, pass@%d %.3f (T %s)", policy.name, split, entry["sampled_em"],
                     ecfg.sampling.k, entry["pass_at_k"], cfg.rollout.temperature)
    metrics: dict[str, Any] = {
        "policy": policy.name,
        "kind": policy.kind,
        "checkpoint": str(policy.checkpoint),
        "overrides": dict(cfg.runs[policy.name]) if policy.kind == "rl" else None,
        "eval_data": eval_data,
        "seed": cfg.seed,
        "bootstrap": {"samples": ecfg.bootstrap.samples, "ci": ecfg.bootstrap.ci},
        "splits": summaries,
        **({"sampling": sampling} if sampling is not None else {}),
        **flat,
    }
    episodes = sorted((r for split in questions for r in rows[split]), key=lambda r: (r["split"], r["id"]))
    mlflow_info: dict[str, Any] = {"run_id": run.run_id}
    with atomic_dir(Path(ecfg.out_dir) / policy.name) as tmp:
        with open(tmp / "episodes.jsonl", "w", encoding="utf-8") as f:
            for r in episodes:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
        write_json_atomic(tmp / "metrics.json", metrics)
        with ctx.phase("mlflow", digits=3, quiet=True):
            mlflow_info.update(log_outputs(ctx, args, trajectories=trajs, out_dir=tmp))
        times["total"] = round(time.perf_counter() - t_start, 3)
        write_json_atomic(tmp / "timing.json", {"time_s": times, "device": device, "mlflow": mlflow_info})
    for split, s in summaries.items():
        log.info("evaluate@%s %s: EM %.3f [%.3f, %.3f], F1 %.3f, format %.3f (n=%d)", policy.name, split, s["em"],
                 s["em_ci_lower"], s["em_ci_upper"], s["f1"], s["format_ok"], s["n"])
    if "promotion" in mlflow_info:
        p = mlflow_info["promotion"]
        log.info("evaluate@%s: registered version %s; gate %s (%s)", policy.name, mlflow_info["version"], p["decision"], p["reason"])
    return metrics
