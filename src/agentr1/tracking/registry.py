"""Policies in the MLflow model registry: log a checkpoint as a model linked to its evaluation
metrics, register it, point ``challenger`` at the newest version, and move ``champion`` through
the gate (:mod:`agentr1.tracking.gate`).

One module of more than 500 lines on purpose: it owns a version's life in the registry, and each part reads
what another writes on that version: :func:`load_policy_model` checks the ``agentr1.artifact_sha256`` that
:func:`log_policy_model` tags, :func:`registered_version` the ``agentr1.registration`` it marks complete last, and
:func:`register_evaluation` the gate decision :func:`promote` records; split, each tag's writer and readers part.

Flavor: a pyfunc "model from code" (:mod:`.policy_pyfunc`) whose artifact is the checkpoint
directory as the trainer saved it (safetensors + tokenizer). Chosen over the transformers
flavor because it logs the exact files the pipeline produced (no re-serialisation, no pipeline
task inference, works offline with transformers 5 and with a scratch tokenizer) and loads back
with stock ``transformers``; ``mlflow.pyfunc.load_model(...).predict(["prompt"])`` generates.

Metrics: the evaluation metrics are logged with ``model_id`` (MLflow 3 LoggedModel), so the
model page shows them, and the gate reads ``<metric>``, ``<metric>_ci_lower`` and
``<metric>_ci_upper`` from there. The version tag ``agentr1.eval_data`` fingerprints the
evaluation data; the gate compares only versions evaluated on the same data.

Trust boundary: loading a pyfunc "model from code" runs the Python file stored with the model in
the artifact store, so anyone who can write to that store can make a loader run their code. At
registration the version is tagged ``agentr1.artifact_sha256``, the digest of every file of the
logged model as stored (:func:`tree_digest`); :func:`load_policy_model` downloads a version,
recomputes the digest and refuses to load (nothing imported, nothing run) when it differs or the
tag is missing. The digest guards the artifact store, not the tracking database: whoever can
rewrite the tag can also bless a tampered artifact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

from agentr1.errors import StageError
from agentr1.io import tree_digest as _tree_digest
from agentr1.tracking.gate import GateStats, gate
from agentr1.tracking.tags import ARTIFACT_TAG, CHECKPOINT_TAG, EVAL_DATA_TAG, STAGE_TAG

log = logging.getLogger(__name__)

CHALLENGER, CHAMPION = "challenger", "champion"
# a version's registration state: created "pending", "complete" once every tag, the description and
# the alias are written (log_policy_model); an evaluation's version is found again by its identity
REGISTRATION_TAG, PENDING, COMPLETE = "agentr1.registration", "pending", "complete"
VARIANT_TAG = "agentr1.variant"
METRICS_TAG = "agentr1.metrics_sha256"  # digest of the evaluation metrics a version was registered with
# how a store gets its registered policies, for every "no such alias" error
REGISTER_HINT = (
    "the evaluate stages register the policies they evaluate: run `agentr1 track` in the project root "
    "(it registers those of the evaluations DVC skipped or restored, e.g. after a fresh clone's `dvc repro` "
    "or `dvc pull`), or `dvc repro` the evaluate@<run> stages; `agentr1 promote` then moves champion"
)
DOWNLOAD_WRITTEN = frozenset({"registered_model_meta"})
POLICY_CODE = Path(__file__).with_name("policy_pyfunc.py")
SIGNATURE = ModelSignature(
    inputs=Schema([ColSpec("string")]),  # a list of prompts (or a one-column DataFrame)
    outputs=Schema([ColSpec("string")]),
    params=ParamSchema([ParamSpec("max_new_tokens", "long", 32)]),
)


def _requirements() -> list[str]:
    """Pinned requirements of the pyfunc (explicit: no slow, network-prone inference)."""
    pins = []
    for dist in ("mlflow", "torch", "transformers", "tokenizers", "safetensors"):
        try:
            pins.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pins.append(dist)
    return pins


@contextlib.contextmanager
def _in_run(run_id: str | None):
    """Make ``run_id`` the active run (resuming it when needed); the active run when ``None``."""
    active = mlflow.active_run()
    if active is not None and run_id in (None, active.info.run_id):
        yield active.info.run_id
    elif run_id is None:
        raise ValueError("log_policy_model needs a run: pass run_id or call it inside stage_run")
    else:
        with mlflow.start_run(run_id=run_id):
            yield run_id


def log_policy_model(
    checkpoint_dir: str | Path,
    metrics: Mapping[str, float],
    registered_name: str = "agentr1-policy",
    *,
    run_id: str | None = None,
    eval_data: str = "",
    name: str = "policy",
    client: MlflowClient | None = None,
    alias: str | None = CHALLENGER,
    tags: Mapping[str, str] | None = None,
    description: str | None = None,
) -> ModelVersion:
    """Log ``checkpoint_dir`` as a pyfunc model ``name`` in ``run_id`` (default: the active run),
    log ``metrics`` to the run linked to that model (once: they are the run's metrics too),
    register it as a new version of ``registered_name`` with tags ``agentr1.eval_data`` =
    ``eval_data``, ``agentr1.artifact_sha256`` and ``tags``, and ``description``, and point
    ``alias`` at it (``challenger`` for a trained policy; a baseline gets its own alias, or
    ``None``). Returns the registered version.

    The version is created with ``tags``, ``agentr1.eval_data`` and ``agentr1.registration =
    pending``; the last step sets ``agentr1.registration = complete``. A version still pending
    was interrupted (a killed process) before its description, digest or alias were written."""
    ckpt = Path(checkpoint_dir)
    if not (ckpt / "config.json").is_file() or not any(ckpt.glob("*.safetensors")):
        raise StageError(f"{ckpt} is not a checkpoint (needs config.json and *.safetensors): train or fix the path")
    client = client or MlflowClient()
    with _in_run(run_id) as rid, warnings.catch_warnings():
        # the signature is explicit; an input example would load and run the policy while logging
        warnings.filterwarnings("ignore", message=".*input example was not provided.*")
        info = mlflow.pyfunc.log_model(
            name=name,
            python_model=str(POLICY_CODE),
            artifacts={"checkpoint": str(ckpt)},
            signature=SIGNATURE,
            pip_requirements=_requirements(),
            metadata={"agentr1.eval_data": eval_data, "agentr1.checkpoint": str(ckpt)},
        )
        if metrics:
            mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, run_id=rid, model_id=info.model_id)
        # the version is created with the tags that identify it (one insert) and marked pending, so
        # a registration interrupted from here on is recognisable (register_evaluation deletes it)
        mv = mlflow.register_model(
            info.model_uri, registered_name, tags={**(tags or {}), EVAL_DATA_TAG: eval_data, REGISTRATION_TAG: PENDING}
        )
    version = str(mv.version)
    if description:
        client.update_model_version(registered_name, version, description=description)
    with tempfile.TemporaryDirectory(prefix="agentr1-model-") as tmp:  # the files as stored, not as sent
        stored = mlflow.artifacts.download_artifacts(artifact_uri=info.model_uri, dst_path=tmp)
        client.set_model_version_tag(registered_name, version, ARTIFACT_TAG, tree_digest(stored))
    if alias:
        client.set_registered_model_alias(registered_name, alias, version)
    client.set_model_version_tag(registered_name, version, REGISTRATION_TAG, COMPLETE)  # last: the version is whole
    log.info("registered %s version %s (alias %s), model %s", registered_name, version, alias, info.model_id)
    return client.get_model_version(registered_name, version)


def tree_digest(root: str | Path) -> str:
    """:func:`agentr1.io.tree_digest` of a downloaded model, without ``registered_model_meta`` at
    the top (MLflow writes it at download time: the name and version it was fetched as; data,
    never run)."""
    return _tree_digest(root, exclude=DOWNLOAD_WRITTEN)


def train_run_of(client: MlflowClient, experiment_id: str, checkpoint_sha256: str) -> Run | None:
    """The newest finished ``train@`` run whose checkpoint had this digest (tag
    ``agentr1.checkpoint_sha256``, set by the train stage), or ``None``."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{CHECKPOINT_TAG}` = '{checkpoint_sha256}' and tags.`{STAGE_TAG}` = 'train' "
        "and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def describe_version(
    variant: str,
    metrics: Mapping[str, float],
    train_run: Run | None,
    eval_data: str = "",
    verdict: str | None = None,
) -> str:
    """A version's description (Markdown, as MLflow renders it): where its weights come from (a
    link to that ``train@`` run's page), its headline metrics (EM with the CI per split), the data
    it was judged on (``eval_data``: the splits and the digest of their question ids,
    :func:`agentr1.eval.splits.eval_data_fingerprint`) and the verdict (the gate's decision, or why
    there is none), one line each, e.g.::

        ppo: weights from [train@ppo](#/experiments/1/runs/1a2b...) (run 1a2b...). test/em 0.045 [0.020, 0.075]
        judged on test+ood:3f9a... (the questions' ids; the evaluate run's dataset inputs name the files)
        verdict: promote on test/em (...); champion after it: v3"""
    if train_run is not None:
        info = train_run.info
        origin = (
            f"weights from [{info.run_name}](#/experiments/{info.experiment_id}/runs/{info.run_id}) (run {info.run_id})"
        )
    else:
        origin = "weights from no tracked train@ run"
    heads = [
        f"{k} {metrics[k]:.3f} [{metrics.get(k + '_ci_lower', float('nan')):.3f}, "
        f"{metrics.get(k + '_ci_upper', float('nan')):.3f}]"
        for k in sorted(metrics)
        if k.endswith("/em")
    ]
    lines = [f"{variant}: {origin}. " + ("; ".join(heads) or "no EM metrics")]
    if eval_data:
        lines.append(f"judged on {eval_data} (the questions' ids; the evaluate run's dataset inputs name the files)")
    if verdict:
        lines.append(f"verdict: {verdict}")
    return "\n\n".join(lines)


def verdict_of(promotion: Mapping[str, Any] | None, kind: str, variant: str) -> str:
    """The verdict line of a version's description: the gate's decision and reason for a trained
    policy, the alias it holds for a baseline (never gated)."""
    if promotion is None:
        return f"a baseline ({kind}): alias '{variant}', never gated"
    gate_line = f"{promotion['decision']} on {promotion['metric']}"
    if promotion.get("reason"):
        gate_line += f" ({promotion['reason']})"
    return f"{gate_line}; champion after it: v{promotion['champion']}" if promotion.get("champion") else gate_line


def load_policy_model(
    registered_name: str = "agentr1-policy",
    alias: str = CHAMPION,
    *,
    version: str | None = None,
    client: MlflowClient | None = None,
    dst_path: str | Path | None = None,
):
    """The pyfunc of a registered version (``version``, else the one ``alias`` points at), loaded
    only after its downloaded files match the ``agentr1.artifact_sha256`` recorded at registration
    (module docstring: trust boundary). :class:`StageError` when the version is unknown, has no
    recorded digest, or its files differ; in those cases no code of the model has run.
    ``dst_path``: where the files are downloaded (default: a new temporary folder)."""
    client = client or MlflowClient()
    mv = (
        client.get_model_version(registered_name, version)
        if version
        else version_by_alias(client, registered_name, alias)
    )
    if mv is None:
        raise StageError(f"{registered_name} has no '{alias}' alias: {REGISTER_HINT} (or pass version=)")
    expected = mv.tags.get(ARTIFACT_TAG)
    if not expected:
        raise StageError(
            f"{registered_name} version {mv.version} has no {ARTIFACT_TAG} tag, so its files cannot be "
            "verified before its code runs: re-register the checkpoint with agentr1 (evaluate stage)"
        )
    dst = Path(dst_path) if dst_path else Path(tempfile.mkdtemp(prefix="agentr1-model-"))
    local = mlflow.artifacts.download_artifacts(
        artifact_uri=f"models:/{registered_name}/{mv.version}", dst_path=str(dst)
    )
    got = tree_digest(local)
    if got != expected:
        raise StageError(
            f"{registered_name} version {mv.version}: the stored model files do not match the digest recorded "
            f"at registration ({ARTIFACT_TAG} {expected[:16]}..., files {got[:16]}...); refusing to load code "
            "that may have been changed in the artifact store - re-register from a trusted checkpoint"
        )
    return mlflow.pyfunc.load_model(local)


def model_id_of(mv: ModelVersion) -> str | None:
    """The LoggedModel id behind a version: ``mv.model_id``, or parsed from its ``models:/m-...``
    source (some stores leave ``model_id`` empty on the version)."""
    if mv.model_id:
        return mv.model_id
    source = mv.source or ""
    return source[len("models:/") :] if source.startswith("models:/m-") else None


def version_metrics(client: MlflowClient, mv: ModelVersion) -> dict[str, float]:
    """The metrics linked to a version's logged model (its run's metrics for a version
    registered without one)."""
    model_id = model_id_of(mv)
    if model_id:
        return {m.key: m.value for m in client.get_logged_model(model_id).metrics or []}
    return dict(client.get_run(mv.run_id).data.metrics) if mv.run_id else {}


def alias_unset(exc: BaseException) -> bool:
    """Whether ``exc`` is MLflow's answer for an alias that is not set (``INVALID_PARAMETER_VALUE``
    "Registered model alias ... not found.") or a registered model that does not exist
    (``RESOURCE_DOES_NOT_EXIST``): the SQL and file stores raise these, a server forwards them."""
    if not isinstance(exc, MlflowException):
        return False
    if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
        return True
    text = exc.message.lower()
    return exc.error_code == "INVALID_PARAMETER_VALUE" and "alias" in text and "not found" in text


def version_by_alias(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    """The version ``alias`` points at, or ``None`` when the alias is not set or the model does not
    exist (:func:`alias_unset`). Any other failure (a locked SQLite store, a server error) is no
    answer at all, never "no version" (the gate would crown any challenger over a champion it
    could not read): :class:`agentr1.tracking.retry.TrackingFailed` naming the model, the alias
    and the fix."""
    from agentr1.tracking.retry import TrackingFailed, is_tracking_error, short

    try:
        return client.get_model_version_by_alias(name, alias)
    except Exception as exc:
        if alias_unset(exc):
            return None
        if not is_tracking_error(exc):
            raise
        raise TrackingFailed(
            f"registered model {name!r}: reading alias '{alias}' failed ({type(exc).__name__}: {short(exc, 160)}); "
            "nothing decided, no alias moved: run it again once the tracking store answers (another writer holding "
            "the SQLite file? a server down? check tracking.uri / MLFLOW_TRACKING_URI)"
        ) from exc


def version_by_number(client: MlflowClient, name: str, version: str | int) -> ModelVersion:
    """Version ``version`` of ``name``; :class:`StageError` when there is none, and
    :class:`agentr1.tracking.retry.TrackingFailed` when the store does not answer."""
    from agentr1.tracking.retry import TrackingFailed, is_tracking_error, short

    try:
        return client.get_model_version(name, str(version))
    except Exception as exc:
        if isinstance(exc, MlflowException) and exc.error_code in (
            "RESOURCE_DOES_NOT_EXIST",
            "INVALID_PARAMETER_VALUE",
        ):
            raise StageError(
                f"registered model {name!r} has no version {version!r} ({exc.message}): pass a version "
                f"`agentr1 compare` lists, or gate the '{CHALLENGER}' alias"
            ) from None
        if not is_tracking_error(exc):
            raise
        raise TrackingFailed(
            f"registered model {name!r}: reading version {version} failed ({type(exc).__name__}: "
            f"{short(exc, 160)}); nothing decided, no alias moved: run it again once the tracking "
            "store answers"
        ) from exc


def gate_stats(client: MlflowClient, mv: ModelVersion, metric: str) -> GateStats:
    """:class:`GateStats` of a version; :class:`StageError` naming the missing metric keys, or the
    value the gate cannot compare (not finite, outside [0, 1] for a share such as EM, outside its
    own CI: :class:`GateStats`)."""
    values = version_metrics(client, mv)
    keys = (metric, f"{metric}_ci_lower", f"{metric}_ci_upper")
    missing = [k for k in keys if k not in values]
    if missing:
        raise StageError(
            f"{mv.name} version {mv.version} lacks metric(s) {missing} needed by the gate "
            f"(has {sorted(values)}): log them with the model or choose another --metric"
        )
    try:
        return GateStats(
            metric, values[keys[0]], values[keys[1]], values[keys[2]], mv.tags.get(EVAL_DATA_TAG, ""), str(mv.version)
        )
    except ValueError as exc:
        raise StageError(
            f"{mv.name} version {mv.version}: {exc}, so the gate cannot compare it and no alias moved: "
            "evaluate it again (`dvc repro -f evaluate@<run>`, then `agentr1 track`) or gate another "
            "version"
        ) from None


POLICY_KIND_TAG = "agentr1.policy_kind"  # a version's policy kind (register_evaluation): only "rl" is gated


@dataclass(frozen=True)
class Promotion:
    """The outcome of :func:`promote`: ``challenger`` = the version gated (the one asked for by
    number, else the one the ``challenger`` alias pointed at), ``champion`` = the champion version
    after it."""

    model: str
    metric: str
    decision: str
    reason: str
    challenger: str
    previous_champion: str | None
    champion: str | None
    dry_run: bool

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def promote(
    registered_name: str = "agentr1-policy",
    metric: str = "test/em",
    *,
    version: str | int | None = None,
    dry_run: bool = False,
    client: MlflowClient | None = None,
) -> Promotion:
    """Apply the gate to the challenger and the ``champion`` alias of ``registered_name`` and move
    ``champion`` to the challenger when it passes (unless ``dry_run``). The challenger is version
    ``version`` when given (an evaluation gates the version it registered, whatever another writer
    did to the ``challenger`` alias meanwhile), else the version the ``challenger`` alias points
    at. The decision is also recorded as tags on the challenger version (``agentr1.gate.decision``
    / ``agentr1.gate.reason``). Uses the current MLflow tracking URI unless ``client`` is given.

    :class:`StageError` (no alias moved, no tag written) when the challenger is not a trained
    policy (tag ``agentr1.policy_kind`` other than ``rl``: a baseline aliased as challenger), when
    either side's gate metric is missing or out of range (:func:`gate_stats`), and when an alias
    cannot be read (:func:`version_by_alias`: a store error is never "no champion")."""
    client = client or MlflowClient()
    if version is not None:
        challenger = version_by_number(client, registered_name, version)
    else:
        challenger = version_by_alias(client, registered_name, CHALLENGER)
        if challenger is None:
            raise StageError(f"{registered_name} has no '{CHALLENGER}' alias: {REGISTER_HINT}")
    kind = challenger.tags.get(POLICY_KIND_TAG)
    if kind is not None and kind != "rl":
        raise StageError(
            f"{registered_name} version {challenger.version} is a {kind!r} policy ({POLICY_KIND_TAG}), not a trained "
            f"one ('rl'): baselines are never gated, no alias moved; point '{CHALLENGER}' back at an RL version "
            f"(`agentr1 track` or `dvc repro` of its evaluate@<run> stage re-registers it) or pass that version"
        )
    champion = version_by_alias(client, registered_name, CHAMPION)
    decision, reason = gate(
        gate_stats(client, challenger, metric), gate_stats(client, champion, metric) if champion else None
    )
    before = str(champion.version) if champion else None
    after = before
    if not dry_run:
        client.set_model_version_tag(registered_name, challenger.version, "agentr1.gate.decision", decision)
        client.set_model_version_tag(registered_name, challenger.version, "agentr1.gate.reason", reason)
        if decision == "promote":
            client.set_registered_model_alias(registered_name, CHAMPION, challenger.version)
            after = str(challenger.version)
    log.info("promote %s v%s: %s (%s)", registered_name, challenger.version, decision, reason)
    return Promotion(registered_name, metric, decision, reason, str(challenger.version), before, after, dry_run)


def evaluation_identity(digest: str, variant: str, eval_data: str, metrics: Mapping[str, float]) -> dict[str, str]:
    """The version tags that identify one evaluation: the checkpoint digest, the variant, the
    evaluated questions (``eval_data``) and the digest of its metrics (the same checkpoint
    evaluated with other rollout or bootstrap settings is another evaluation, another version)."""
    flat = json.dumps({k: float(v) for k, v in sorted(metrics.items())}, sort_keys=True)
    return {
        CHECKPOINT_TAG: digest,
        VARIANT_TAG: variant,
        EVAL_DATA_TAG: eval_data,
        METRICS_TAG: hashlib.sha256(flat.encode()).hexdigest(),
    }


def registered_version(client: MlflowClient, name: str, identity: Mapping[str, str]) -> ModelVersion | None:
    """The newest complete version of ``name`` whose tags equal ``identity``
    (:func:`evaluation_identity`), else ``None``; every matching version still pending (its
    registration was interrupted: no digest, description or alias) is deleted first, with a
    warning. Versions registered before the ``agentr1.registration`` tag existed never match."""
    try:
        found = client.search_model_versions(
            f"name = '{name}' and tags.`{CHECKPOINT_TAG}` = '{identity[CHECKPOINT_TAG]}'"
        )
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    same = sorted(
        (v for v in found if all(v.tags.get(k) == value for k, value in identity.items())), key=lambda v: int(v.version)
    )
    for v in same:
        if v.tags.get(REGISTRATION_TAG) != COMPLETE:
            log.warning(
                "%s version %s: an unfinished registration of this evaluation (%s = %s: its process was "
                "interrupted before the digest, description or alias were written); deleting it and "
                "registering again",
                name,
                v.version,
                REGISTRATION_TAG,
                v.tags.get(REGISTRATION_TAG),
            )
            client.delete_model_version(name, str(v.version))
    complete = [v for v in same if v.tags.get(REGISTRATION_TAG) == COMPLETE]
    return complete[-1] if complete else None


def _recorded_promotion(client: MlflowClient, mv: ModelVersion, metric: str) -> dict[str, Any] | None:
    """The gate decision a reused version already carries, as :meth:`Promotion.to_dict` (``None``
    when it has none, or when it says ``promote`` but ``champion`` is elsewhere: the run that
    decided was interrupted before moving the alias, so the gate runs again). The previous
    champion of a recorded promotion is not recorded (``None``)."""
    decision, reason = mv.tags.get("agentr1.gate.decision"), mv.tags.get("agentr1.gate.reason", "")
    if not decision:
        return None
    champion = version_by_alias(client, mv.name, CHAMPION)
    now = str(champion.version) if champion is not None else None
    if decision == "promote" and now != str(mv.version):
        return None
    return Promotion(
        mv.name,
        metric,
        decision,
        f"{reason} (recorded when this evaluation was first registered)",
        str(mv.version),
        None if decision == "promote" else now,
        now,
        False,
    ).to_dict()


def register_evaluation(
    run: Any,
    checkpoint: str | Path,
    variant: str,
    kind: str,
    metrics: Mapping[str, float],
    eval_data: str,
    registered_name: str,
    gate_metric: str,
) -> dict[str, Any]:
    """Register an evaluated checkpoint from the evaluation's run ``run`` (a
    :class:`agentr1.tracking.run.StageRun`) with its provenance: the ``train@`` run that wrote the
    weights (found by the checkpoint digest it tagged), the digest, the variant and a description
    with the headline EM. A trained policy (``kind`` ``rl``) becomes ``challenger`` and goes
    through the gate (:func:`promote` on ``gate_metric``); a baseline (the cold start) gets its
    own alias (``variant``) and never takes ``challenger``. Returns the model, the version, the
    train run id and, for a trained policy, the gate's :class:`Promotion` as a dict.

    Idempotent (a re-run after a ``kill -9``, ``agentr1 track`` after an interrupted stage): an
    evaluation is identified by its checkpoint digest, variant, ``eval_data`` and metrics
    (:func:`evaluation_identity`). A complete version of it is reused (no new version: the alias is
    pointed at it again, the metrics go to this run, and an RL one is gated unless its decision is
    already recorded, :func:`_recorded_promotion`); an unfinished one is deleted first
    (:func:`registered_version`). Callers hold :func:`agentr1.tracking.writelock.writer_lock`."""
    digest = _tree_digest(checkpoint)  # the checkpoint as the trainer wrote it (agentr1.io.tree_digest)
    rl = kind == "rl"
    alias = CHALLENGER if rl else variant
    client = run.client()
    identity = evaluation_identity(digest, variant, eval_data, metrics)
    mv = registered_version(client, registered_name, identity)
    reused = mv is not None
    train_run: Run | None = None
    if mv is not None:
        _reuse(run, client, registered_name, mv, alias, metrics, variant)
        train_run_id = mv.tags.get("agentr1.train_run_id")
    else:
        mv, train_run = _register_new(run, checkpoint, digest, identity, kind, metrics, alias, registered_name)
        train_run_id = train_run.info.run_id if train_run is not None else None
    info: dict[str, Any] = {"model": registered_name, "version": str(mv.version), "train_run_id": train_run_id}
    if reused:
        info["reused"] = True
    recorded = _recorded_promotion(client, mv, gate_metric) if rl and reused else None
    if recorded is not None:
        info["promotion"] = recorded
    elif rl:
        info["promotion"] = promote(
            registered_name, gate_metric, version=str(mv.version)
        ).to_dict()  # this run's, by number
    if not reused or recorded is None:  # the verdict joins the description once it is known
        if reused:
            train_run = _run_or_none(client, train_run_id)
        verdict = verdict_of(info.get("promotion"), kind, variant)
        described = describe_version(variant, metrics, train_run, eval_data, verdict)
        if described != mv.description:  # a reused baseline's is written already
            client.update_model_version(registered_name, mv.version, description=described)
    return info


def _run_or_none(client: MlflowClient, run_id: str | None) -> Run | None:
    """The run ``run_id``, or None when there is none (no id, or a run the store no longer holds:
    the description then says so instead of failing the registration)."""
    if not run_id:
        return None
    try:
        return client.get_run(run_id)
    except MlflowException:
        return None


def _register_new(
    run: Any,
    checkpoint: str | Path,
    digest: str,
    identity: Mapping[str, str],
    kind: str,
    metrics: Mapping[str, float],
    alias: str,
    registered_name: str,
) -> tuple[ModelVersion, Run | None]:
    """A new version of this evaluation (:func:`register_evaluation`) with its provenance tags and
    description; with the ``train@`` run that wrote the weights (a trained policy's, else None)."""
    variant, eval_data = identity[VARIANT_TAG], identity[EVAL_DATA_TAG]
    train_run = train_run_of(run.client(), run.experiment_id, digest) if kind == "rl" else None
    tags = {k: v for k, v in identity.items() if k != EVAL_DATA_TAG} | {"agentr1.policy_kind": kind}
    if train_run is not None:
        tags["agentr1.train_run_id"] = train_run.info.run_id
    mv = run.log_model(
        checkpoint,
        metrics,
        eval_data=eval_data,
        name=f"policy-{variant}",
        alias=alias,
        tags=tags,
        description=describe_version(variant, metrics, train_run, eval_data),
        registered_name=registered_name,
    )
    return mv, train_run


def _reuse(
    run: Any,
    client: MlflowClient,
    registered_name: str,
    mv: ModelVersion,
    alias: str,
    metrics: Mapping[str, float],
    variant: str,
) -> None:
    """Point ``alias`` at the complete version ``mv`` that already holds this evaluation, and give
    this evaluation's run the metrics and the version it reused."""
    client.set_registered_model_alias(registered_name, alias, str(mv.version))
    run.log_metrics(metrics, step=0)  # a registered model's metrics go to its own run: this one has none yet
    run.set_tags({"agentr1.registered_version": f"{registered_name}/{mv.version}"})
    log.info(
        "%s version %s already holds this evaluation (%s): reused, alias %s",
        registered_name,
        mv.version,
        variant,
        alias,
    )
