"""Policies in the MLflow model registry: log a checkpoint as a model linked to its evaluation
metrics, register it, point ``challenger`` at the newest version, and move ``champion`` through
the gate (:mod:`agentr1.tracking.gate`).

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
import logging
import tempfile
import warnings
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

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
# how a store gets its registered policies, for every "no such alias" error
REGISTER_HINT = ("the evaluate stages register the policies they evaluate: run `agentr1 track` in the project root "
                 "(it registers those of the evaluations DVC skipped or restored, e.g. after a fresh clone's `dvc repro` "
                 "or `dvc pull`), or `dvc repro` the evaluate@<run> stages; `agentr1 promote` then moves champion")
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
    ``None``). Returns the registered version."""
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
            registered_model_name=registered_name,
            metadata={"agentr1.eval_data": eval_data, "agentr1.checkpoint": str(ckpt)},
        )
        if metrics:
            mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, run_id=rid, model_id=info.model_id)
    version = str(info.registered_model_version)
    client.set_model_version_tag(registered_name, version, EVAL_DATA_TAG, eval_data)
    for key, value in (tags or {}).items():
        client.set_model_version_tag(registered_name, version, key, value)
    if description:
        client.update_model_version(registered_name, version, description=description)
    with tempfile.TemporaryDirectory(prefix="agentr1-model-") as tmp:  # the files as stored, not as sent
        stored = mlflow.artifacts.download_artifacts(artifact_uri=info.model_uri, dst_path=tmp)
        client.set_model_version_tag(registered_name, version, ARTIFACT_TAG, tree_digest(stored))
    if alias:
        client.set_registered_model_alias(registered_name, alias, version)
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
        order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def describe_version(variant: str, metrics: Mapping[str, float], train_run: Run | None) -> str:
    """A version's description (Markdown, as MLflow renders it): where its weights come from, a
    link to that ``train@`` run's page, and its headline metrics (EM with the CI per split), e.g.
    ``ppo: weights from [train@ppo](#/experiments/1/runs/1a2b...) (run 1a2b...). test/em 0.045 [0.020, 0.075]``."""
    if train_run is not None:
        info = train_run.info
        origin = f"weights from [{info.run_name}](#/experiments/{info.experiment_id}/runs/{info.run_id}) (run {info.run_id})"
    else:
        origin = "weights from no tracked train@ run"
    heads = [f"{k} {metrics[k]:.3f} [{metrics.get(k + '_ci_lower', float('nan')):.3f}, "
             f"{metrics.get(k + '_ci_upper', float('nan')):.3f}]" for k in sorted(metrics) if k.endswith("/em")]
    return f"{variant}: {origin}. " + ("; ".join(heads) or "no EM metrics")


def load_policy_model(
    registered_name: str = "agentr1-policy", alias: str = CHAMPION, *, version: str | None = None,
    client: MlflowClient | None = None, dst_path: str | Path | None = None,
):
    """The pyfunc of a registered version (``version``, else the one ``alias`` points at), loaded
    only after its downloaded files match the ``agentr1.artifact_sha256`` recorded at registration
    (module docstring: trust boundary). :class:`StageError` when the version is unknown, has no
    recorded digest, or its files differ; in those cases no code of the model has run.
    ``dst_path``: where the files are downloaded (default: a new temporary folder)."""
    client = client or MlflowClient()
    mv = client.get_model_version(registered_name, version) if version else version_by_alias(client, registered_name, alias)
    if mv is None:
        raise StageError(f"{registered_name} has no '{alias}' alias: {REGISTER_HINT} (or pass version=)")
    expected = mv.tags.get(ARTIFACT_TAG)
    if not expected:
        raise StageError(f"{registered_name} version {mv.version} has no {ARTIFACT_TAG} tag, so its files cannot be "
                         "verified before its code runs: re-register the checkpoint with agentr1 (evaluate stage)")
    dst = Path(dst_path) if dst_path else Path(tempfile.mkdtemp(prefix="agentr1-model-"))
    local = mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{registered_name}/{mv.version}", dst_path=str(dst))
    got = tree_digest(local)
    if got != expected:
        raise StageError(f"{registered_name} version {mv.version}: the stored model files do not match the digest recorded "
                         f"at registration ({ARTIFACT_TAG} {expected[:16]}..., files {got[:16]}...); refusing to load code "
                         "that may have been changed in the artifact store - re-register from a trusted checkpoint")
    return mlflow.pyfunc.load_model(local)


def model_id_of(mv: ModelVersion) -> str | None:
    """The LoggedModel id behind a version: ``mv.model_id``, or parsed from its ``models:/m-...``
    source (some stores leave ``model_id`` empty on the version)."""
    if mv.model_id:
        return mv.model_id
    source = mv.source or ""
    return source[len("models:/"):] if source.startswith("models:/m-") else None


def version_metrics(client: MlflowClient, mv: ModelVersion) -> dict[str, float]:
    """The metrics linked to a version's logged model (its run's metrics for a version
    registered without one)."""
    model_id = model_id_of(mv)
    if model_id:
        return {m.key: m.value for m in client.get_logged_model(model_id).metrics or []}
    return dict(client.get_run(mv.run_id).data.metrics) if mv.run_id else {}


def version_by_alias(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    """The version ``alias`` points at, or ``None`` when the alias (or the model) is unset."""
    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None


def gate_stats(client: MlflowClient, mv: ModelVersion, metric: str) -> GateStats:
    """:class:`GateStats` of a version; :class:`StageError` naming the missing metric keys."""
    values = version_metrics(client, mv)
    keys = (metric, f"{metric}_ci_lower", f"{metric}_ci_upper")
    missing = [k for k in keys if k not in values]
    if missing:
        raise StageError(
            f"{mv.name} version {mv.version} lacks metric(s) {missing} needed by the gate "
            f"(has {sorted(values)}): log them with the model or choose another --metric"
        )
    return GateStats(metric, values[keys[0]], values[keys[1]], values[keys[2]], mv.tags.get(EVAL_DATA_TAG, ""), str(mv.version))


@dataclass(frozen=True)
class Promotion:
    """The outcome of :func:`promote` (``champion`` = the champion version after it)."""

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
    registered_name: str = "agentr1-policy", metric: str = "test/em", *, dry_run: bool = False, client: MlflowClient | None = None
) -> Promotion:
    """Apply the gate to the ``challenger`` and ``champion`` aliases of ``registered_name`` and
    move ``champion`` to the challenger when it passes (unless ``dry_run``). The decision is
    also recorded as tags on the challenger version (``agentr1.gate.decision`` /
    ``agentr1.gate.reason``). Uses the current MLflow tracking URI unless ``client`` is given."""
    client = client or MlflowClient()
    challenger = version_by_alias(client, registered_name, CHALLENGER)
    if challenger is None:
        raise StageError(f"{registered_name} has no '{CHALLENGER}' alias: {REGISTER_HINT}")
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


def register_evaluation(run: Any, checkpoint: str | Path, variant: str, kind: str, metrics: Mapping[str, float],
                        eval_data: str, registered_name: str, gate_metric: str) -> dict[str, Any]:
    """Register an evaluated checkpoint from the evaluation's run ``run`` (a
    :class:`agentr1.tracking.run.StageRun`) with its provenance: the ``train@`` run that wrote the
    weights (found by the checkpoint digest it tagged), the digest, the variant and a description
    with the headline EM. A trained policy (``kind`` ``rl``) becomes ``challenger`` and goes
    through the gate (:func:`promote` on ``gate_metric``); a baseline (the cold start) gets its
    own alias (``variant``) and never takes ``challenger``. Returns the model, the version, the
    train run id and, for a trained policy, the gate's :class:`Promotion` as a dict."""
    digest = _tree_digest(checkpoint)  # the checkpoint as the trainer wrote it (agentr1.io.tree_digest)
    rl = kind == "rl"
    train_run = train_run_of(run.client(), run.experiment_id, digest) if rl else None
    tags = {CHECKPOINT_TAG: digest, "agentr1.variant": variant, "agentr1.policy_kind": kind}
    if train_run is not None:
        tags["agentr1.train_run_id"] = train_run.info.run_id
    mv = run.log_model(checkpoint, metrics, eval_data=eval_data, name=f"policy-{variant}",
                       alias=CHALLENGER if rl else variant, tags=tags,
                       description=describe_version(variant, metrics, train_run), registered_name=registered_name)
    info: dict[str, Any] = {"model": registered_name, "version": str(mv.version), "train_run_id": tags.get("agentr1.train_run_id")}
    if rl:
        info["promotion"] = promote(registered_name, gate_metric).to_dict()
    return info
