"""MLflow adapter against the default SQLite store (plus its pure parts: logger, provenance,
promotion gate). The same scenarios run against a real server in test_tracking_server.py."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1.errors import StageError
from agentr1.tracking import InMemoryLogger, MetricsLogger, NullLogger, TrajectoryLogger
from agentr1.tracking.gate import GateStats, gate
from agentr1.tracking.provenance import (
    dvc_dep_hashes,
    dvc_hash,
    flat_params,
    git_state,
    pipeline_id,
    pipeline_outputs,
    stage_outputs,
)
from tracking_helpers import (
    check_registry,
    check_stage_run,
    check_tampered_model_is_refused,
    check_traces,
    good_trajectory,
    make_checkpoint,
    tracking_cfg,
    write_lock,
)


@pytest.fixture(autouse=True)
def _no_env_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("AGENTR1_ARTIFACT_ROOT", raising=False)  # these tests set tracking.artifact_root
    monkeypatch.setenv("AGENTR1_PIPELINE_ID", "test-pipeline")


# ------------------------------------------------------------------------------- pure parts
def test_core_does_not_import_mlflow() -> None:
    code = "import agentr1.tracking, agentr1.tracking.gate, agentr1.tracking.provenance, sys; print('mlflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_loggers_record_and_validate() -> None:
    mem = InMemoryLogger()
    for step in range(3):
        mem.log({"train/loss": 1.0 / (step + 1)}, step=step)
    assert mem.history["train/loss"] == [(0, 1.0), (1, 0.5), (2, 1 / 3)]
    assert isinstance(mem, MetricsLogger) and isinstance(NullLogger(), MetricsLogger)
    assert isinstance(mem, TrajectoryLogger) and isinstance(NullLogger(), TrajectoryLogger)
    mem.log_trajectories([good_trajectory()], step=4)
    assert mem.trajectories == [(4, "train", 1)]
    with pytest.raises(TypeError, match="train/loss"):
        mem.log({"train/loss": "high"}, step=3)
    with pytest.raises(TypeError, match="step"):
        NullLogger().log({"x": 1.0}, step=-1)


def test_flat_params_dotted_and_truncated() -> None:
    flat = flat_params({"a": {"b": {"c": 1}, "d": [1, 2]}, "e": None, "f": "x" * 7000, "g": True})
    assert flat["a.b.c"] == "1" and flat["a.d"] == "[1, 2]" and flat["e"] == "null" and flat["g"] == "true"
    assert len(flat["f"]) == 6000 and flat["f"].endswith("...[truncated]")


def test_dvc_dep_hashes_prefers_fresh_values(tmp_path: Path) -> None:
    src = tmp_path / "train.py"
    src.write_text("print('hi')\n")
    lock = write_lock(tmp_path / "dvc.lock", src)
    deps = dvc_dep_hashes("sft", lock)
    assert deps["data/processed"] == {"hash": "upstream123.dir", "source": "upstream"}
    assert deps["train.py"] == {"hash": hashlib.md5(src.read_bytes()).hexdigest(), "source": "file"}
    assert deps["src/somewhere"] == {"hash": "lockeddir.dir", "source": "locked"}
    assert dvc_dep_hashes("evaluate", lock) == {} and dvc_dep_hashes("sft", tmp_path / "none.lock") == {}


def test_dvc_hash_is_the_one_dvc_locks(tmp_path: Path) -> None:
    """A file's hash is its md5; a folder's is DVC's ``.dir`` hash (checked against dvc_data)."""
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta
    from dvc_data.hashfile.tree import Tree

    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "b.txt").write_text("bee\n")
    (out / "sub" / "a.bin").write_bytes(b"\x00\x01")
    tree = Tree()
    for f in (out / "b.txt", out / "sub" / "a.bin"):
        tree.add(
            tuple(f.relative_to(out).parts),
            Meta(size=f.stat().st_size),
            HashInfo("md5", hashlib.md5(f.read_bytes()).hexdigest()),
        )
    tree.digest()
    assert dvc_hash(out) == tree.hash_info.value and dvc_hash(out).endswith(".dir")
    assert dvc_hash(out / "b.txt") == hashlib.md5(b"bee\n").hexdigest() and dvc_hash(tmp_path / "none") is None


def test_git_dirty_ignores_the_pipeline_outputs(tmp_path: Path) -> None:
    """``dvc repro`` rewrites dvc.lock and the uncached outputs: not a dirty tree; code is."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "table.md").write_text("old\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    lock = tmp_path / "dvc.lock"
    lock.write_text(
        "schema: '2.0'\nstages:\n  report:\n    cmd: agentr1 report\n    outs:\n"
        "    - path: reports/table.md\n      hash: md5\n      md5: abc\n"
    )
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert pipeline_outputs(lock) == ["dvc.lock", "reports/table.md"] and stage_outputs("report", lock) == [
        "reports/table.md"
    ]
    lock.write_text(lock.read_text() + "\n")
    (tmp_path / "reports" / "table.md").write_text("new\n")
    assert git_state(tmp_path, exclude=pipeline_outputs(lock))[1] is False
    assert git_state(tmp_path)[1] is True  # without the exclusions: dirty
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path, exclude=pipeline_outputs(lock))[1] is True


def test_pipeline_id_env_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pipeline_id("ph", "abcdef1234567890") == "test-pipeline"
    monkeypatch.delenv("AGENTR1_PIPELINE_ID")
    assert pipeline_id("ph", "abcdef1234567890") == "abcdef123456-ph"


def _stats(v: float, lo: float, hi: float, data: str = "test:abc", version: str | None = None) -> GateStats:
    return GateStats("test/em", v, lo, hi, data, version)


@pytest.mark.parametrize(
    ("challenger", "champion", "decision", "words"),
    [
        (_stats(0.30, 0.20, 0.40), None, "promote", "no champion"),
        (_stats(0.70, 0.62, 0.78), _stats(0.50, 0.42, 0.58), "promote", "beyond the CI"),
        (_stats(0.60, 0.52, 0.68), _stats(0.50, 0.42, 0.58), "keep", "not beyond"),  # point above, CIs overlap
        (_stats(0.40, 0.32, 0.48), _stats(0.50, 0.42, 0.58), "keep", "not beyond"),  # worse
        (_stats(0.90, 0.85, 0.95), _stats(0.50, 0.42, 0.58, data="dev:xyz"), "keep", "evaluation data differ"),
        (_stats(0.50, 0.42, 0.58, version="3"), _stats(0.50, 0.42, 0.58, version="3"), "keep", "already the champion"),
    ],
)
def test_gate_hand_cases(challenger: GateStats, champion: GateStats | None, decision: str, words: str) -> None:
    got, reason = gate(challenger, champion)
    assert got == decision and words in reason


def test_gate_rejects_inconsistent_stats() -> None:
    with pytest.raises(ValueError, match="does not contain"):
        GateStats("test/em", 0.9, 0.1, 0.5)


def test_unreachable_server_fails_at_stage_start(tmp_path: Path) -> None:
    from agentr1.tracking import stage_run

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    cfg = tracking_cfg(uri, tmp_path / "art", connect_timeout_s=1.0)
    entered = False
    with pytest.raises(StageError) as exc:
        with stage_run(cfg, "sft"):
            entered = True
    assert uri in str(exc.value) and "unreachable" in str(exc.value) and not entered


def test_credentials_in_the_tracking_uri_never_reach_errors_or_logs(tmp_path: Path, caplog) -> None:
    from agentr1.tracking import stage_run
    from agentr1.tracking.redact import redact_uri

    assert redact_uri("http://alice:s3cret@127.0.0.1:5000/x") == "http://***@127.0.0.1:5000/x"
    assert redact_uri("sqlite:///mlflow/mlflow.db") == "sqlite:///mlflow/mlflow.db"
    assert redact_uri("boom: http://u:p@h:1/health") == "boom: http://***@h:1/health"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tracking_cfg(f"http://alice:s3cret@127.0.0.1:{port}", tmp_path / "art", connect_timeout_s=1.0)
    with pytest.raises(StageError) as exc, caplog.at_level("DEBUG"):
        with stage_run(cfg, "sft"):
            pass
    assert f"http://***@127.0.0.1:{port}" in str(exc.value)
    assert "s3cret" not in str(exc.value) and "alice" not in str(exc.value) and "s3cret" not in caplog.text


def test_tracking_disabled_runs_without_mlflow(tmp_path: Path) -> None:
    from agentr1.tracking import stage_run

    cfg = tracking_cfg("http://127.0.0.1:9", tmp_path / "art", enabled=False)
    with stage_run(cfg, "sft") as run:
        run.logger.log({"train/loss": 1.0}, step=0)
        assert not run.enabled and run.log_traces([good_trajectory()]) == []


# --------------------------------------------------------------------------- SQLite store
@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("mlflow_sqlite")
    return f"sqlite:///{root / 'mlflow.db'}", root / "artifacts"


def test_stage_run_sqlite(sqlite_store, tmp_path: Path) -> None:
    uri, art = sqlite_store
    src = tmp_path / "sft.py"
    src.write_text("x = 1\n")
    run_id = check_stage_run(tracking_cfg(uri, art), write_lock(tmp_path / "dvc.lock", src))
    from mlflow import MlflowClient

    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.data.tags["dvc.dep.sft.py"] == hashlib.md5(b"x = 1\n").hexdigest()
    assert run.data.tags["dvc.dep.src/somewhere"] == "lockeddir.dir"
    assert "agentr1.dvc.deps" not in run.data.tags  # the dvc.dep.* tags say it once
    assert run.info.artifact_uri.startswith((art / "agentr1-nano").as_uri())


def test_output_hashes_tagged_and_parent_lasts_the_pipeline(sqlite_store, tmp_path: Path) -> None:
    """A stage run is tagged ``dvc.out.<path>`` with the hash DVC will lock for each output; the
    parent run stays open while a stage runs and ends with the last one."""
    from mlflow import MlflowClient

    from agentr1.tracking import stage_run

    uri, art = sqlite_store
    client = MlflowClient(tracking_uri=uri)
    lock = tmp_path / "dvc.lock"
    lock.write_text(
        "schema: '2.0'\nstages:\n  index:\n    cmd: agentr1 index\n    outs:\n"
        "    - path: report.json\n      hash: md5\n      md5: old\n    - path: missing.json\n"
    )
    cfg = tracking_cfg(uri, art)
    with stage_run(cfg, "prepare", lock_path=lock) as first:
        pass
    with stage_run(cfg, "index", lock_path=lock) as run:
        (tmp_path / "report.json").write_text("{}\n")
        assert client.get_run(run.pipeline.run_id).info.status == "RUNNING"
    got = client.get_run(run.run_id)
    assert got.data.tags["dvc.out.report.json"] == hashlib.md5(b"{}\n").hexdigest()
    assert "dvc.out.missing.json" not in got.data.tags
    parent = client.get_run(got.data.tags["mlflow.parentRunId"])
    assert parent.info.run_id == first.pipeline.run_id and parent.info.status == "FINISHED"
    assert parent.info.start_time <= client.get_run(first.run_id).info.start_time
    assert parent.info.end_time >= got.info.end_time


def test_train_and_evaluate_runs_list_the_processed_data_they_read(sqlite_store, tmp_path: Path) -> None:
    """The runs page's Dataset column: each processed file a stage reads as an MLflow dataset
    input with its name, digest, source, rows and context (agentr1.tracking.datasets)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from mlflow import MlflowClient

    from agentr1.tracking import stage_run
    from agentr1.tracking.datasets import file_digest

    uri, art = sqlite_store
    cfg = tracking_cfg(uri, art)
    cfg.data.processed_dir = str(tmp_path / "processed")
    (tmp_path / "processed").mkdir()
    for stem, rows in {"test": 3, "ood": 2, "dev": 5, "corpus": 4}.items():  # no train.parquet
        pq.write_table(
            pa.table({"id": [f"{stem}{i}" for i in range(rows)]}), tmp_path / "processed" / f"{stem}.parquet"
        )
    client = MlflowClient(tracking_uri=uri)
    seen = {}
    for stage in ("evaluate", "train", "sft"):
        with stage_run(cfg, stage, run_name=f"{stage}@datasets-test", lock_path=tmp_path / "no.lock") as run:
            pass
        seen[stage] = {
            d.dataset.name: (d.dataset, {t.key: t.value for t in d.tags})
            for d in client.get_run(run.run_id).inputs.dataset_inputs
        }
    assert {n: tags["mlflow.data.context"] for n, (_, tags) in seen["evaluate"].items()} == {
        "synthetic/test": "evaluation",
        "synthetic/ood": "evaluation",
        "synthetic/corpus": "retrieval",
    }
    test, _ = seen["evaluate"]["synthetic/test"]
    assert test.digest == file_digest(tmp_path / "processed" / "test.parquet") and len(test.digest) == 16
    assert json.loads(test.profile) == {"num_rows": 3}
    assert json.loads(test.source) == {"uri": (tmp_path / "processed" / "test.parquet").as_posix()}
    # RL on fresh worlds reads no train questions from a file; SFT's missing train file is left out
    assert set(seen["train"]) == {"synthetic/dev", "synthetic/corpus"} and set(seen["sft"]) == {"synthetic/dev"}


def test_variant_runs_log_their_effective_config(sqlite_store) -> None:
    """train@ppo-0 and train@grpo-1 log the run's merged train section and seed, so MLflow's
    "show diff only" lists the estimator and the seed, and tag the run the replica belongs to
    (agentr1.run: the seeds of one method); the provenance stays the params file's."""
    from mlflow import MlflowClient

    from agentr1.tracking import stage_run

    uri, art = sqlite_store
    cfg = tracking_cfg(uri, art, parent_run=False)
    cfg.runs = {
        "ppo": {"estimator": "gae"},
        "grpo": {"estimator": "grpo"},
        "ppo_no_adv_no_loss_mask": {"estimator": "gae", "advantage_mask": False, "loss_mask": False},
    }
    got = {}
    for variant in ("ppo-0", "grpo-1", "ppo_no_adv_no_loss_mask-0"):
        with stage_run(cfg, "train", run_name=f"train@{variant}", variant=variant) as run:
            pass
        got[variant] = MlflowClient(tracking_uri=uri).get_run(run.run_id).data
    ppo, grpo, ablation = got["ppo-0"], got["grpo-1"], got["ppo_no_adv_no_loss_mask-0"]
    assert ppo.params["train.estimator"] == "gae" and grpo.params["train.estimator"] == "grpo"
    assert ppo.params["seed"] == "0" and grpo.params["seed"] == "1" and grpo.tags["agentr1.seed"] == "1"
    assert ablation.params["train.loss_mask"] == "false" and ablation.params["train.advantage_mask"] == "false"
    diff = {k for k in ppo.params if ppo.params[k] != grpo.params.get(k)}
    assert {"train.estimator", "seed", "train.seed"} <= diff
    assert {k: ppo.tags[k] for k in ("agentr1.variant", "agentr1.run", "agentr1.estimator", "agentr1.masks")} == {
        "agentr1.variant": "ppo-0",
        "agentr1.run": "ppo",
        "agentr1.estimator": "gae",
        "agentr1.masks": "loss+advantage",
    }
    assert grpo.tags["agentr1.run"] == "grpo"
    assert ablation.tags["agentr1.masks"] == "none" and grpo.tags["agentr1.estimator"] == "grpo"
    assert ppo.tags["agentr1.params_hash"] == grpo.tags["agentr1.params_hash"] == cfg.section_hash()


def test_env_uri_overrides_params(sqlite_store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentr1.tracking import resolve_tracking_uri

    uri, art = sqlite_store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert resolve_tracking_uri(tracking_cfg("http://example.invalid", art)) == uri


def test_failed_stage_marks_run_failed(sqlite_store) -> None:
    from mlflow import MlflowClient

    from agentr1.tracking import stage_run

    uri, art = sqlite_store
    with pytest.raises(RuntimeError, match="boom"):
        with stage_run(tracking_cfg(uri, art, parent_run=False), "index") as run:
            raise RuntimeError("boom")
    got = MlflowClient(tracking_uri=uri).get_run(run.run_id)
    assert got.info.status == "FAILED" and "mlflow.parentRunId" not in got.data.tags


def test_traces_sqlite(sqlite_store) -> None:
    check_traces(tracking_cfg(*sqlite_store))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "policy")


def test_registry_and_cli_sqlite(sqlite_store, checkpoint: Path, repo_root: Path, tmp_path: Path, capsys) -> None:
    from agentr1.cli import main

    uri, art = sqlite_store
    check_registry(tracking_cfg(uri, art), checkpoint)

    base = [
        "--params",
        str(repo_root / "params.yaml"),
        "--set",
        f"tracking.uri={uri}",
        "--set",
        f"tracking.artifact_root={art}",
    ]
    png = tmp_path / "cmp.png"
    assert main([*base, "compare", "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert "champion (v3)" in out and "challenger (v3)" in out and "0.8000 [0.7000, 0.9000]" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # several registered models (a profile each: agentr1-policy, agentr1-policy-smol): rows named by model
    side = ["compare", "--model", "agentr1-policy", "agentr1-policy", "--aliases", "champion", "--out", str(png)]
    assert main([*base, *side]) == 0
    assert capsys.readouterr().out.count("agentr1-policy champion (v3)") == 2
    assert main([*base, "compare", "--model", "agentr1-policy", "no-such-model", "--aliases", "champion"]) == 1
    assert "'no-such-model' has no alias 'champion'" in capsys.readouterr().err
    from mlflow import MlflowClient

    from agentr1.tracking.views import champions, show_champion

    store = MlflowClient(tracking_uri=uri)
    text = show_champion(store, "agentr1-policy")
    assert text.startswith("v3 ") and champions(store) == {"agentr1-policy": text}  # what `agentr1 track` lists

    from mlflow import MlflowClient

    champion = MlflowClient(tracking_uri=uri).get_model_version_by_alias("agentr1-policy", "champion")
    assert (
        main([*base, "compare", "--runs", champion.run_id, "--metric", "test/em", "--out", str(tmp_path / "runs.png")])
        == 0
    )
    out = capsys.readouterr().out
    assert "train@run2" in out and "0.8000 [0.7000, 0.9000]" in out and (tmp_path / "runs.png").is_file()

    assert main([*base, "promote", "--dry-run"]) == 0
    words, line = capsys.readouterr().out.strip().splitlines()[-2:]
    assert "already the champion" in words
    assert json.loads(line) | {"reason": ""} == {
        "model": "agentr1-policy",
        "metric": "test/em",
        "decision": "keep",
        "reason": "",
        "challenger": "3",
        "previous_champion": "3",
        "champion": "3",
        "dry_run": True,
    }

    assert main([*base, "promote", "--metric", "test/f1"]) == 1
    assert "test/f1" in capsys.readouterr().err

    check_tampered_model_is_refused(MlflowClient(tracking_uri=uri), "agentr1-policy")


def test_registered_versions_carry_their_provenance(sqlite_store, checkpoint: Path, monkeypatch) -> None:
    """A version names the train@ run that wrote its weights (found by the checkpoint digest that
    run tagged), its digest, variant and headline EM; the cold start never takes challenger;
    each metric is logged once."""
    from mlflow import MlflowClient

    from agentr1.io import tree_digest
    from agentr1.tracking import stage_run
    from agentr1.tracking.registry import register_evaluation

    uri, art = sqlite_store
    cfg = tracking_cfg(uri, art, parent_run=False, registered_model="provenance-policy")
    cfg.runs = {"ppo": {"estimator": "gae"}}
    client = MlflowClient(tracking_uri=uri)
    flat = {
        "test/em": 0.25,
        "test/em_ci_lower": 0.2,
        "test/em_ci_upper": 0.3,
        "ood/em": 0.1,
        "ood/em_ci_lower": 0.05,
        "ood/em_ci_upper": 0.15,
    }
    with stage_run(cfg, "train", run_name="train@ppo", variant="ppo") as train:
        assert train.tag_checkpoint(checkpoint) == tree_digest(checkpoint)
    with stage_run(cfg, "evaluate", run_name="evaluate@ppo", variant="ppo") as ev:
        info = register_evaluation(
            ev, checkpoint, "ppo", "rl", flat, "test:abc", cfg.tracking.registered_model, cfg.tracking.gate_metric
        )
    assert info["train_run_id"] == train.run_id and info["promotion"]["decision"] == "promote"
    mv = client.get_model_version("provenance-policy", info["version"])
    assert mv.tags["agentr1.train_run_id"] == train.run_id and mv.tags["agentr1.variant"] == "ppo"
    assert mv.tags["agentr1.checkpoint_sha256"] == tree_digest(checkpoint)
    assert mv.description.startswith(
        f"ppo: weights from [train@ppo](#/experiments/{train.experiment_id}/runs/{train.run_id}) (run {train.run_id}). "
    )
    assert "test/em 0.250 [0.200, 0.300]" in mv.description
    # which data and which verdict, each on a line of its own
    assert "\n\njudged on test:abc (" in mv.description
    assert "\n\nverdict: promote on test/em (" in mv.description and mv.description.endswith(
        f"champion after it: v{mv.version}"
    )
    assert [m.value for m in client.get_metric_history(ev.run_id, "test/em")] == [0.25]  # once
    assert client.get_logged_model(mv.model_id or mv.source.split("/")[-1]).name == "policy-ppo"

    with stage_run(cfg, "evaluate", run_name="evaluate_baseline@cold_start") as base:
        info = register_evaluation(
            base,
            checkpoint,
            "cold_start",
            "cold_start",
            flat,
            "test:abc",
            cfg.tracking.registered_model,
            cfg.tracking.gate_metric,
        )
    assert "promotion" not in info and info["train_run_id"] is None
    base_mv = client.get_model_version("provenance-policy", info["version"])
    assert base_mv.description.endswith("verdict: a baseline (cold_start): alias 'cold_start', never gated")
    aliases = {
        a: str(client.get_model_version_by_alias("provenance-policy", a).version)
        for a in ("challenger", "champion", "cold_start")
    }
    assert aliases == {"challenger": str(mv.version), "champion": str(mv.version), "cold_start": info["version"]}

    # the same baseline evaluation again (`agentr1 track` after a skipped stage): reused, its
    # description already holds the verdict and is not written again
    written = []
    original = MlflowClient.update_model_version

    def spy(self, *args, **kwargs):
        written.append(kwargs.get("description"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "update_model_version", spy)
    with stage_run(cfg, "evaluate", run_name="evaluate_baseline@cold_start") as again:
        info_again = register_evaluation(
            again, checkpoint, "cold_start", "cold_start", flat, "test:abc", "provenance-policy", "test/em"
        )
    assert info_again["reused"] and info_again["version"] == info["version"]
    assert written == [] and client.get_model_version("provenance-policy", info["version"]).description == (
        base_mv.description
    )


def test_a_version_description_survives_a_train_run_the_store_lost(sqlite_store) -> None:
    """The verdict line is written after the gate; a train@ run the store no longer holds (deleted
    and garbage-collected) leaves the description saying so rather than failing the registration."""
    from mlflow import MlflowClient

    from agentr1.tracking.registry import _run_or_none, describe_version

    client = MlflowClient(tracking_uri=sqlite_store[0])
    assert _run_or_none(client, None) is None
    assert _run_or_none(client, "0123456789abcdef0123456789abcdef") is None
    text = describe_version("ppo", {"test/em": 0.5}, None, "test:abc", "keep on test/em")
    assert text.startswith("ppo: weights from no tracked train@ run. test/em 0.500 [nan, nan]")
    assert text.endswith(
        "\n\njudged on test:abc (the questions' ids; the evaluate run's dataset inputs name the files)"
        "\n\nverdict: keep on test/em"
    )


def test_foreach_stage_finds_its_lock_entry_by_run_name(tmp_path: Path) -> None:
    from agentr1.tracking.mlflow_adapter import run_tags

    src = tmp_path / "sft.py"
    src.write_text("x = 1\n")
    lock = write_lock(tmp_path / "dvc.lock", src)
    cfg = tracking_cfg("sqlite:///unused.db", tmp_path / "art")
    tags = run_tags(cfg, "train", "sft", lock)  # stage "train", lock key = run name (like train@ppo)
    assert tags["dvc.dep.data/processed"] == "upstream123.dir" and tags["agentr1.dvc.locked"] == "true"
    assert run_tags(cfg, "train", "train@none", lock)["agentr1.dvc.locked"] == "false"


def test_the_rl_view_shows_the_train_runs_coloured_by_method(tmp_path: Path) -> None:
    """The experiment carries the RL comparison as an MLflow shared view (its search filter finds
    the train runs and nothing else, every one shown), links it from its description, and the
    seeds of one named run share a colour that other runs do not."""
    from mlflow import MlflowClient

    from agentr1.tracking import views
    from agentr1.tracking.mlflow_adapter import ensure_experiment, run_tags, variant_tags

    src = tmp_path / "sft.py"
    src.write_text("x = 1\n")
    lock = write_lock(tmp_path / "dvc.lock", src)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = tracking_cfg(uri, tmp_path / "art")
    client = MlflowClient(tracking_uri=uri)
    exp_id = ensure_experiment(client, "views-nano", (tmp_path / "art").as_uri(), "nano")
    exp = client.get_experiment(exp_id)
    state = json.loads(exp.tags["mlflow.sharedViewState.rl"])
    assert views.rl_view_path(exp_id) in exp.tags["mlflow.note.content"]
    assert state["runsHiddenMode"] == "SHOW_ALL" and state["orderByKey"] == "tags.`mlflow.runName`"
    runs = {}
    for stage, name in [("train", "train@grpo-0"), ("train", "train@grpo-1"), ("train", "train@ppo-0"),
                        ("evaluate", "evaluate@grpo-0"), ("evaluate_baseline", "evaluate_baseline@naive_rag"),
                        ("sft", "sft")]:  # fmt: skip
        tags = run_tags(cfg, stage, name, lock)
        variant = name.partition("@")[2]
        if stage in ("train", "evaluate"):  # what stage_run adds for a run of params `runs`
            tags |= variant_tags(cfg.for_run(variant), variant)
        runs[name] = tags
        client.create_run(exp_id, tags=tags, run_name=name)
    found = client.search_runs([exp_id], filter_string=state["searchFilter"])
    assert sorted(r.info.run_name for r in found) == ["train@grpo-0", "train@grpo-1", "train@ppo-0"]
    assert [runs[n].get("agentr1.run") for n in runs] == ["grpo", "grpo", "ppo", "grpo", None, None]
    color = {n: t.get("mlflow.runColor") for n, t in runs.items()}
    assert color["train@grpo-0"] == color["train@grpo-1"] == color["evaluate@grpo-0"] != color["train@ppo-0"]
    assert len({views.run_color(list(cfg.runs), r) for r in cfg.runs}) == len(cfg.runs)  # one colour per named run
    assert color["sft"] is None and color["evaluate_baseline@naive_rag"] is None
    # a store that holds an older view gets today's; the description a user may have edited stays
    client.set_experiment_tag(exp_id, "mlflow.sharedViewState.rl", "{}")
    client.set_experiment_tag(exp_id, "mlflow.note.content", "mine")
    ensure_experiment(client, "views-nano", None, "nano")
    exp = client.get_experiment(exp_id)
    assert json.loads(exp.tags["mlflow.sharedViewState.rl"]) == state and exp.tags["mlflow.note.content"] == "mine"


def test_compare_draws_no_bar_for_a_missing_metric() -> None:
    """A run without the metric gets no bar (and the words "no <metric>"), not a bar at 0."""
    import matplotlib.pyplot as plt

    from agentr1.tracking.compare import figure

    rows = [
        {"label": "a", "metrics": {"test/em": 0.4, "test/em_ci_lower": 0.3, "test/em_ci_upper": 0.5}},
        {"label": "b", "metrics": {"ood/em": 0.1}},
        {"label": "c", "metrics": {"test/em": 0.0}},
    ]
    fig = figure(rows, "test/em")
    ax = fig.axes[0]
    bars = {round(p.get_x() + p.get_width() / 2): p.get_height() for p in ax.patches}
    assert bars == {0: 0.4, 2: 0.0}  # a measured 0 is a bar; the missing one is none
    assert [t.get_text() for t in ax.texts] == ["no test/em"] and ax.texts[0].get_position()[0] == 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    plt.close(fig)


def test_no_alias_errors_say_how_to_get_a_registered_policy(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from agentr1.tracking.compare import rows_for_aliases
    from agentr1.tracking.registry import promote

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for call in (
        lambda: promote("agentr1-policy", client=client),
        lambda: rows_for_aliases(client, "agentr1-policy", ["champion"]),
    ):
        with pytest.raises(
            StageError, match=r"run `agentr1 track` in the project root .* or `dvc repro` the evaluate@<run> stages"
        ):
            call()


def test_the_champion_trace_is_found_through_the_client_not_the_global_uri(
    sqlite_store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agentr1 track` with nothing to log never sets MLflow's global tracking URI: the champion's
    episode must be looked up through the store's client, else MLflow's default store (a new
    ./mlflow.db) is searched and created in the working directory, and no link is printed."""
    import mlflow
    from mlflow import MlflowClient

    from agentr1.tracking.views import policy_trace

    uri, art = sqlite_store
    mlflow.set_tracking_uri(uri)
    # the traces' artifacts under the test's folder (a store's default is ./mlruns in the working directory)
    exp_id = mlflow.create_experiment("trace-lookup", artifact_location=(art / "trace-lookup").as_uri())
    mlflow.set_experiment(experiment_id=exp_id)
    for em in ("0.0", "1.0"):
        with mlflow.start_span(name="episode ppo-0"):
            mlflow.update_current_trace(tags={"agentr1.policy": "ppo-0", "agentr1.em": em})
    mlflow.flush_trace_async_logging()
    right = MlflowClient(uri).search_traces(locations=[exp_id], filter_string="tags.`agentr1.em` = '1.0'")[0]
    mlflow.set_tracking_uri(None)  # as in a fresh `agentr1 track` process: no global URI
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert policy_trace(MlflowClient(uri), exp_id, "ppo-0") == right.info.trace_id  # the right answer first
    assert policy_trace(MlflowClient(uri), exp_id, "grpo-0") is None
    assert not (tmp_path / "mlflow.db").exists()
