"""A saved checkpoint's bytes and modes depend only on the weights and the tokenizer: not on
HF_HUB_OFFLINE (transformers records ``local_files_only`` / ``is_local`` in a loaded tokenizer's
config), and not on the writer (safetensors writes its file 0600). The copy MLflow's artifact
store keeps of a registered checkpoint has the same modes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracking_helpers import make_checkpoint

# load a checkpoint (model + tokenizer) and save it again with the stages' save_checkpoint
RESAVE = """
import sys
from agentr1.models import load_checkpoint, save_checkpoint
model, tokenizer = load_checkpoint(sys.argv[1])
save_checkpoint(model, tokenizer, sys.argv[2])
"""
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_mode & 0o777 for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A tiny checkpoint saved straight from a scratch model and tokenizer (never loaded)."""
    return make_checkpoint(tmp_path_factory.mktemp("base") / "policy")


@pytest.fixture
def umask():
    """Set the process umask for a test, restored after it."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda mask: os.umask(mask)
    os.umask(saved)


def test_checkpoint_bytes_do_not_depend_on_hf_hub_offline(base, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
    offline, online = tmp_path / "offline", tmp_path / "online"
    procs = [
        subprocess.Popen([sys.executable, "-c", RESAVE, str(base), str(out)], env=e, stderr=subprocess.PIPE, text=True)
        for out, e in ((offline, {**env, "HF_HUB_OFFLINE": "1"}), (online, env))
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    a, b = tree(offline), tree(online)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    # and both equal the straight save: loading adds nothing to what is written
    assert a == tree(base)
    config = (offline / "tokenizer_config.json").read_text()
    assert "local_files_only" not in config and "is_local" not in config


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_every_checkpoint_file_gets_the_umask_mode(base, tmp_path, umask, mask):
    from agentr1.models import load_checkpoint, save_checkpoint

    model, tokenizer = load_checkpoint(base)
    umask(mask)
    out = save_checkpoint(model, tokenizer, tmp_path / "parent" / "ckpt")
    got = modes(out)
    assert got and got == {name: (0o666 & ~mask) for name in got}, {k: oct(v) for k, v in got.items()}
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask


def test_the_artifact_store_copy_has_ordinary_modes(base, tmp_path, umask, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    from agentr1.models import load_checkpoint, save_checkpoint
    from agentr1.tracking.registry import log_policy_model

    umask(0o022)
    model, tokenizer = load_checkpoint(base)
    ckpt = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    uri, artifacts = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    try:
        client = MlflowClient(tracking_uri=uri)
        exp = client.create_experiment("modes", artifact_location=artifacts.as_uri())
        run = client.create_run(exp)
        log_policy_model(ckpt, {}, "modes-policy", run_id=run.info.run_id, client=client, alias=None)
    finally:
        mlflow.set_tracking_uri(None)
    stored = sorted(artifacts.rglob("*"))  # the model's files (MLmodel, ...) and the checkpoint's copy
    assert {"model.safetensors", "tokenizer_config.json", "config.json"} <= {p.name for p in stored}, stored
    bad = {
        p.relative_to(artifacts).as_posix(): oct(p.stat().st_mode & 0o777)
        for p in stored
        if p.stat().st_mode & 0o777 != (0o755 if p.is_dir() else 0o644)
    }
    assert bad == {}
