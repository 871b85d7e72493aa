"""Stage ``evaluate``: one policy, greedy, on every split of ``evaluate.splits``.

``agentr1 evaluate --policy NAME``: NAME is a named run of params ``runs`` or a baseline
(:func:`agentr1.eval.policies.resolve_policy`). This module orchestrates; the work is in
:mod:`agentr1.eval` and :func:`agentr1.tracking.registry.register_evaluation`.

For each split, the first ``evaluate.max_examples`` questions (all when null,
:func:`agentr1.eval.splits.select_questions`) are rolled out greedily, ``evaluate.batch_size``
questions per engine call (also the most prompts per backend call), and scored per question
(:func:`agentr1.eval.episodes.play`); :func:`agentr1.eval.metrics.summarize_split` adds the
bootstrap CIs and the breakdowns by question type and hop count; for a policy of
``evaluate.sampling.policies``, :func:`agentr1.eval.splits.sampled` adds sampled EM and pass@k.

Outputs, in ``<evaluate.out_dir>/<NAME>/`` (one atomic directory, written when the evaluation is done;
a failure before leaves the old one):

* ``metrics.json`` (DVC metrics; deterministic - no wall-clock times): ``policy``, ``kind``,
  ``checkpoint``, ``overrides`` (the run's overrides of ``train``; null for baselines),
  ``eval_data`` (fingerprint of the evaluated question ids), ``seed``, ``bootstrap``,
  ``splits: {split: summary}`` and the flat keys ``<split>/<metric>`` (``test/em``,
  ``test/em_ci_lower``, ``ood/f1``, ...) that MLflow and the promotion gate read;
* ``episodes.jsonl``: one row per question, sorted by split then id
  (:data:`agentr1.eval.episodes.EPISODE_FIELDS`);
* ``timing.json``: seconds per phase, the device and the MLflow run / registry outcome, or the
  tracking error (no DVC output and git-ignored, so that everything DVC tracks is the same bits on
  every run).

The outputs are written before anything goes to MLflow: a store that fails (locked past
``tracking.retry_timeout_s``, down) leaves the finished evaluation in place, its error in
``timing.json`` and the run FAILED, to be logged by ``agentr1 track``; any other error of the
registration or the gate is raised after the outputs are written.

MLflow (``tracking.enabled``): one run ``evaluate@<NAME>`` (``evaluate_baseline@<NAME>`` for the
baselines, matching their ``dvc.lock`` key) with the flat metrics at step 0, a seeded sample of
``tracking.trace_sample`` episodes per split as traces, every episode of a split as a table
``eval/<split>_trajectories.json`` (a run that ``agentr1 track`` reconstructs from the outputs:
the same episodes' root spans and ``eval/<split>_episodes.json``, :func:`log_outputs`); for RL
runs and the cold start with ``evaluate.register``, the checkpoint is registered as a version of
``tracking.registered_model`` with its provenance. An RL policy becomes ``challenger`` and the
promotion gate (``tracking.gate_metric``) moves ``champion`` only when the challenger beats it
beyond the CI (the first one becomes champion); the cold start is a baseline: alias
``cold_start``, never ``challenger``, never gated.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from agentr1.eval.episodes import episodes_of, play, write_episodes
from agentr1.eval.metrics import SCORES, summarize_split
from agentr1.eval.policies import Policy, resolve_policy
from agentr1.eval.setup import EvalSetup
from agentr1.eval.splits import eval_data_fingerprint, flat_metrics, sampled, sampled_flat, select_questions
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.rollout.trajectory import Trajectory
from agentr1.stages.context import StageContext
from agentr1.stages.spec import Arg, StageSpec
from agentr1.tracking.gate import check_gate_metric
from agentr1.tracking.retry import TrackingFailed, is_tracking_error

SPEC = StageSpec(
    "evaluate",
    "greedy EM/F1 with bootstrap CIs of one policy on evaluate.splits (--policy NAME)",
    order=70,
    args=(
        Arg(
            "--policy",
            required=True,
            metavar="NAME",
            help="a named run of params `runs`, or a baseline: cold_start, base_tool_call, naive_rag, cold_start_reference",
        ),
    ),
    lock={"evaluate": "policy", "evaluate_baseline": "policy"},  # evaluate@<run>, evaluate_baseline@<name>
)

log = logging.getLogger(__name__)


def _registers(cfg, policy: Policy) -> bool:
    return policy.registrable and cfg.evaluate.register_ and cfg.tracking.enabled


def _run_tags(policy: Policy, eval_data: str) -> dict[str, str]:
    return {"agentr1.policy": policy.name, "agentr1.policy_kind": policy.kind, "agentr1.eval_data": eval_data}


def log_outputs(
    ctx: StageContext,
    args: Any = None,
    replay: bool = False,
    trajectories: Mapping[str, Sequence[Trajectory]] | None = None,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """The stage's MLflow run from ``metrics.json`` and ``episodes.jsonl`` in ``out_dir``
    (default ``<evaluate.out_dir>/<policy>``): the policy tags, the flat metrics (logged with the
    registered model when the policy is registered, else to the run), per split a seeded sample
    of ``tracking.trace_sample`` episodes as traces and every episode as a table, then the
    registration and, for an RL policy, the gate. ``trajectories`` (a live run's, per split) give
    full traces and the table ``eval/<split>_trajectories.json``; without them (a run
    reconstructed by ``agentr1 track``) the traces are the episodes' root spans and the table is
    ``eval/<split>_episodes.json``. Returns the registry outcome (version, train run, gate
    decision; ``{}`` when not registered)."""
    cfg, run = ctx.cfg, ctx.run
    policy = resolve_policy(cfg, getattr(args, "policy", None))
    out = Path(out_dir or Path(cfg.evaluate.out_dir) / policy.name)
    metrics = json.loads((out / "metrics.json").read_text())
    # the flat keys metrics.json holds: the split summaries' and, for a sampled policy, sampled EM / pass@k
    flat = {k: v for k, v in metrics.items() if "/" in k and isinstance(v, (int, float))}
    eval_data = metrics["eval_data"]
    register = _registers(cfg, policy)
    if register:
        check_gate_metric(cfg.tracking.gate_metric, cfg.evaluate.splits, SCORES)
    run.set_tags(_run_tags(policy, eval_data))
    if not register:  # a registered model's metrics are logged with it, to this run (once)
        run.logger.log(flat, step=0)
    tags = {"agentr1.policy": policy.name}
    if trajectories is not None:
        for split, trajs in trajectories.items():
            run.log_traces(trajs, split=split, tags=tags)
            run.log_table(trajs, f"eval/{split}_trajectories.json")
    else:
        for split, rows in episodes_of(cfg, out).items():
            run.log_episode_traces(rows, split=split, tags=tags)
            run.log_episode_table(rows, f"eval/{split}_episodes.json")
    if not register:
        return {}
    from agentr1.tracking.registry import register_evaluation
    from agentr1.tracking.writelock import writer_lock

    # one writer at a time: another evaluation's registration, `agentr1 promote` or `agentr1 track` waits
    with writer_lock(cfg, f"{policy.run_name} registration"):
        return register_evaluation(
            run,
            policy.checkpoint,
            policy.name,
            policy.kind,
            flat,
            eval_data,
            cfg.tracking.registered_model,
            cfg.tracking.gate_metric,
        )


def _write_timing(out: Path, times: dict[str, float], t_start: float, device: str, mlflow_info: dict[str, Any]) -> None:
    times["total"] = round(time.perf_counter() - t_start, 3)
    write_json_atomic(out / "timing.json", {"time_s": times, "device": device, "mlflow": mlflow_info})


def before(cfg, args: Any = None) -> None:
    """Fail before any run or work on a bad ``--policy``, a missing checkpoint or a gate metric
    this evaluation would not produce."""
    if _registers(cfg, resolve_policy(cfg, getattr(args, "policy", None))):
        check_gate_metric(cfg.tracking.gate_metric, cfg.evaluate.splits, SCORES)


def names(cfg, args: Any = None) -> tuple[str, str | None]:
    """The policy's ``dvc.lock`` key as the run name; RL runs log their effective config."""
    policy = resolve_policy(cfg, getattr(args, "policy", None))
    return policy.run_name, policy.name if policy.kind == "rl" else None


def _log_plan(policy: Policy, questions: Mapping[str, Sequence], batch_size: int) -> None:
    """Log what is evaluated: the policy, the questions per split, the checkpoint and the batches."""
    log.info(
        "evaluate@%s (%s): %s from %s, %d batch(es) of <= %d",
        policy.name,
        policy.kind,
        ", ".join(f"{s} {len(q)}" for s, q in questions.items()),
        policy.checkpoint,
        sum(-(-len(qs) // batch_size) for qs in questions.values()),
        batch_size,
    )


def _sampling(
    ctx: StageContext, policy: Policy, setup: EvalSetup, questions: Mapping[str, Sequence], flat: dict[str, Any]
) -> dict[str, Any] | None:
    """Sampled EM and pass@k of a policy of ``evaluate.sampling.policies`` (added to ``flat``);
    ``None`` for any other policy."""
    cfg = ctx.cfg
    ecfg = cfg.evaluate
    sampling = None
    if policy.name in ecfg.sampling.policies and policy.kind != "naive_rag":
        with ctx.phase("sampling", digits=3):  # at the RL sampling setting: cfg.rollout as is
            sampling = sampled(replace(setup, rollout=cfg.rollout), questions, ecfg.sampling.k, ecfg.batch_size)
        flat.update(sampled_flat(sampling))
        for split, entry in sampling["splits"].items():
            log.info(
                "evaluate@%s %s: sampled EM %.3f, pass@%d %.3f (T %s)",
                policy.name,
                split,
                entry["sampled_em"],
                ecfg.sampling.k,
                entry["pass_at_k"],
                cfg.rollout.temperature,
            )
    return sampling


def _metrics_of(
    cfg,
    policy: Policy,
    eval_data: str,
    summaries: dict[str, Any],
    sampling: dict[str, Any] | None,
    flat: dict[str, Any],
) -> dict[str, Any]:
    """The content of ``metrics.json`` (module docstring)."""
    ecfg = cfg.evaluate
    metrics: dict[str, Any] = {
        "policy": policy.name,
        "kind": policy.kind,
        "checkpoint": str(policy.checkpoint),
        "overrides": cfg.run_overrides(policy.name) if policy.kind == "rl" else None,
        "eval_data": eval_data,
        "seed": cfg.seed,
        "bootstrap": {"samples": ecfg.bootstrap.samples, "ci": ecfg.bootstrap.ci},
        "splits": summaries,
        **({"sampling": sampling} if sampling is not None else {}),
        **flat,
    }
    return metrics


def _track(
    ctx: StageContext,
    args: Any,
    trajs: Mapping[str, Sequence[Trajectory]],
    out: Path,
    t_start: float,
    device: str,
    mlflow_info: dict[str, Any],
) -> None:
    """Log the written evaluation to MLflow (:func:`log_outputs`), then ``timing.json`` with the outcome:
    a store's error fails the run; any other error is raised."""
    run, times = ctx.run, ctx.times
    try:
        with ctx.phase("mlflow", digits=3, quiet=True):
            mlflow_info.update(log_outputs(ctx, args, trajectories=trajs, out_dir=out))
    except Exception as exc:
        mlflow_info["error"] = f"{type(exc).__name__}: {exc}"
        if not is_tracking_error(exc):  # e.g. the gate's StageError: the evaluation is saved, the command fails
            _write_timing(out, times, t_start, device, mlflow_info)
            raise
        run.health.fail(exc)  # the store's own error (a registry call): the run ends FAILED, for `agentr1 track`
    _write_timing(out, times, t_start, device, mlflow_info)


def _log_results(policy: Policy, summaries: dict[str, Any], mlflow_info: dict[str, Any]) -> None:
    """Log each split's scores and, when the policy was registered, its version and the gate's decision."""
    for split, s in summaries.items():
        log.info(
            "evaluate@%s %s: EM %.3f [%.3f, %.3f], F1 %.3f, format %.3f (n=%d)",
            policy.name,
            split,
            s["em"],
            s["em_ci_lower"],
            s["em_ci_upper"],
            s["f1"],
            s["format_ok"],
            s["n"],
        )
    if "promotion" in mlflow_info:
        p = mlflow_info["promotion"]
        log.info(
            "evaluate@%s: registered version %s; gate %s (%s)",
            policy.name,
            mlflow_info["version"],
            p["decision"],
            p["reason"],
        )


def run(ctx: StageContext, args: Any = None) -> dict[str, Any]:
    """Run the stage (module docstring); returns the metrics it wrote."""
    import torch

    from agentr1.models import load_checkpoint, resolve_checkpoint
    from agentr1.rollout import make_backend

    t_start = time.perf_counter()
    cfg, run, times = ctx.cfg, ctx.run, ctx.times
    ecfg = cfg.evaluate
    policy = resolve_policy(cfg, getattr(args, "policy", None))
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
    setup = EvalSetup(backend, tokenizer, env, rollout_cfg, cfg.reward, cfg.seed)
    eval_data = eval_data_fingerprint(questions)
    _log_plan(policy, questions, ecfg.batch_size)
    with contextlib.suppress(TrackingFailed):  # recorded: log_outputs below then skips MLflow
        run.set_tags(_run_tags(policy, eval_data))
    rows, trajs = play(
        setup,
        questions,
        ecfg.batch_size,
        naive=policy.kind == "naive_rag",
        label=f"evaluate@{policy.name}",
        phase=partial(ctx.phase, digits=3, quiet=True),
    )
    with ctx.phase("summarize", digits=3, quiet=True):
        summaries = {split: summarize_split(rows[split], ecfg.bootstrap, cfg.seed) for split in questions}
    flat = flat_metrics(summaries)
    sampling = _sampling(ctx, policy, setup, questions, flat)
    metrics = _metrics_of(cfg, policy, eval_data, summaries, sampling, flat)
    # the evaluation first, then MLflow: a store that fails must not take the finished evaluation with it
    out = Path(ecfg.out_dir) / policy.name
    mlflow_info: dict[str, Any] = {"run_id": run.run_id}
    with atomic_dir(out) as tmp:
        write_episodes(tmp / "episodes.jsonl", rows)
        write_json_atomic(tmp / "metrics.json", metrics)
        _write_timing(tmp, times, t_start, device, {**mlflow_info, "pending": True})  # until MLflow is done
    run.outputs = str(out)
    _track(ctx, args, trajs, out, t_start, device, mlflow_info)
    _log_results(policy, summaries, mlflow_info)
    return metrics
