"""Which ``dvc.lock`` entries the MLflow store already has a run for (``agentr1 track``).

A stage run is keyed by its ``dvc.lock`` entry: the run name is the entry's key (``agentr1.run_name``
= ``train@ppo``) and, when the stage ends, the run is tagged with the hash of every output as DVC
locks it (``dvc.out.<path>``, :func:`agentr1.tracking.mlflow_adapter.output_tags`). An entry is
*logged* when a FINISHED run of the profile's experiment has that name and carries each of the
entry's output hashes - whether a stage logged it live or ``agentr1 track`` reconstructed it.

A live run cannot always tag its outputs: a stage's first run has no ``dvc.lock`` entry yet when it
ends (DVC writes the entry after the command exits), and a run whose ``dvc.yaml`` outputs changed
tags the old paths. Such a run is *adoptable*: the newest FINISHED live run (no
``agentr1.logged_from`` tag) of the entry's name in the current pipeline (same commit and params,
so the same deterministic outputs) whose ``dvc.out.*`` tags contradict none of the entry's hashes.
:func:`adopt` adds the missing tags, after which the entry is logged.

Only MLflow's own APIs are used (``search_runs`` with filter strings on tags, the registry's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from agentr1.errors import StageError
from agentr1.tracking.mlflow_adapter import check_reachable, connect, experiment_name, out_tag
from agentr1.tracking.store import bound_http_client, db_errors, store_error
from agentr1.tracking.tags import LOGGED_FROM_TAG, PIPELINE_TAG, RUN_NAME_TAG
from agentr1.tracking.uri import resolve_tracking_uri

if TYPE_CHECKING:
    from agentr1.config import Config

_PAGE = 1000


@dataclass(frozen=True)
class Found:
    """The run an entry is (or can be) keyed to: ``state`` is ``logged`` or ``adoptable``."""

    state: str
    run_id: str


def open_store(cfg: Config, create: bool = True) -> tuple[MlflowClient | None, str | None]:
    """A client on the stages' store and the id of the profile's experiment: made when missing
    with ``create`` (:func:`connect`), else ``None`` for a missing one, and no client for a
    SQLite store that does not exist yet (no file, an empty or a half-created one: nothing is
    written; the next ``create`` makes it). A bad store is a :class:`StageError` naming it."""
    if create:
        client, _, exp_id = connect(cfg)
        return client, exp_id
    uri = resolve_tracking_uri(cfg)
    bound_http_client(cfg.tracking)
    if not check_reachable(uri, cfg.tracking.connect_timeout_s, create=False):
        return None, None
    try:
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment_name(cfg))
    except (MlflowException, *db_errors()) as exc:
        raise store_error(uri, exc) from None
    return client, exp.experiment_id if exp is not None and exp.lifecycle_stage == "active" else None


def runs_named(client: MlflowClient, experiment_id: str, key: str) -> list[Run]:
    """Every FINISHED run named ``key`` (tag ``agentr1.run_name``) in the experiment, newest first."""
    if "'" in key or "`" in key:
        raise StageError(f"dvc.lock stage {key!r}: a stage name with a quote cannot be looked up in MLflow; rename it")
    flt = f"tags.`{RUN_NAME_TAG}` = '{key}' and attributes.status = 'FINISHED'"
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=flt,
            order_by=["attributes.start_time DESC"],
            max_results=_PAGE,
            page_token=token,
        )
        runs += list(page)
        token = page.token
        if not token:
            return runs


def find(client: MlflowClient, experiment_id: str, key: str, outs: Mapping[str, str], pipeline_id: str) -> Found | None:
    """The run that logged lock entry ``key`` with output hashes ``outs`` (``{path: md5}``), else
    the adoptable live run of the current pipeline (module docstring), else ``None``."""
    runs = runs_named(client, experiment_id, key)
    for run in runs:
        if all(run.data.tags.get(out_tag(path)) == digest for path, digest in outs.items()):
            return Found("logged", run.info.run_id)
    for run in runs:  # newest first
        tags = run.data.tags
        if tags.get(PIPELINE_TAG) != pipeline_id or LOGGED_FROM_TAG in tags:
            continue
        if all(tags.get(out_tag(path), digest) == digest for path, digest in outs.items()):
            return Found("adoptable", run.info.run_id)
    return None


def adopt(client: MlflowClient, run_id: str, outs: Mapping[str, str]) -> None:
    """Tag a live run with the output hashes of its ``dvc.lock`` entry (module docstring)."""
    for path, digest in outs.items():
        client.set_tag(run_id, out_tag(path), digest)


def registry_state(client: MlflowClient, name: str) -> tuple[int, dict[str, str]]:
    """``(number of versions, {alias: version})`` of registered model ``name``; ``(0, {})``
    when it does not exist."""
    try:
        model = client.get_registered_model(name)
    except MlflowException:
        return 0, {}
    versions = client.search_model_versions(f"name = '{name}'")
    return len(versions), {alias: str(v) for alias, v in sorted((model.aliases or {}).items())}
