"""``agentr1 track`` without a pipeline run: the repository's ``dvc.lock`` resolves to stages in
dependency order, unknown and stale entries stop it before anything is written (naming the
entry, path or key and the fix), params compare as DVC recorded them, curves replay from their
CSVs, and an evaluation's episodes are read in the order they were played. The end-to-end
fresh-clone test is ``tests/test_track_pipeline.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentr1.config import Config, load_config
from agentr1.errors import StageError
from agentr1.stages import track
from agentr1.tracking.logger import InMemoryLogger
from agentr1.tracking.run import StageRun


def test_every_stage_of_the_repository_lock_resolves_in_dependency_order(repo_root: Path) -> None:
    """Each entry of the committed dvc.lock maps to a stage module with log_outputs (a new DVC
    stage whose SPEC lacks its dvc.lock key fails here), upstream stages first."""
    entries = track.lock_entries(repo_root / "dvc.lock")
    keys = [e.key for e in entries]
    lock = yaml.safe_load((repo_root / "dvc.lock").read_text())["stages"]
    assert sorted(keys) == sorted(lock)
    pos = {k: i for i, k in enumerate(keys)}
    for e in entries:  # every stage after the stages whose outputs it reads
        for other in entries:
            if any(track._overlap(d, o) for d in e.deps for o in other.outs) and other is not e:
                assert pos[other.key] < pos[e.key], (other.key, e.key)
    replicas = load_config(repo_root / "params.yaml").replicas()  # every run x seed: train@ppo-0, ...
    assert len(replicas) >= 3 * 8
    for name in replicas:
        assert pos[f"train@{name}"] < pos[f"evaluate@{name}"] < pos["report"]
        e = entries[pos[f"evaluate@{name}"]]
        assert e.stage == "evaluate" and e.args.policy == name
    assert entries[pos["evaluate_baseline@cold_start"]].args.policy == "cold_start"
    assert entries[pos["train@ppo-1"]].args.run == "ppo-1" and entries[pos["train@ppo-1"]].stage == "train"


def _lock(path: Path, stages: dict) -> Path:
    path.write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}, sort_keys=False))
    return path


def test_a_users_own_stage_is_skipped(tmp_path: Path) -> None:
    """A stage that does not run agentr1 has no run to log: skipped with the reason, the
    agentr1 stages around it resolved as usual."""
    lock = _lock(
        tmp_path / "dvc.lock",
        {
            "flaky": {"cmd": "python flaky.py", "outs": [{"path": "flaky.out", "md5": "0" * 32}]},
            "report": {"cmd": "agentr1 report"},
        },
    )
    flaky, report = track.lock_entries(lock)
    assert (flaky.key, flaky.state) == (
        "flaky",
        "skipped",
    ) and "not an agentr1 stage (cmd `python flaky.py`)" in flaky.note
    assert (report.key, report.stage, report.state) == ("report", "report", "")


def test_an_unknown_stage_names_the_entry_to_add(tmp_path: Path) -> None:
    lock = _lock(
        tmp_path / "dvc.lock",
        {"distill": {"cmd": "agentr1 distill"}, "report": {"cmd": "agentr1 report"}, "train": {"cmd": "agentr1 train"}},
    )
    with pytest.raises(StageError) as err:
        track.lock_entries(lock)
    text = str(err.value)
    assert "dvc.lock stage 'distill' has no entry in agentr1.stages.track.LOCK_KINDS" in text
    assert "to the lock of the SPEC of its stage module" in text
    assert "log_outputs(ctx, args, replay)" in text and "docs/EXTENDING.md" in text
    assert "'train': LOCK_KINDS['train'] expects a foreach key train@<name>" in text  # train without @<run>
    with pytest.raises(StageError, match="no .*dvc.lock here: run `agentr1 track` in the project root"):
        track.lock_entries(tmp_path / "nowhere" / "dvc.lock")


@pytest.mark.parametrize(
    ("locked", "now", "same"),
    [
        (0.0001, "1e-4", True),  # YAML 1.1 reads 1e-4 as a string, DVC's YAML 1.2 as a float
        (0.0001, 0.0001, True),
        (1, 1.0, True),
        ({"a": [1, "x"], "b": None}, {"a": [1, "x"], "b": None}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ([1, 2], [1, 2, 3], False),
        (True, 1, False),
        (None, 0, False),
        (None, None, True),
        ("gae", "grpo", False),
        (0.001, 0.002, False),
    ],
)
def test_params_compare_as_dvc_recorded_them(locked, now, same: bool) -> None:
    assert track.same_value(locked, now) is same


def _store_cfg(tmp_path: Path) -> Config:
    cfg = Config()
    cfg.tracking.uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    cfg.tracking.artifact_root = str(tmp_path / "store" / "artifacts")
    return cfg


def _md5(path: Path) -> str:
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()


def test_stale_entries_stop_track_before_anything_is_written(tmp_path: Path, monkeypatch) -> None:
    """An output that no longer hashes as locked, or a param that changed since the lock, stops
    `agentr1 track` naming the stage, the path or key and the fix; the store gets no run."""
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "params.yaml").write_text("seed: 0\ndata: {processed_dir: data/processed}\n")
    out = tmp_path / "data" / "processed"
    out.mkdir(parents=True)
    (out / "manifest.json").write_text("{}\n")
    from agentr1.tracking.provenance import dvc_hash

    good = {
        "cmd": "agentr1 prepare",
        "params": {"params.yaml": {"seed": 0}},
        "outs": [{"path": "data/processed", "hash": "md5", "md5": dvc_hash(out)}],
    }
    cfg = _store_cfg(tmp_path)

    _lock(tmp_path / "dvc.lock", {"prepare": {**good, "outs": [{"path": "data/processed", "md5": "0" * 32 + ".dir"}]}})
    with pytest.raises(
        StageError,
        match=r"nothing logged: prepare: data/processed differ from what dvc.lock records: "
        r"`dvc repro` \(or `dvc checkout prepare`",
    ):
        track.track(cfg, "dvc.lock")

    _lock(tmp_path / "dvc.lock", {"prepare": {**good, "params": {"params.yaml": {"seed": 1}}}})
    with pytest.raises(
        StageError,
        match=r"prepare: param seed in params.yaml \(0\) differs from the value dvc.lock "
        r"records for this stage \(1\): `dvc repro` first",
    ):
        track.track(cfg, "dvc.lock")
    _lock(tmp_path / "dvc.lock", {"prepare": {**good, "params": {"params.yaml": {"data.gone": 1}}}})
    with pytest.raises(StageError, match=r"param data.gone in params.yaml \(missing\)"):
        track.track(cfg, "dvc.lock")

    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    assert client.get_experiment_by_name("agentr1-nano") is None  # nothing written, not even the experiment

    # the dry run of a consistent lock plans without writing: no experiment, no run
    _lock(
        tmp_path / "dvc.lock",
        {
            "prepare": good,
            "report": {
                "cmd": "agentr1 report",
                "deps": [{"path": "data/eval"}],
                "outs": [{"path": "reports/table3.md", "md5": "1" * 32}],
            },
        },
    )
    entries = track.track(cfg, "dvc.lock", dry_run=True)
    assert [(e.key, e.state) for e in entries] == [("prepare", "log"), ("report", "skipped")]
    assert "reports/table3.md, data/eval missing: `dvc pull`" in entries[1].note
    assert client.get_experiment_by_name("agentr1-nano") is None


def test_the_cli_refuses_params_dvc_lock_did_not_record(tmp_path: Path, monkeypatch, capsys) -> None:
    from agentr1.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("seed: 0\n")
    (tmp_path / "other.yaml").write_text("seed: 0\n")
    _lock(tmp_path / "dvc.lock", {"prepare": {"cmd": "agentr1 prepare", "params": {"params.yaml": {"seed": 0}}}})
    assert main(["--set", "seed=1", "track"]) == 1
    assert "run it without --set" in capsys.readouterr().err
    assert main(["--params", "other.yaml", "track"]) == 1
    assert (
        "dvc.lock records params from params.yaml, not other.yaml: pass --params params.yaml" in capsys.readouterr().err
    )


def test_log_curve_replays_a_csv_as_step_metrics(tmp_path: Path) -> None:
    """Empty cells (a value not measured at that step) are left out; each column becomes its
    metric at the row's step."""
    csv_path = tmp_path / "curve.csv"
    csv_path.write_text("step,reward,dev_em,other\n0,,0.25,9\n1,0.5,,9\n2,0.75,0.5,9\n")
    run = StageRun(Config(), "train", logger=InMemoryLogger())
    assert run.log_curve(csv_path, {"reward": "rollout/reward", "dev_em": "dev/em"}) == 3
    assert run.logger.history == {"dev/em": [(0, 0.25), (2, 0.5)], "rollout/reward": [(1, 0.5), (2, 0.75)]}


def test_episode_rows_are_read_in_the_order_they_were_played(tmp_path: Path) -> None:
    """episodes.jsonl is sorted by split and id; the trace sample needs the evaluation's order
    (the processed split's, first evaluate.max_examples), and a file with other questions is refused."""
    import tiny_world as tw
    from agentr1.data.schema import Dataset, write_dataset
    from agentr1.eval.episodes import episodes_of

    questions = {"test": tw.questions("test"), "ood": tw.questions("ood")}
    write_dataset(Dataset(questions=questions, corpus=tw.corpus()), tmp_path / "processed")
    cfg = Config()
    cfg.data.processed_dir = str(tmp_path / "processed")
    cfg.evaluate.max_examples = 3
    picked = {s: [q["id"] for q in qs[:3]] for s, qs in questions.items()}
    rows = [{"split": s, "id": i, "em": 0.0} for s in picked for i in picked[s]]
    out = tmp_path / "eval"
    out.mkdir()
    (out / "episodes.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: (r["split"], r["id"])))
    )
    got = episodes_of(cfg, out)
    assert {s: [r["id"] for r in rs] for s, rs in got.items()} == picked
    cfg.evaluate.max_examples = 4
    with pytest.raises(StageError, match="holds other questions than evaluate.splits/max_examples pick"):
        episodes_of(cfg, out)
