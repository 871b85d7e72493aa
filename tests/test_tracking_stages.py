"""MLflow runs of the early stages (prepare -> validate -> index) on the tiny synthetic project.

Each stage execution is one MLflow run (tag ``agentr1.stage``) under the pipeline's parent run,
with flat params, the git sha and the numbers of the JSON reports the stage wrote as metrics; a
failing stage leaves a FAILED run and no half-written output; ``tracking.enabled: false`` creates
no run, does not import mlflow, and writes byte-identical outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _tiny_project import TINY_PARAMS, deep_merge, make_project, sh
from agentr1.config import SPLITS, load_config
from agentr1.errors import StageError

STAGES = ("prepare", "validate", "index")
OUTPUTS = (
    "data/processed",
    "data/validation/summary.json",
    "data/validation/passed.json",
    "data/validation/gx_result.json",
    "data/retrieval/report.json",
    "data/index",
)


def run_stages(cfg, names=STAGES) -> None:
    from agentr1 import stages

    for stage in names:
        stages.run(stage, cfg, None)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under the stage outputs (relative path -> bytes)."""
    out = {}
    for rel in OUTPUTS:
        path = root / rel
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        out.update({str(f.relative_to(root)): f.read_bytes() for f in files})
    return out


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("stage_mlflow")
    return f"sqlite:///{root / 'mlflow.db'}", root / "artifacts"


def project_params(store: tuple[str, Path], **tracking) -> dict:
    uri, art = store
    return deep_merge(TINY_PARAMS, {"tracking": {"uri": uri, "artifact_root": str(art), **tracking}})


@pytest.fixture(scope="module")
def pipeline(store, tmp_path_factory: pytest.TempPathFactory):
    """prepare -> validate -> index, tracked, run in the root of a tiny git + DVC project.
    Returns ``(project root, {stage: MLflow run})``."""
    from mlflow import MlflowClient

    uri, _ = store
    root = make_project(tmp_path_factory.mktemp("tracked") / "proj", params=project_params(store))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.delenv("AGENTR1_PIPELINE_ID", raising=False)  # the natural grouping: commit + params
        mp.chdir(root)
        cfg = load_config("params.yaml")
        run_stages(cfg)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(f"agentr1-{cfg.profile}")
    sha = sh(["git", "rev-parse", "HEAD"], root).stdout.strip()
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`agentr1.git_sha` = '{sha}'")
    return root, sha, client, runs


def stage_runs(runs) -> dict:
    return {r.data.tags["agentr1.stage"]: r for r in runs if r.data.tags.get("agentr1.role") == "stage"}


def test_one_run_per_stage_grouped_under_the_pipeline(pipeline) -> None:
    root, sha, client, runs = pipeline
    stage = [r for r in runs if r.data.tags.get("agentr1.role") == "stage"]
    assert sorted(r.data.tags["agentr1.stage"] for r in stage) == sorted(STAGES)  # one run each
    by_stage = stage_runs(runs)
    assert {r.info.run_name for r in stage} == set(STAGES)
    assert all(r.info.status == "FINISHED" for r in stage)
    pids = {r.data.tags["agentr1.pipeline_id"] for r in stage}
    parents = {r.data.tags["mlflow.parentRunId"] for r in stage}
    assert len(pids) == 1 and len(parents) == 1
    parent = client.get_run(parents.pop())
    assert parent.data.tags["agentr1.role"] == "pipeline" and parent.data.tags["agentr1.pipeline_id"] == pids.pop()
    for r in stage:
        tags, params = r.data.tags, r.data.params
        assert tags["agentr1.git_sha"] == sha and tags["mlflow.source.git.commit"] == sha
        assert tags["agentr1.profile"] == "nano" and tags["agentr1.seed"] == "0"
        # the whole config, flat (dotted keys, scalar values)
        assert params["data.synthetic.questions.train"] == "40" and params["data.synthetic.families.dev"] == "3"
        assert params["retrieval.report.ks"] == json.dumps(TINY_PARAMS["retrieval"]["report"]["ks"])
        assert params["seed"] == "0" and params["tracking.enabled"] == "true"
        assert not any(k in params for k in ("data", "data.synthetic", "retrieval"))
    assert (
        by_stage["prepare"].info.start_time <= by_stage["validate"].info.start_time <= by_stage["index"].info.start_time
    )


def test_metrics_match_the_reports(pipeline) -> None:
    root, _, client, runs = pipeline
    by_stage = stage_runs(runs)

    manifest = read_json(root / "data/processed/manifest.json")
    m = by_stage["prepare"].data.metrics
    for split in SPLITS:
        assert (
            m[f"prepare/{split}.questions"]
            == manifest["splits"][split]["questions"]
            == TINY_PARAMS["data"]["synthetic"]["questions"][split]
        )
    assert m["prepare/questions"] == sum(manifest["splits"][s]["questions"] for s in SPLITS)
    assert m["prepare/corpus_size"] == manifest["corpus_size"] > 0
    assert m["prepare/build_s"] >= 0 and m["prepare/total_s"] >= m["prepare/build_s"]

    summary = read_json(root / "data/validation/summary.json")
    m = by_stage["validate"].data.metrics
    assert m["validate/expectations"] == summary["n_expectations"] > 0
    assert m["validate/passed"] == summary["n_expectations"] - summary["n_failed"] == m["validate/expectations"]
    assert m["validate/failed"] == 0 and m["validate/success"] == 1.0
    for key, n in summary["rows"].items():
        assert m[f"validate/rows.{key}"] == n
    assert (
        m["validate/unexpected.questions.id_unique"]
        == summary["expectations"]["questions.id_unique"]["unexpected_count"]
    )

    report = read_json(root / "data/retrieval/report.json")
    timing = read_json(root / "data/retrieval/timing.json")
    m = by_stage["index"].data.metrics
    assert m["index/passages"] == report["passages"] and m["index/index_bytes"] == report["index_bytes"]
    assert set(report["splits"]) == set(SPLITS)
    for split, entry in report["splits"].items():
        assert m[f"index/{split}.questions"] == entry["questions"]
        for k in report["ks"]:
            assert m[f"index/{split}.recall_at_{k}"] == entry[f"recall@{k}"]
            assert m[f"index/{split}.all_supporting_at_{k}"] == entry[f"all_supporting@{k}"]
    assert m["index/build_s"] == timing["build_s"] and m["index/queries"] == timing["queries"]
    assert m["index/queries_per_s"] == timing["queries_per_s"]


def test_reports_logged_as_artifacts(pipeline, store) -> None:
    import mlflow

    root, _, _, runs = pipeline
    by_stage = stage_runs(runs)
    expected = {
        "prepare": {"prepare/manifest.json": "data/processed/manifest.json"},
        "validate": {
            "validate/summary.json": "data/validation/summary.json",
            "validate/gx_result.json": "data/validation/gx_result.json",
        },
        "index": {"index/report.json": "data/retrieval/report.json", "index/timing.json": "data/retrieval/timing.json"},
    }
    for stage, files in expected.items():
        run_id = by_stage[stage].info.run_id
        for artifact, local in files.items():
            got = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact, tracking_uri=store[0])
            assert Path(got).read_bytes() == (root / local).read_bytes(), artifact


def test_tracking_disabled_creates_no_run_and_same_outputs(pipeline, store, tmp_path: Path, monkeypatch) -> None:
    """Same project with ``tracking.enabled: false``: no MLflow run, no mlflow import in the
    CLI, and byte-identical data outputs (tracking never changes what a stage writes)."""
    tracked_root, _, client, _ = pipeline
    uri, _ = store
    exp_ids = [e.experiment_id for e in client.search_experiments()]
    n_runs = len(client.search_runs(exp_ids, max_results=1000))

    root = make_project(tmp_path / "proj", params=project_params(store, enabled=False))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    code = (
        "import sys; from agentr1.cli import main; rc = main(['prepare']); "
        "assert rc == 0, rc; assert 'mlflow' not in sys.modules, 'prepare imported mlflow'"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MLFLOW_TRACKING_URI": uri},
    )
    assert res.returncode == 0, res.stderr
    monkeypatch.chdir(root)
    cfg = load_config("params.yaml")
    assert cfg.tracking.enabled is False
    run_stages(cfg, ("validate", "index"))

    assert len(client.search_runs(exp_ids, max_results=1000)) == n_runs
    assert [e.experiment_id for e in client.search_experiments()] == exp_ids
    tracked, untracked = snapshot(tracked_root), snapshot(root)
    assert sorted(tracked) == sorted(untracked) and len(tracked) > 5
    assert tracked == untracked


def test_failing_stages_leave_failed_runs(store, tmp_path: Path, monkeypatch) -> None:
    """validate on corrupted data, index on unvalidated data and a prepare that dies mid-write
    each end their run FAILED; prepare's previous output stays as it was."""
    from mlflow import MlflowClient

    from agentr1.data.schema import read_dataset, write_dataset
    from agentr1.stages import prepare

    uri, _ = store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("AGENTR1_PIPELINE_ID", "failing-stages")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(project_params(store)))
    monkeypatch.chdir(tmp_path)
    cfg = load_config("params.yaml")
    run_stages(cfg, ("prepare",))

    processed = Path(cfg.data.processed_dir)
    ds = read_dataset(processed)
    ds.questions["dev"].append(dict(ds.questions["train"][0], split="dev"))  # an id in two splits
    write_dataset(ds, processed)
    with pytest.raises(StageError, match="splits_disjoint_ids"):
        run_stages(cfg, ("validate",))
    assert not (Path(cfg.validate_.report_dir) / "passed.json").exists()
    with pytest.raises(StageError, match="validate"):
        run_stages(cfg, ("index",))
    assert not Path(cfg.retrieval.index_dir).exists()

    corrupted = {p.name: p.read_bytes() for p in processed.iterdir()}

    def half_write(ds, out_dir):
        (Path(out_dir) / "train.parquet").write_bytes(b"partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(prepare, "write_dataset", half_write)
    with pytest.raises(RuntimeError, match="disk full"):
        run_stages(cfg, ("prepare",))
    assert {p.name: p.read_bytes() for p in processed.iterdir()} == corrupted
    assert sorted(p.name for p in processed.parent.iterdir() if p.name.startswith(".")) == []

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(f"agentr1-{cfg.profile}")
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string="tags.`agentr1.pipeline_id` = 'failing-stages' and tags.`agentr1.role` = 'stage'",
        order_by=["attributes.start_time ASC"],
    )
    assert [(r.data.tags["agentr1.stage"], r.info.status) for r in runs] == [
        ("prepare", "FINISHED"),
        ("validate", "FAILED"),
        ("index", "FAILED"),
        ("prepare", "FAILED"),
    ]
    failed = runs[1].data.metrics  # logged before the verdict: which expectations failed
    assert failed["validate/success"] == 0.0 and failed["validate/failed"] >= 1
    assert failed["validate/unexpected.questions.splits_disjoint_ids"] == 2
    assert failed["validate/passed"] == failed["validate/expectations"] - failed["validate/failed"]


def test_stage_modules_do_not_import_mlflow() -> None:
    for code in (
        "import agentr1.data.prepare, agentr1.stages.prepare, sys; assert 'mlflow' not in sys.modules",
        "import agentr1.data.validation, agentr1.stages.validate, agentr1.stages.index, sys; "
        "assert 'mlflow' not in sys.modules",
    ):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
