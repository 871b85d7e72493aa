"""Which MLflow tracking store agentr1 uses (no MLflow import: flows and light commands use it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentr1.config import Config

SQLITE = "sqlite:///"
ARTIFACT_ROOT_ENV = "AGENTR1_ARTIFACT_ROOT"  # overrides tracking.artifact_root (a sqlite store's artifacts)


def artifact_root(cfg: Config) -> tuple[str, str]:
    """Where a local (SQLite) store keeps its artifacts, and the setting that chose it:
    ``AGENTR1_ARTIFACT_ROOT`` when set, else ``tracking.artifact_root``."""
    env = os.environ.get(ARTIFACT_ROOT_ENV, "").strip()
    return (env, ARTIFACT_ROOT_ENV) if env else (cfg.tracking.artifact_root, "tracking.artifact_root")


def resolve_tracking_uri(cfg: Config, uri: str | None = None, project_dir: str | os.PathLike[str] | None = None) -> str:
    """The tracking store: ``uri`` when given (a flow's parameter), else ``MLFLOW_TRACKING_URI``
    when set, else ``tracking.uri`` from params.

    A relative ``sqlite:///`` path is relative to ``project_dir`` when one is given (a flow may run
    anywhere) and otherwise left relative: the stages run in the project root, and MLflow resolves
    it against the working directory. Absolute ``sqlite:////`` paths and servers pass unchanged."""
    chosen = (uri or "").strip() or os.environ.get("MLFLOW_TRACKING_URI", "").strip() or cfg.tracking.uri
    if project_dir is not None and chosen.startswith(SQLITE) and not chosen.startswith(SQLITE + "/"):
        return SQLITE + str((Path(project_dir) / chosen[len(SQLITE) :]).resolve())
    return chosen


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` store (without a ``?query`` of driver options),
    None for any other store (``sqlite://`` in memory included)."""
    if not uri.startswith(SQLITE):
        return None
    path = uri[len(SQLITE) :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None
