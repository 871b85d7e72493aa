"""Shared test setup: offline, no analytics, deterministic threads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

from agentr1.numerics import pin_cpu_numerics  # noqa: E402

pin_cpu_numerics()  # before anything imports torch: tests run the kernels the stages run

REPO_ROOT = Path(__file__).resolve().parents[1]
# Real-format samples of HotpotQA / 2Wiki / MuSiQue / FlashRAG live in ../shared/fixtures.
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The real-format dataset samples; tests that need them skip where they are absent."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"real-format fixtures not present at {SHARED_FIXTURES}")
    return SHARED_FIXTURES


@pytest.fixture(autouse=True, scope="session")
def _isolated_mlflow_store(tmp_path_factory: pytest.TempPathFactory):
    """Stages run by tests log to a throwaway SQLite store, never to the repo's mlflow/."""
    if "MLFLOW_TRACKING_URI" in os.environ:
        yield
        return
    store = tmp_path_factory.mktemp("mlflow")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store / 'mlflow.db'}"
    os.environ["AGENTR1_ARTIFACT_ROOT"] = str(store / "artifacts")  # not the repo's mlflow/artifacts
    try:
        yield
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.pop("AGENTR1_ARTIFACT_ROOT", None)
