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
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Mapping

import mlflow
from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

from agentr1.errors import StageError
from agentr1.tracking.gate import GateStats, gate

log = logging.getLogger(__name__)

CHALLENGER, CHAMPION = "challenger", "champion"
EVAL_DATA_TAG = "agentr1.eval_data"
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
) -> ModelVersion:
    """Log ``checkpoint_dir`` as a pyfunc model in ``run_id`` (default: the active run), log
    ``metrics`` to the run linked to that model, register it as a new version of
    ``registered_name`` (tag ``agentr1.eval_data`` = ``eval_data``) and set alias
    ``challenger`` to it. Returns the registered version."""
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
    client.set_registered_model_alias(registered_name, CHALLENGER, version)
    log.info("registered %s version %s (alias %s), model %s", registered_name, version, CHALLENGER, info.model_id)
    return client.get_model_version(registered_name, version)


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
        raise StageError(f"{registered_name} has no '{CHALLENGER}' alias: log and register a trained policy first")
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
