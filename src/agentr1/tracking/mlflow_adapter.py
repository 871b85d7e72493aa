"""MLflow runs for pipeline stages: tracking URI, reachability, experiment per profile, one run
per stage execution, flat params, provenance tags and a step-wise metrics logger.

One module of more than 500 lines on purpose: it is :func:`stage_run`'s lifecycle (connect, start or continue,
the :class:`MLflowLogger`, :func:`_end_run`), whose parts share one :class:`TrackingHealth`: its deadline bounds
the set-up's retries, the logger stops once it holds a failure, and that failure ends the run FAILED, tagged by
:func:`_end_run`; split by phase, how a tracking failure becomes a FAILED run would be spread over modules.

Usage in a stage::

    with stage_run(cfg, "train@ppo") as run:
        train(..., logger=run.logger)          # run.logger.log({"train/loss": x}, step=k)
        run.log_traces(trajectories, split="dev")

Tracking URI: env ``MLFLOW_TRACKING_URI``, else ``tracking.uri`` (default
``sqlite:///mlflow/mlflow.db``, artifacts under ``tracking.artifact_root``, or env
``AGENTR1_ARTIFACT_ROOT`` when set). A server URI is
probed at ``/health`` before anything else (``tracking.connect_timeout_s``); an unreachable one
fails the stage with a :class:`StageError` naming the URI - never a silent fallback to a local
store that would lose the run. ``tracking.enabled: false`` yields a run whose logger is a
:class:`NullLogger` and whose logging methods do nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException

from agentr1.errors import StageError
from agentr1.tracking import provenance, views
from agentr1.tracking.datasets import log_dataset_inputs
from agentr1.tracking.logger import check_metrics
from agentr1.tracking.owner import continuable, end_orphans, logged_steps, owner_tags
from agentr1.tracking.redact import redact_uri
from agentr1.tracking.retry import Deadline, TrackingFailed, is_tracking_error, retrying
from agentr1.tracking.run import StageRun, TrackingHealth
from agentr1.tracking.store import bound_http_client, check_store, db_errors, store_error
from agentr1.tracking.tags import GROUP_TAG, PIPELINE_TAG, ROLE_TAG, RUN_NAME_TAG, STAGE_TAG
from agentr1.tracking.uri import artifact_root, resolve_tracking_uri

if TYPE_CHECKING:
    from agentr1.config import Config
    from agentr1.rollout.trajectory import Trajectory

log = logging.getLogger(__name__)

_BATCH = 100  # MLflow's MAX_PARAMS_TAGS_PER_BATCH
_METRIC_BATCH = 1000  # MLflow's MAX_METRICS_PER_BATCH


def _is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def check_reachable(uri: str, timeout_s: float = 5.0, create: bool = True) -> bool:
    """Fail fast with a :class:`StageError` naming ``uri`` and the fix when the store cannot be
    used (:func:`agentr1.tracking.store.check_store`: a server that does not answer ``/health``
    and its API within ``timeout_s``, a damaged SQLite file or a directory, a database without its
    driver); with ``create`` a missing SQLite store is created atomically. Returns whether the
    store exists."""
    return check_store(uri, timeout_s, create=create)


def experiment_name(cfg: Config) -> str:
    """``<tracking.experiment_prefix>-<profile>``, e.g. ``agentr1-nano``."""
    return f"{cfg.tracking.experiment_prefix}-{cfg.profile}"


EXPERIMENT_DESCRIPTION = """\
agentr1 pipeline runs, profile `{profile}`.

* One parent run per pipeline (`pipeline <id>`, tag `agentr1.role = 'pipeline'`): it lasts from
  the first stage's start to the last stage's end and carries the headline results (Table 3
  metrics `table3/*`, `summary.md` and the report plots under `report/`).
* One child run per DVC stage execution (`prepare`, `sft`, `train@<run>`, `evaluate@<policy>`,
  `report`), its effective config as params and its provenance as tags (`agentr1.git_sha`,
  `dvc.dep.*`, `dvc.out.*`).
* **The RL runs side by side**: [this view]({rl_view}) - every `train@` run's dev EM, reward and
  tool calls per step, one line per seed, coloured by method (the seeds of one method share a
  colour everywhere; tag `agentr1.run` names the method).
* Compare runs: tick two `train@` runs, *Compare*, *Show diff only* (e.g. `train.estimator`).
* Traces: the evaluated episodes (`agentr1 track` prints a link to one of the champion's); a
  policy's: search `tags.agentr1.policy = 'grpo-0'`.
"""
# experiment tags MLflow's UI reads: the description, and the kind (the runs table, not the GenAI view)
EXPERIMENT_TAGS = {"mlflow.note.content": EXPERIMENT_DESCRIPTION, "mlflow.experimentKind": "custom_model_development"}


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None, profile: str = "") -> str:
    """Id of experiment ``name``, created (or restored when deleted) as needed, with its
    description and kind (:data:`EXPERIMENT_TAGS`) set when missing."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            client.create_experiment(name, artifact_location=artifact_location)
        except MlflowException:  # created concurrently by another stage process
            pass
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise MlflowException(f"experiment {name} could not be created")
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    for key, value in EXPERIMENT_TAGS.items():
        if key not in exp.tags:
            text = value.format(profile=profile, rl_view=views.rl_view_path(exp.experiment_id))
            client.set_experiment_tag(exp.experiment_id, key, text)
    views.set_views(client, exp.experiment_id, exp.tags)
    return exp.experiment_id


def connect(cfg: Config) -> tuple[MlflowClient, str, str]:
    """Check the store, point MLflow at it, ensure the profile's experiment.

    Returns ``(client, tracking uri, experiment id)``; raises :class:`StageError` naming the URI
    when the store is unreachable or refuses the setup calls."""
    uri = resolve_tracking_uri(cfg)
    bound_http_client(cfg.tracking)
    check_reachable(uri, cfg.tracking.connect_timeout_s)
    mlflow.set_tracking_uri(uri)
    artifacts = None
    if not _is_server(uri):  # a server decides where its artifacts go
        root, _ = artifact_root(cfg)
        artifacts = (Path(root).resolve() / experiment_name(cfg)).as_uri()
    try:
        client = MlflowClient(tracking_uri=uri)
        exp_id = ensure_experiment(client, experiment_name(cfg), artifacts, cfg.profile)
        mlflow.set_experiment(experiment_id=exp_id)  # fluent calls (tables, traces) default to it
    except (MlflowException, *db_errors()) as exc:
        raise store_error(uri, exc) from None
    return client, uri, exp_id


class MLflowLogger:
    """:class:`MetricsLogger` writing to one MLflow run (``log_batch``, explicit ``step``), so it
    works from any thread and does not depend on the active-run stack; also a
    :class:`TrajectoryLogger` (``trace_sample`` episodes per call as traces, seeded by step).

    Each ``log_batch`` is retried while the store is busy (``health``: :class:`TrackingHealth`,
    up to its ``retry_timeout_s``); once a write failed for good the logger records nothing more
    (warned once), so a trainer keeps training. ``logged`` (``{metric: step}``, a continued run's,
    ``train --resume``): a metric is not logged again at or before the last step the run holds
    of it - a resume is byte-identical, those steps are there already."""

    def __init__(
        self,
        run_id: str,
        client: MlflowClient | None = None,
        trace_sample: int = 16,
        seed: int = 0,
        trace_tags: Mapping[str, str] | None = None,
        health: TrackingHealth | None = None,
        logged: Mapping[str, int] | None = None,
    ) -> None:
        self.run_id = run_id
        self.client = client or MlflowClient()
        self.trace_sample = trace_sample
        self.seed = seed
        self.trace_tags = dict(trace_tags or {})  # on every trace (the stage run's name, its policy)
        self.health = health or TrackingHealth(run_id=run_id)
        self.logged = dict(logged or {})
        self.traced_through = max(self.logged.values(), default=-1)  # traces of those steps are there too

    def _try(self, fn, *args, what: str, retry: bool = True, **kwargs) -> None:
        if self.health.failure is not None:
            return
        with contextlib.suppress(TrackingFailed):  # recorded and warned by health.write
            self.health.write(fn, *args, what=f"{what} of run {self.run_id}", retry=retry, **kwargs)

    def log_trajectories(self, trajectories: Sequence[Trajectory], step: int, split: str = "train") -> None:
        from agentr1.tracking.traces import log_trajectory_traces

        if step <= self.traced_through:
            return
        self._try(
            log_trajectory_traces,
            trajectories,
            self.trace_sample,
            what=f"traces of step {step}",
            retry=False,
            run_id=self.run_id,
            seed=self.seed + step,
            split=split,
            step=step,
            tags=self.trace_tags,
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.log_steps([(step, metrics)])

    def log_steps(self, series: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        """Every ``(step, metrics)`` of ``series`` in as few ``log_batch`` calls as MLflow allows
        (a curve replayed from a CSV: hundreds of steps, a handful of requests)."""
        now = int(time.time() * 1000)
        items = [
            Metric(k, v, now, step)
            for step, metrics in series
            for k, v in check_metrics(metrics, step).items()
            if step > self.logged.get(k, -1)
        ]
        for i in range(0, len(items), _METRIC_BATCH):
            batch = items[i : i + _METRIC_BATCH]
            self._try(self.client.log_batch, self.run_id, what=f"metrics of step {batch[0].step}", metrics=batch)


def _git_state(lock_path: str | Path) -> tuple[str, bool | None]:
    # the stage runs in the project root, next to dvc.lock (whose paths are relative to it)
    return provenance.git_state(exclude=provenance.pipeline_outputs(lock_path))


def current_pipeline_id(cfg: Config, lock_path: str | Path | None = None) -> str:
    """The pipeline id a stage run started now would get (:func:`provenance.pipeline_id` of
    this checkout's commit and ``cfg``'s params); ``lock_path`` defaults to ``cfg``'s pipeline's
    (:attr:`Config.lock_path`)."""
    lock_path = cfg.lock_path if lock_path is None else lock_path
    return provenance.pipeline_id(cfg.section_hash(), _git_state(lock_path)[0])


def run_tags(cfg: Config, stage: str, run_name: str, lock_path: str | Path) -> dict[str, str]:
    """Provenance tags of a stage run (see the module docstring of :mod:`.provenance`):
    ``agentr1.git_sha`` and ``agentr1.git_dirty`` (uncommitted changes outside the pipeline's
    own outputs and ``dvc.lock``, which every ``dvc repro`` rewrites), the params hash, the
    pipeline id and one ``dvc.dep.<path>`` tag per dependency hash; the output hashes
    (``dvc.out.<path>``) are tagged when the stage ends (:func:`output_tags`)."""
    sha, dirty = _git_state(lock_path)
    params_hash = cfg.section_hash()
    # the dvc.lock key is the stage name, or the run name for foreach stages (train@<run>)
    deps = provenance.dvc_dep_hashes(stage, lock_path) or provenance.dvc_dep_hashes(run_name, lock_path)
    tags = {
        STAGE_TAG: stage,
        ROLE_TAG: "stage",
        PIPELINE_TAG: provenance.pipeline_id(params_hash, sha),
        "agentr1.git_sha": sha,
        "agentr1.git_dirty": "unknown" if dirty is None else str(dirty).lower(),
        "agentr1.params_hash": params_hash,
        "agentr1.profile": cfg.profile,
        "agentr1.seed": str(cfg.seed),
        RUN_NAME_TAG: run_name,
        "agentr1.dvc.locked": str(bool(deps)).lower(),
        "mlflow.source.git.commit": sha,
    }
    if deps:
        for path, info in deps.items():
            tags[f"dvc.dep.{path}"[:250]] = info["hash"]
    return tags


def _parent_run(client: MlflowClient, exp_id: str, tags: Mapping[str, str]) -> str:
    """Id of the pipeline's parent run (tag ``agentr1.role=pipeline``), created at the first
    stage's start; each stage marks it RUNNING while it runs and, when it ends, terminates it
    with the stage's status (:func:`stage_run`), so the parent's end time - and duration - is
    that of the pipeline's last stage."""
    pid = tags[PIPELINE_TAG]
    found = client.search_runs(
        [exp_id], filter_string=f"tags.`{PIPELINE_TAG}` = '{pid}' and tags.`{ROLE_TAG}` = 'pipeline'", max_results=1
    )
    if found:
        client.update_run(found[0].info.run_id, status="RUNNING")
        return found[0].info.run_id
    keep = ("agentr1.git_sha", "agentr1.git_dirty", "agentr1.params_hash", "agentr1.profile", "agentr1.seed")
    parent_tags = {k: tags[k] for k in keep} | {PIPELINE_TAG: pid, ROLE_TAG: "pipeline"}
    return client.create_run(exp_id, tags=parent_tags, run_name=f"pipeline {pid}").info.run_id


def out_tag(path: str) -> str:
    """The tag holding the hash of output ``path`` (``dvc.out.<path>``, clipped to MLflow's 250)."""
    return f"dvc.out.{path}"[:250]


def output_tags(stage_key: str, lock_path: str | Path) -> dict[str, str]:
    """``{"dvc.out.<path>": hash}`` for the outputs of ``stage_key``'s ``dvc.lock`` entry that
    exist, hashed the way DVC will lock them (:func:`provenance.dvc_hash`)."""
    root = provenance.project_root(lock_path)
    tags = {}
    for path in provenance.stage_outputs(stage_key, lock_path):
        digest = provenance.dvc_hash(root / path)
        if digest is not None:
            tags[out_tag(path)] = digest
    return tags


def _log_params(client: MlflowClient, run_id: str, cfg: Config) -> None:
    params = provenance.flat_params(cfg.model_dump(mode="json", by_alias=True))
    items = [Param(k, v) for k, v in sorted(params.items())]
    for i in range(0, len(items), _BATCH):
        client.log_batch(run_id, params=items[i : i + _BATCH])


def variant_tags(cfg: Config, variant: str) -> dict[str, str]:
    """Tags of a stage run for the named run of params ``runs`` (``cfg`` = :meth:`Config.for_run`):
    ``agentr1.variant`` (the replica, ``grpo-1``), ``agentr1.run`` (the run of params ``runs`` it is
    a seed of, ``grpo``: what groups the seeds of one method), ``agentr1.estimator``,
    ``agentr1.masks`` (the Agent-R1 masks that are on: ``loss+advantage``, ``loss``, ``advantage``
    or ``none``), the run's own ``agentr1.seed`` and its colour in the UI (``mlflow.runColor``,
    :func:`agentr1.tracking.views.run_color`: the seeds of one run alike)."""
    t = cfg.train
    masks = "+".join(m for m, on in (("loss", t.loss_mask), ("advantage", t.advantage_mask)) if on) or "none"
    group = cfg.split_run(variant)[0]
    return {
        "agentr1.variant": variant,
        GROUP_TAG: group,
        views.RUN_COLOR_TAG: views.run_color(list(cfg.runs), group),
        "agentr1.estimator": t.estimator,
        "agentr1.masks": masks,
        "agentr1.seed": str(cfg.seed),
    }


@contextlib.contextmanager
def stage_run(
    cfg: Config,
    stage: str,
    run_name: str | None = None,
    lock_path: str | Path | None = None,
    variant: str | None = None,
    extra_tags: Mapping[str, str] | None = None,
    continue_run: str | None = None,
) -> Iterator[StageRun]:
    """One MLflow run for one execution of ``stage`` (the active run inside the block).

    Logs the config as flat params (and ``config.json``), tags it with provenance and the
    pipeline id (nesting it under the pipeline's parent run with ``tracking.parent_run``), and
    ends it FINISHED, FAILED (exception) or KILLED (interrupt). With ``variant`` (a run of params
    ``runs``: ``train@ppo``, ``evaluate@ppo``) the params are the run's *effective* config
    (:meth:`Config.for_run`) with :func:`variant_tags`, so MLflow's compare view shows what differs
    between runs; the provenance (params hash, pipeline id) stays the whole params file's, its
    ``dvc.lock`` that pipeline's (``lock_path``, default :attr:`Config.lock_path`). ``extra_tags`` go on the run from its start (``agentr1.logged_from`` from ``agentr1 track``).
    Raises :class:`StageError` naming the URI before any work when the store is unreachable.

    Kills and resumes (:mod:`agentr1.tracking.owner`): RUNNING runs of the same name whose process
    is gone are set KILLED first. ``continue_run`` (``train --resume``) is continued when no live
    process owns it - no params logged again, metrics skipped at the steps it holds
    (:attr:`StageRun.logged_through`); else a new run starts.

    A busy store (:mod:`agentr1.tracking.retry`): every write is retried up to
    ``tracking.retry_timeout_s``; the set-up fails the stage before any work (:class:`StageError`);
    a later write that fails for good ends the run FAILED, tagged ``agentr1.tracking_error``, and
    the stage goes on and exits 0 so that DVC locks its work for ``agentr1 track`` to log again
    (:func:`_end_run`)."""
    name = run_name or stage
    if not cfg.tracking.enabled:  # no run: a no-op logger
        yield _untracked(cfg, stage)
        return
    lock_path = cfg.lock_path if lock_path is None else lock_path  # the lock of the config's pipeline
    client, uri, exp_id = connect(cfg)
    logged = cfg.for_run(variant) if variant is not None else cfg
    tags = _start_tags(cfg, logged, stage, name, lock_path, variant, extra_tags)
    health = TrackingHealth(run_name=name, retry_timeout_s=cfg.tracking.retry_timeout_s)
    write = partial(_write_within, deadline=health.deadline(), name=name)  # one budget for the whole set-up
    active, resumed, held, parent = _start_run(
        client, exp_id, uri, stage, name, tags, continue_run, write, cfg.tracking.parent_run
    )
    run_id = health.run_id = active.info.run_id
    trace_tags = {"agentr1.run_name": name, **({"agentr1.policy": variant} if variant else {})}
    status, run, done = "FAILED", None, False
    try:
        _log_start(client, run_id, logged, write, resumed, held, name, stage, uri)
        run = _stage_run_object(cfg, stage, run_id, exp_id, uri, tags, parent, client, health, trace_tags, held)
        yield run
        done = True
        with contextlib.suppress(TrackingFailed):  # recorded in health
            run.set_tags(output_tags(name, lock_path))
        status = "FINISHED" if health.failure is None else "FAILED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        _end_run(client, run_id, parent, status, health, run.outputs if run else None, done)
        if done and stage.startswith("evaluate"):  # an evaluation may have moved the champion
            _show_champion(client, cfg)


def _untracked(cfg: Config, stage: str) -> StageRun:
    log.info("tracking disabled (tracking.enabled: false): stage %s runs without MLflow", stage)
    return StageRun(cfg, stage)


def _start_tags(
    cfg: Config,
    logged: Config,
    stage: str,
    name: str,
    lock_path: str | Path,
    variant: str | None,
    extra_tags: Mapping[str, str] | None,
) -> dict[str, str]:
    """A stage run's tags at its start: provenance (:func:`run_tags`), the variant's
    (:func:`variant_tags` of its effective config ``logged``), ``extra_tags``, the owning process."""
    tags = run_tags(cfg, stage, name, lock_path)
    if variant is not None:
        tags.update(variant_tags(logged, variant))
    tags.update(extra_tags or {})
    tags.update(owner_tags())
    return tags


def _write_within(fn, *args, what: str, deadline: Deadline, name: str, **kwargs):
    """``fn(*args, **kwargs)`` retried until ``deadline`` (:func:`retrying`), ``what`` naming the run."""
    return retrying(fn, *args, what=f"{what} ({name})", deadline=deadline, **kwargs)


def _show_champion(client: MlflowClient, cfg: Config) -> None:
    """:func:`agentr1.tracking.views.show_champion` for the profile's registered model; a store
    that refuses only costs a warning (``agentr1 track`` sets it again)."""
    try:
        views.show_champion(client, cfg.tracking.registered_model, cfg.tracking.gate_metric)
    except Exception as exc:
        if not is_tracking_error(exc):
            raise
        log.warning("MLflow: could not tag %s with its champion: %s", cfg.tracking.registered_model, exc)


def _start_run(
    client: MlflowClient,
    exp_id: str,
    uri: str,
    stage: str,
    name: str,
    tags: dict[str, str],
    continue_run: str | None,
    write: Callable[..., Any],
    parent_run: bool,
) -> tuple[Any, Any, dict[str, int], str | None]:
    """:func:`stage_run`'s set-up, every write through ``write`` (one retry budget): the run to
    continue when it still can be, orphans of ``name`` ended, the pipeline's parent run, and the run
    started (or continued). Returns ``(active run, resumed run or None, its logged steps, parent id)``;
    :class:`StageError` naming the store when any of it fails."""
    resumed, held = None, {}
    try:
        if continue_run:
            resumed, why = write(continuable, client, exp_id, continue_run, name, what="look up the run to continue")
            if resumed is None:
                log.warning("cannot continue MLflow run %s of %s (%s): logging into a new run", continue_run, name, why)
        write(end_orphans, client, exp_id, name, keep=continue_run if resumed else None, what="end orphan runs")
        parent = write(_parent_run, client, exp_id, tags, what="the pipeline run") if parent_run else None
        if resumed is not None:
            held = write(logged_steps, client, resumed, what="read the run's metrics")
            if parent:
                tags["mlflow.parentRunId"] = parent
            active = write(mlflow.start_run, run_id=resumed.info.run_id, tags=tags, what="continue the run")
        else:
            active = write(
                mlflow.start_run,
                experiment_id=exp_id,
                run_name=name,
                parent_run_id=parent,
                tags=tags,
                what="start a run",
            )
    except (MlflowException, TrackingFailed) as exc:
        raise StageError(
            f"MLflow tracking store {redact_uri(uri)}: cannot start a run for stage {stage}: {redact_uri(str(exc))}"
        ) from None
    return active, resumed, held, parent


def _log_start(
    client: MlflowClient,
    run_id: str,
    logged: Config,
    write: Callable[..., Any],
    resumed: Any,
    held: Mapping[str, int],
    name: str,
    stage: str,
    uri: str,
) -> None:
    """A new run gets the params, ``config.json`` and the processed data it reads as dataset
    inputs (:mod:`agentr1.tracking.datasets`); a continued one only the log line saying so."""
    if resumed is None:
        write(_log_params, client, run_id, logged, what="params")
        write(
            mlflow.log_dict,
            logged.model_dump(mode="json", by_alias=True),
            "config.json",
            run_id=run_id,
            what="config.json",
        )
        write(log_dataset_inputs, client, run_id, logged, stage, what="dataset inputs")
        log.info("MLflow run %s (%s) for stage %s in %s", run_id, name, stage, redact_uri(uri))
    else:
        log.info(
            "continuing MLflow run %s (%s, was %s) for stage %s in %s: it holds steps through %d",
            run_id,
            name,
            resumed.info.status,
            stage,
            redact_uri(uri),
            max(held.values(), default=-1),
        )


def _stage_run_object(
    cfg: Config,
    stage: str,
    run_id: str,
    exp_id: str,
    uri: str,
    tags: Mapping[str, str],
    parent: str | None,
    client: MlflowClient,
    health: TrackingHealth,
    trace_tags: dict[str, str],
    held: Mapping[str, int],
) -> StageRun:
    """The :class:`StageRun` the stage logs through (and its pipeline's, nested under ``parent``)."""
    logger = MLflowLogger(run_id, client, cfg.tracking.trace_sample, cfg.seed, trace_tags, health, held)
    pipeline = (
        StageRun(
            cfg,
            "pipeline",
            parent,
            exp_id,
            uri,
            tags[PIPELINE_TAG],
            MLflowLogger(parent, client, health=health),
            health=health,
        )
        if parent
        else None
    )
    return StageRun(
        cfg,
        stage,
        run_id,
        exp_id,
        uri,
        tags[PIPELINE_TAG],
        logger,
        trace_tags,
        pipeline,
        health,
        max(held.values(), default=-1),
    )


def _end_run(
    client: MlflowClient,
    run_id: str,
    parent: str | None,
    status: str,
    health: TrackingHealth,
    outputs: str | None,
    done: bool,
) -> None:
    """End the stage run (and mark its parent) with ``status``, retrying a busy store within one
    ``tracking.retry_timeout_s``; a tracking failure is tagged on the run (``agentr1.tracking_error``)
    and, when the stage itself got through (``done``), reported in one warning. A store that
    still refuses leaves the run RUNNING, to be marked KILLED by the next start of a run of the
    same name (:func:`agentr1.tracking.owner.end_orphans`).

    Why a stage whose writes failed still exits 0: the warning names its outputs and ``agentr1
    track``, which logs the stage again from them (it takes only FINISHED runs as logged); a failed
    command would leave the stage out of ``dvc.lock``, and then neither the next ``dvc repro`` (it
    would run the stage again) nor ``agentr1 track`` (it logs locked stages only) would keep the
    work."""
    deadline = health.deadline()

    def attempt(fn, *args, what: str) -> bool:
        try:
            retrying(fn, *args, what=what, deadline=deadline)
            return True
        except TrackingFailed as exc:
            log.warning("MLflow: %s", exc)
            return False

    if health.failure is not None:
        attempt(client.set_tag, run_id, "agentr1.tracking_error", health.failure[:5000], what=f"tag run {run_id}")
        if done:
            where = f"outputs saved in {outputs}" if outputs else "the stage's outputs are saved"
            log.warning(
                "%s: %s; MLflow tracking failed (%s): its run %s ends FAILED; run `agentr1 track` (after "
                "`dvc repro` locked the stage) to log this stage from its outputs",
                health.run_name,
                where,
                health.failure,
                run_id,
            )
    with contextlib.suppress(Exception):
        mlflow.flush_trace_async_logging()
    try:
        mlflow.end_run(status)  # pops the fluent run stack, then sets the status
        ended = True
    except Exception as exc:
        if not is_tracking_error(exc):
            raise
        ended = attempt(client.set_terminated, run_id, status, what=f"end run {run_id} as {status}")
    if not ended:
        log.warning(
            "MLflow run %s (%s) stays RUNNING: the next start of %s marks it KILLED",
            run_id,
            health.run_name,
            health.run_name,
        )
    if parent:
        attempt(client.set_terminated, parent, status, what=f"end the pipeline run {parent}")
