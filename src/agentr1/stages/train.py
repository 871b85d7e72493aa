"""Stage ``train@<run>``: RL from the SFT cold start with a named run's settings.

``agentr1 train --run grpo`` merges ``runs.grpo`` into ``train`` (``Config.train_for``), loads the
validated dataset, the retriever + ToolEnv and the cold-start checkpoint (``sft.out_dir``, or the
reference cold start's with ``train.cold_start: reference``), and
runs :class:`agentr1.rl.trainer.Trainer` for ``train.steps`` steps, logging every step to MLflow
(``tracking.enabled``; a no-op logger otherwise). Under ``torchrun --nproc_per_node N`` the same
command trains data-parallel (``agentr1.rl.distributed``); rank 0 writes the outputs.

Outputs in ``<train.out_dir>/<run>/`` (written only when training finished, each atomically):

* ``checkpoint/`` - the final policy (safetensors + tokenizer; DVC out, loadable by stock
  transformers / vLLM);
* ``curve.csv`` - one row per step (DVC plots): reward, EM (the rollout success rate), the share of
  groups whose rewards differ (a learning signal) and of solved groups, format rate, tool calls, turns,
  response length, KL, entropy, clip fraction, grad norm, lr and dev EM (when evaluated); with a
  step-level estimator (``gigpo``) also the share of later turns in a step group of more than one
  and the mean |step advantage| against the mean |episode advantage| (``agentr1.rl.stats.step_stats``);
* ``metrics.json`` - the final numbers (DVC metrics): first/last rewards, dev EM at the start,
  at the end and the best, collapse events;
* ``timing.json`` - wall times (not a DVC output, git-ignored: everything DVC tracks is the
  same bits on every run): total, per step split into rollout / prepare / update, dev
  evaluation, and the per-step series. They are MLflow metrics too (``time/*``).

``state/`` next to them holds the resumable training state (every ``train.checkpoint.every``
steps). ``--resume`` continues from it (a run killed at step k restarts at its last checkpoint and
ends with the same numbers as an uninterrupted run on the CPU); without ``--resume`` an old state
is discarded (with a warning, only once every check of the config has passed: a refused run keeps
it) and training starts from the cold start. With ``train.questions: fresh`` every world the run will
draw is generated before step 1 (:meth:`agentr1.rl.sources.FreshWorlds.check`), so a world that
cannot be generated refuses the params at the start, not at its step. ``--resume`` fails (before
any training) when there is nothing to resume (no state and no backup copy of one: run without it
the first time), when the state is incomplete or corrupt, or when the run's params differ from
the ones the state was trained with (``env.*``, ``reward.*``, ``rollout.*``, the run's merged
``train.*``, the seed, ``model.dtype``, the train questions and the cold-start checkpoint; see
:mod:`agentr1.rl.checkpoint` for the keys that may change), or when the retrieval index or the
processed dataset is not the one the state was trained on (their digests,
:func:`agentr1.rl.state.input_digests`). The DVC stage never passes
``--resume``. A save killed between its two renames is recovered from the ``.state.old-<pid>``
copy when it verifies; temporaries of killed writes in the run's directory are removed at the start.

MLflow across a kill: ``mlflow_run.json`` beside ``state/`` (git-ignored, no DVC output) names the
run this execution logs to. ``--resume`` continues that run when the store still has it
(:func:`continues`; a killed process leaves it RUNNING, marked KILLED by the next start): the
steps of the state it lacks are logged (:meth:`agentr1.tracking.run.StageRun.catch_up`) and the
steps it already holds are not logged twice, so it ends FINISHED with the whole curve, as after an
uninterrupted run. When it is gone, a new run gets every step of the state, then the rest.
A store that stays locked (or down) past ``tracking.retry_timeout_s`` does not stop training: the
stage trains on without MLflow, writes every output, and its run ends FAILED for ``agentr1 track``.

One module of some 440 lines on purpose: it is one stage's lifecycle - refuse the config, ready
or resume the state, train, write the outputs, summarize the curve - and each helper serves that
one sequence; the training itself is :mod:`agentr1.rl`, the state's files :mod:`agentr1.rl.state`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from agentr1.config import flatten
from agentr1.errors import StageError
from agentr1.io import remove_stale_temps, tree_digest, write_json_atomic, write_text_atomic
from agentr1.models import load_checkpoint, save_checkpoint
from agentr1.rl import checkpoint as ckpt
from agentr1.rl.distributed import full_params, init_distributed, shutdown
from agentr1.rl.sampling import Episodes
from agentr1.rl.sources import FreshWorlds
from agentr1.rl.state import input_digests
from agentr1.rl.trainer import Trainer
from agentr1.stages.context import StageContext
from agentr1.stages.spec import Arg, StageSpec
from agentr1.tracking.retry import TrackingFailed

SPEC = StageSpec(
    "train",
    "RL from the cold start with a named run (--run NAME; torchrun for data parallel)",
    order=60,
    args=(
        Arg(
            "--run",
            "--run-name",
            dest="run",
            default=None,
            help="named run from params `runs` (default: the train section as is); under torchrun "
            "spell it --run-name (torchrun itself claims the prefix --run)",
        ),
        Arg("--resume", action="store_true", help="continue from <train.out_dir>/<run>/state"),
    ),
    lock={"train": "run"},  # train@<run>: agentr1 train --run <run>
)

log = logging.getLogger(__name__)

# curve.csv column -> metric name
CURVE = {
    "reward": "rollout/reward",
    "em": "rollout/em",
    "format_rate": "rollout/format_rate",
    "tool_calls": "rollout/tool_calls",
    "turns": "rollout/turns",
    "response_length": "rollout/response_length",
    "kl_ref": "train/kl_ref",
    "entropy": "train/entropy",
    "clipfrac": "train/clipfrac",
    "grad_norm": "train/grad_norm",
    "lr": "train/lr",
    "vf_loss": "train/vf_loss",
    "dev_em": "dev/em",
    "informative_groups": "rollout/informative_groups",
    "solved_groups": "rollout/solved_groups",
    "batch_informative_groups": "rollout/batch_informative_groups",
    "filter_rounds": "rollout/filter_rounds",
    "step_group_shared": "train/step_group_shared_later",
    "step_adv_abs": "train/step_adv_abs",
    "episode_adv_abs": "train/episode_adv_abs",
}
# beside state/ (which every checkpoint replaces whole): the MLflow run this execution logs to
RUN_FILE = "mlflow_run.json"
TIMES = {
    "rollout_s": "time/rollout_s",
    "prepare_s": "time/prepare_s",
    "update_s": "time/update_s",
    "step_s": "time/step_s",
}


def curve_csv(history: list[dict]) -> str:
    """One row per logged step (step 0 = the dev evaluation before training)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["step", *CURVE])
    for h in history:
        w.writerow([h["step"], *(("" if m not in h else round(float(h[m]), 6)) for m in CURVE.values())])
    return buf.getvalue()


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(history: list[dict], trainer: Trainer, run: str) -> dict:
    """The run's deterministic summary (``metrics.json``)."""
    steps = [h for h in history if "rollout/reward" in h]
    dev = [(h["step"], h["dev/em"]) for h in history if "dev/em" in h]
    rewards = [h["rollout/reward"] for h in steps]
    t = trainer.tcfg
    return {
        "run": run,
        "estimator": t.estimator,
        "policy_loss": t.policy_loss,
        "loss_mask": t.loss_mask,
        "advantage_mask": t.advantage_mask,
        "steps": len(steps),
        "reward_first3": _mean(rewards[:3]),
        "reward_last3": _mean(rewards[-3:]),
        "em_last3": _mean([h["rollout/em"] for h in steps[-3:]]),
        "dev_em_start": dev[0][1] if dev and dev[0][0] == 0 else None,
        "dev_em_final": dev[-1][1] if dev else None,
        "dev_em_best": max((v for _, v in dev), default=None),
        "dev_examples": min(t.dev.examples, len(trainer.dev_questions)) if t.dev.every else 0,
        "collapse_events": len(trainer.events),
        "rollbacks": trainer.rollbacks,
        "world_size": trainer.dist.world_size,
    }


def timing(history: list[dict], wall_s: float) -> dict:
    """Wall times of the run (``timing.json``): total, means per step, dev evaluation, series."""
    steps = [h for h in history if "rollout/reward" in h]

    def per_step(key: str) -> float | None:
        return _mean([h[key] for h in steps if key in h])

    return {
        "total": round(wall_s, 2),
        "per_step": per_step("time/step_s"),
        "rollout_per_step": per_step("time/rollout_s"),
        "prepare_per_step": per_step("time/prepare_s"),
        "update_per_step": per_step("time/update_s"),
        "eval_total": sum(h.get("time/eval_s", 0.0) for h in history),
        "steps": {name: [round(float(h[key]), 4) for h in steps if key in h] for name, key in TIMES.items()},
    }


def _prepare_state(run: str, run_dir: Path, state_dir: Path, resume: bool) -> str | None:
    """Rank 0, before training: with ``resume``, make sure there is a state to continue (recovered
    from the backup copy of an interrupted save if need be); without, discard an old one, loudly.
    Then remove the temporaries killed writes left in ``run_dir``. Returns the error message, if any."""
    if resume:
        try:
            found = ckpt.prepare_resume(state_dir)
        except StageError as exc:
            return str(exc)
        if not found:
            return (
                f"--resume: nothing to resume for train@{run}: there is no training state in {state_dir} (nor a "
                "backup copy of one). Run without --resume to train from the cold start (a first run has no state yet; "
                f"one is written every train.checkpoint.every steps)"
            )
    else:
        if state_dir.exists():
            log.warning(
                "train@%s: discarding the old training state in %s (step %s) and training from the cold start; "
                "pass --resume to continue it instead",
                run,
                state_dir,
                ckpt.saved_step(state_dir),
            )
            shutil.rmtree(state_dir)
        remove_stale_temps(run_dir, state_dir.name, kinds=("old",), keep_orphans=False)
    remove_stale_temps(run_dir)
    return None


def fresh_source(cfg, tcfg, corpus, seed: int) -> FreshWorlds | None:
    """The fresh-world question source of ``train.questions: fresh`` (None for ``dataset``);
    :class:`StageError` when the data has no world to generate (``data.source`` is not synthetic)."""
    if tcfg.questions != "fresh":
        return None
    if cfg.data.source != "synthetic":
        raise StageError(
            f"train.questions: fresh generates synthetic worlds, but data.source is {cfg.data.source!r}: "
            "set train.questions: dataset (RL on the train split) for real data"
        )
    return FreshWorlds(cfg.data.synthetic, tcfg.fresh, cfg.retrieval, cfg.env, corpus, seed)


def _run_of(args: Any) -> str:
    return getattr(args, "run", None) or "default"


def names(cfg, args: Any = None) -> tuple[str, str | None]:
    """``train@<run>``, and the run whose effective config it logs (none for ``default``)."""
    run = _run_of(args)
    return f"train@{run}", None if run == "default" else run


def _run_file(cfg, args: Any) -> Path:
    run = _run_of(args)
    return Path(cfg.train_for(None if run == "default" else run).out_dir) / run / RUN_FILE


def continues(cfg, args: Any = None) -> str | None:
    """With ``--resume``: the MLflow run the interrupted execution logged to (:data:`RUN_FILE`),
    which the stage run continues when the store still has it, so that one run holds
    the whole curve (:func:`agentr1.tracking.mlflow_adapter.stage_run`)."""
    if not getattr(args, "resume", False):
        return None
    try:
        run_id = json.loads(_run_file(cfg, args).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) and re.fullmatch(r"[0-9a-f]{32}", run_id) else None


def _remember_run(ctx: StageContext, args: Any) -> None:
    """Rank 0, before training: name this execution's MLflow run in :data:`RUN_FILE` for a later
    ``--resume`` (removed when tracking is off, so that no older run is continued)."""
    path = _run_file(ctx.cfg, args)
    if not ctx.run.enabled:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        path, {"run_id": ctx.run.run_id, "experiment_id": ctx.run.experiment_id, "run_name": names(ctx.cfg, args)[0]}
    )


def _checked_fresh_source(cfg, tcfg, corpus, seed: int) -> FreshWorlds | None:
    """:func:`fresh_source`, every world the run will draw generated up front: a :class:`StageError`
    when one cannot be."""
    fresh = fresh_source(cfg, tcfg, corpus, seed)
    if fresh is not None:
        try:
            fresh.check(tcfg.steps)
        except ValueError as exc:
            raise StageError(str(exc)) from None
    return fresh


def _run_params(cfg, sft_dir: Path) -> dict[str, Any]:
    """The params a resumed state must match besides the run's own: ``env.*``, ``model.dtype``, the
    cold start's digest and the input digests."""
    return {
        **flatten(cfg.env.model_dump(mode="json"), "env."),
        "model.dtype": cfg.model.dtype,
        "start_checkpoint": tree_digest(sft_dir),
        **input_digests(cfg.retrieval, cfg.data.processed_dir),
    }


def _start_state(
    ctx: StageContext, args: Any, trainer: Trainer, dist, run: str, run_dir: Path, state_dir: Path, resume: bool
) -> None:
    """Ready the training state (rank 0, :func:`_prepare_state`; a :class:`StageError` on every rank when
    it cannot be), name the MLflow run, and with ``resume`` continue the state and catch MLflow up."""
    problem = _prepare_state(run, run_dir, state_dir, resume) if dist.is_main else None
    problem = dist.broadcast_object(problem)
    if problem is not None:
        raise StageError(problem)
    if dist.is_main:
        _remember_run(ctx, args)
    if resume:
        trainer.resume()  # StageError when the params differ from the state's
        log.info("train@%s: resumed at step %d from %s", run, trainer.step, state_dir)
        if ctx.run.catch_up(trainer.history):  # the steps the state holds that the MLflow run lacks
            log.info(
                "train@%s: logged the steps after %d of the training state to MLflow run %s",
                run,
                ctx.run.logged_through,
                ctx.run.run_id,
            )


def _log_start(run: str, tcfg, model, dist) -> None:
    """Log the run's shape: estimator, steps, batch, policy size and ranks."""
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "train@%s: %s, %d steps x %d questions x %d rollouts, policy %.2fM parameters, %d rank(s)",
        run,
        tcfg.estimator,
        tcfg.steps,
        tcfg.batch_questions,
        tcfg.group_size,
        n_params / 1e6,
        dist.world_size,
    )


def _write_outputs(
    ctx: StageContext,
    args: Any,
    history: list[dict],
    trainer: Trainer,
    tokenizer,
    run: str,
    run_dir: Path,
    t_start: float,
) -> dict:
    """Rank 0, after training: the checkpoint, ``curve.csv``, ``metrics.json`` and ``timing.json``, then
    MLflow (:func:`log_outputs`); returns the metrics."""
    metrics = summarize(history, trainer, run)
    times = timing(history, time.perf_counter() - t_start)
    with full_params(trainer.actor):
        save_checkpoint(trainer.policy, tokenizer, run_dir / "checkpoint")
    write_text_atomic(run_dir / "curve.csv", curve_csv(history))
    write_json_atomic(run_dir / "metrics.json", metrics)
    write_json_atomic(run_dir / "timing.json", times)
    ctx.run.outputs = str(run_dir)
    with contextlib.suppress(TrackingFailed):  # recorded: the run ends FAILED, for `agentr1 track`
        log_outputs(ctx, args)
    log.info(
        "train@%s: reward %.3f -> %.3f, dev EM %s -> %s in %.0fs",
        run,
        metrics["reward_first3"] or 0,
        metrics["reward_last3"] or 0,
        metrics["dev_em_start"],
        metrics["dev_em_final"],
        times["total"],
    )
    return metrics


def run(ctx: StageContext, args: Any = None) -> dict | None:
    """Run the stage (module docstring); returns the metrics it wrote (rank 0) or ``None``."""
    t_start = time.perf_counter()
    cfg, run = ctx.cfg, _run_of(args)
    resume = bool(getattr(args, "resume", False))
    tcfg = cfg.train_for(None if run == "default" else run)
    run_seed = cfg.seed if tcfg.seed is None else tcfg.seed
    ds = ctx.dataset()
    stage = "sft" if tcfg.cold_start == "sft" else "sft_reference"
    sft_dir = ctx.checkpoint(cfg.sft_for(tcfg.cold_start).out_dir, f"`agentr1 {stage}` (or `dvc repro {stage}`)")
    train_q, dev_q = ds.split("train"), ds.split("dev")
    if not train_q:
        raise StageError(f"no train questions in {cfg.data.processed_dir}")
    env = ctx.env()
    if tcfg.num_threads is not None:
        torch.set_num_threads(tcfg.num_threads)
    dist = init_distributed(tcfg.distributed)
    run_dir = Path(tcfg.out_dir) / run
    state_dir = run_dir / "state"
    try:
        # everything that can refuse the config comes before the saved state is touched (a refused run
        # keeps the state of an interrupted one, to be resumed once the config is fixed)
        fresh = _checked_fresh_source(cfg, tcfg, ds.corpus, run_seed)
        run_params = _run_params(cfg, sft_dir)
        model, tokenizer = load_checkpoint(sft_dir, cfg.model.dtype, cfg.model.trust_remote_code)
        trainer = Trainer(
            model,
            tokenizer,
            tcfg,
            cfg.rollout,
            cfg.reward,
            episodes=Episodes(env, train_q, dev_q, fresh),
            logger=ctx.run.logger,
            seed=run_seed,
            dist=dist,
            state_dir=state_dir,
            model_path=sft_dir,
            run_params=run_params,
        )
        _start_state(ctx, args, trainer, dist, run, run_dir, state_dir, resume)
        _log_start(run, tcfg, model, dist)
        history = trainer.train()
        metrics = None
        if dist.is_main:
            metrics = _write_outputs(ctx, args, history, trainer, tokenizer, run, run_dir, t_start)
        dist.barrier()
        return metrics
    finally:
        shutdown(dist)


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False) -> None:
    """The stage's MLflow run from ``<train.out_dir>/<run>/``: the checkpoint's digest as tag
    ``agentr1.checkpoint_sha256`` (so the registry links a version to this run), ``metrics.json``
    as ``summary/*`` and ``timing.json``, when present, as ``summary/time_*`` (one section apart
    from the step curves); with ``replay`` (a run reconstructed by ``agentr1 track``) also the
    step curves from ``curve.csv`` (:data:`CURVE`; the trainer's other live metrics, its timings
    per step and its sampled rollout traces are in no output)."""
    run = _run_of(args)
    run_dir = Path(ctx.cfg.train_for(None if run == "default" else run).out_dir) / run
    ctx.run.tag_checkpoint(run_dir / "checkpoint")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    times = json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").is_file() else {}
    flat = {f"summary/{k}": v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    flat.update({f"summary/time_{k}": v for k, v in times.items() if isinstance(v, (int, float))})
    ctx.run.log_metrics(flat)
    if replay:
        ctx.run.log_curve(run_dir / "curve.csv", CURVE)
