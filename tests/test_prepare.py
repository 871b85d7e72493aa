"""Stage ``prepare``: files, manifest, byte-identical re-runs, atomic failure, both sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentr1 import cli, stages
from agentr1.config import SPLITS, config_from_dict
from agentr1.data import synthetic
from agentr1.data.schema import Dataset, read_dataset
from agentr1.errors import StageError
from agentr1.stages import prepare

SMALL = {
    "families": {"train": 20, "dev": 5, "test": 5, "ood": 5},
    "questions": {"train": 80, "dev": 20, "test": 20, "ood": 20},
}
FILES = sorted([f"{s}.parquet" for s in SPLITS] + ["corpus.parquet", "manifest.json"])


def make_cfg(out: Path, **data):
    return config_from_dict({"seed": 3, "data": {"processed_dir": str(out), "synthetic": SMALL, **data}})


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_prepare_writes_dataset_and_manifest(tmp_path):
    out = tmp_path / "processed"
    cfg = make_cfg(out)
    assert stages.run("prepare", cfg, None) == out
    assert sorted(p.name for p in out.iterdir()) == FILES
    ds = read_dataset(out)
    expected = synthetic.generate_world(cfg.data.synthetic, cfg.seed)
    assert ds.questions == expected.questions and ds.corpus == expected.corpus
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == "synthetic" and manifest["corpus_size"] == len(ds.corpus)
    assert manifest["files"] == FILES
    for split in SPLITS:
        info = manifest["splits"][split]
        assert info["questions"] == SMALL["questions"][split]
        assert sum(info["by_type"].values()) == sum(info["by_hops"].values()) == info["questions"]
    assert manifest["splits"]["ood"]["by_type"] == {"chain": 20}
    assert set(manifest["splits"]["ood"]["by_hops"]) == {"3", "4"}
    assert sum(manifest["entities"]["dev"].values()) > 0


def test_rerun_is_byte_identical(tmp_path):
    out = tmp_path / "processed"
    cfg = make_cfg(out)
    stages.run("prepare", cfg, None)
    first = snapshot(out)
    stages.run("prepare", cfg, None)
    assert snapshot(out) == first
    stages.run("prepare", make_cfg(out, synthetic={**SMALL, "distractor_sentences": 1}), None)
    assert snapshot(out)["corpus.parquet"] != first["corpus.parquet"]
    assert leftovers(tmp_path) == []


def _boom(*_args, **_kwargs):
    raise RuntimeError("boom")


def _half_write(ds, out_dir):
    (Path(out_dir) / "train.parquet").write_bytes(b"partial")
    raise RuntimeError("disk full")


@pytest.mark.parametrize("target, fake", [(synthetic, "generate"), (prepare, "write_dataset")])
def test_failure_keeps_old_output_and_leaves_no_temp(tmp_path, monkeypatch, target, fake):
    out = tmp_path / "processed"
    cfg = make_cfg(out)
    stages.run("prepare", cfg, None)
    before = snapshot(out)
    monkeypatch.setattr(target, fake, _boom if fake == "generate" else _half_write)
    with pytest.raises(RuntimeError):
        stages.run("prepare", cfg, None)
    assert snapshot(out) == before
    assert leftovers(tmp_path) == []


def test_failure_without_previous_output_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "write_dataset", _half_write)
    with pytest.raises(RuntimeError):
        stages.run("prepare", make_cfg(tmp_path / "processed"), None)
    assert list(tmp_path.iterdir()) == []


def test_too_small_world_is_a_stage_error(tmp_path):
    cfg = make_cfg(tmp_path / "processed", synthetic={**SMALL, "questions": {**SMALL["questions"], "ood": 5000}})
    with pytest.raises(StageError, match=r"data\.synthetic\.questions\.ood"):
        stages.run("prepare", cfg, None)
    assert list(tmp_path.iterdir()) == []


def test_real_source_goes_through_load_real(tmp_path, monkeypatch):
    import agentr1.data.multihop as multihop

    calls = []
    row = {
        "id": "hp-1",
        "question": "Q?",
        "answers": ["A"],
        "type": "bridge",
        "hops": 2,
        "supporting_ids": ["d1", "d2"],
        "source": "hotpotqa",
        "split": "dev",
    }

    records = {
        "sources": [
            {
                "source": "data.real.sources[0]",
                "dataset": "hotpotqa",
                "location": "missing.json",
                "split": "auto",
                "questions": 1,
                "skipped": {"why": 2},
                "without_gold": 0,
                "passages": 2,
                "passages_already_in_corpus": 0,
            }
        ]
    }

    def fake_load(real_cfg, seed):
        calls.append((len(real_cfg.sources), seed))
        return Dataset(
            questions={"dev": [row]},
            corpus=[{"id": "d1", "title": "T1", "text": "x"}, {"id": "d2", "title": "T2", "text": "A"}],
        ), records

    monkeypatch.setattr(multihop, "load_real", fake_load)
    out = tmp_path / "processed"
    cfg = make_cfg(out, source="real", real={"sources": [{"dataset": "hotpotqa", "path": "missing.json"}]})
    stages.run("prepare", cfg, None)
    assert calls == [(1, 3)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == "real" and manifest["corpus_size"] == 2
    assert manifest["records"] == records  # what the loaders skipped, per source and reason
    assert manifest["splits"]["dev"] == {"questions": 1, "by_type": {"bridge": 1}, "by_hops": {"2": 1}}
    assert read_dataset(out).questions["dev"] == [row]
    assert read_dataset(out).questions["train"] == []


def test_cli_prepare(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    out = tmp_path / "processed"
    params.write_text(yaml.safe_dump({"seed": 1, "data": {"processed_dir": str(out), "synthetic": SMALL}}))
    assert cli.main(["--params", str(params), "prepare"]) == 0
    assert sorted(p.name for p in out.iterdir()) == FILES
    bad = ["--params", str(params), "--set", "data.synthetic.questions.dev=9999", "prepare"]
    assert cli.main(bad) == 1
    assert "data.synthetic.families.dev" in capsys.readouterr().err
