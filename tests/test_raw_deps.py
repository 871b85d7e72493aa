"""Issue 48 item 8: DVC's ``prepare`` watches the real-data files (``data/raw/``), so a changed raw
file makes ``dvc status`` report the stage changed instead of "up to date" with stale data."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import yaml

from _tiny_project import sh
from agentr1.config import config_from_dict
from agentr1.stages.prepare import RAW_DIR, unwatched_inputs

ROOT = Path(__file__).resolve().parents[1]


def _changed(root: Path) -> dict:
    return json.loads(sh(["dvc", "status", "--json", "prepare"], root).stdout or "{}")


def test_a_changed_raw_file_makes_prepare_stale(tmp_path):
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["prepare"]
    assert str(RAW_DIR) in spec["deps"] and (ROOT / RAW_DIR / "README.md").is_file()  # a fresh clone has the folder
    # the project's prepare stage, its dependency on data/raw kept and its command a copy of the raw files
    copy = (
        f"{sys.executable} -c \"import pathlib, shutil; shutil.rmtree('data/processed', ignore_errors=True); "
        "shutil.copytree('data/raw', 'data/processed')\""
    )
    root = tmp_path / "project"
    root.mkdir()
    (root / "dvc.yaml").write_text(
        yaml.safe_dump(
            {
                "stages": {
                    "prepare": {
                        "cmd": copy,
                        "deps": [d for d in spec["deps"] if d == str(RAW_DIR)],
                        "outs": spec["outs"],
                    }
                }
            }
        )
    )
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text('{"id": "q1"}\n')
    (root / "data/raw").mkdir(parents=True)
    (root / "data/raw/README.md").write_text("raw files\n")
    (root / "data/raw/hotpotqa_dev.jsonl").write_text('{"id": "q1", "question": "Who?"}\n')
    (root / "data/raw/linked.jsonl").symlink_to(outside)
    for cmd in (
        ["git", "init", "-q"],
        ["dvc", "init", "-q"],
        ["dvc", "config", "core.analytics", "false"],
        ["dvc", "repro", "-q", "prepare"],
    ):
        sh(cmd, root)
    assert _changed(root) == {}
    (root / "data/raw/hotpotqa_dev.jsonl").write_text('{"id": "q1", "question": "Who else?"}\n')
    assert "prepare" in _changed(root)  # the old dvc.yaml said "up to date" here
    sh(["dvc", "repro", "-q", "prepare"], root)
    assert _changed(root) == {}
    outside.write_text('{"id": "q2"}\n')  # a symlinked file's target: DVC hashes what the link points at
    assert "prepare" in _changed(root)


def test_prepare_warns_about_real_files_dvc_does_not_watch(tmp_path, caplog):
    real = {
        "sources": [
            {"dataset": "hotpotqa", "path": "data/raw/a.jsonl"},
            {"dataset": "musique", "path": str(tmp_path / "b.jsonl"), "split": "ood"},
        ],
        "corpus": "../corpus.jsonl",
    }
    cfg = config_from_dict({"data": {"source": "real", "real": real, "processed_dir": str(tmp_path / "processed")}})
    assert unwatched_inputs(cfg.data.real, ROOT) == [
        f"data.real.sources[1].path: {tmp_path / 'b.jsonl'}",
        "data.real.corpus: ../corpus.jsonl",
    ]
    from agentr1 import stages

    with caplog.at_level(logging.WARNING, logger="agentr1.stages.prepare"):
        try:
            stages.run("prepare", cfg, None)
        except Exception:  # noqa: BLE001 - the files do not exist; the warnings come first
            pass
    text = caplog.text
    assert "data.real.sources[1].path" in text and "data.real.corpus" in text and "data.real.sources[0]" not in text
    assert "move it, or a symlink to it, under data/raw/" in text
