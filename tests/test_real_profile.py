"""The ``real`` profile end to end on the real-format samples of ``../shared/fixtures`` (issue 40):
prepare -> validate -> index -> pretrain -> sft -> train@grpo -> evaluate@grpo, in one process, with
``profiles/real.yaml`` merged onto ``params.yaml`` and only the budgets cut (a tiny scratch model,
a few steps, a few questions per source). The files sit under ``data/raw/`` as docs/REAL_DATA.md
tells a user to put them (here: links to the fixtures). Skipped where the fixtures are absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentr1.config import SPLITS
from agentr1.profiles import load_profile

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# data/raw/<name in profiles/real.yaml> -> the fixture it is here
RAW = {
    "hotpotqa_dev.jsonl": "hotpotqa/dev.jsonl",
    "2wikimultihopqa_dev.json": "2wikimultihopqa/wikihop.json",
    "flashrag_hotpotqa_dev.jsonl": "flashrag/hotpotqa_dev_200.jsonl",
    "musique_ans_dev.json": "musique/musique_qa_100.json",
    "wiki_corpus.jsonl": "wiki_corpus/sample_data.jsonl",
}
TINY = {  # budgets only: the data, the checks and the stages are the profile's
    "model.kind": "scratch",
    "model.scratch": {
        "vocab_size": 600,
        "hidden_size": 32,
        "num_layers": 2,
        "num_heads": 2,
        "num_kv_heads": 2,
        "intermediate_size": 64,
        "max_position": 2048,
        "tie_embeddings": True,
    },
    "rollout.max_turn_tokens": 12,
    "pretrain": {
        "steps": 2,
        "batch_size": 2,
        "context": 256,
        "warmup_steps": 1,
        "world_families": 2,
        "docs_per_world": 20,
        "tokenizer_docs": 50,
        "log_every": 1,
        "num_threads": 1,
        "gate": {"per_split": 2, "every": 0},
    },
    "sft.train_examples": 6,
    "sft.steps": 2,
    "sft.batch_size": 3,
    "sft.warmup_steps": 1,
    "sft.log_every": 1,
    "sft.num_threads": 1,
    "train.steps": 2,
    "train.group_size": 2,
    "train.micro_batch_size": 4,
    "train.mini_batches": 1,
    "train.dev": {"every": 0, "examples": 2},
    "train.num_threads": 1,
    "train.trace_every": 0,
    "evaluate.max_examples": 3,
    "evaluate.batch_size": 3,
    "evaluate.bootstrap": {"samples": 100},
    "evaluate.num_threads": 1,
    "evaluate.register": False,
}


def tiny_sources(profile_sources: list[dict]) -> list[dict]:
    """The profile's sources with smaller limits (every source still contributes)."""
    return [dict(s, limit=40 if s.get("split") != "ood" else 12) for s in profile_sources]


@pytest.fixture(scope="module")
def pipeline(shared_fixtures, tmp_path_factory):
    root = tmp_path_factory.mktemp("real_profile")
    raw = root / "data" / "raw"
    raw.mkdir(parents=True)
    for name, rel in RAW.items():
        (raw / name).symlink_to(shared_fixtures / rel)
    full = load_profile("real", REPO / "params.yaml")
    sources = tiny_sources([s.model_dump(exclude_none=True) for s in full.cfg.data.real.sources])
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # the profile's paths (data/raw, data/processed, ...) are relative to the project
        cfg = load_profile("real", REPO / "params.yaml", {**TINY, "data.real.sources": sources}).cfg
        from agentr1 import stages

        for stage, args in (
            ("prepare", None),
            ("validate", None),
            ("index", None),
            ("pretrain", None),
            ("sft", None),
            ("train", SimpleNamespace(run="grpo", resume=False)),
            ("evaluate", SimpleNamespace(policy="grpo")),
        ):
            stages.run(stage, cfg, args)
    return root, cfg, sources


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_real_profile_runs_end_to_end_on_the_fixtures(pipeline):
    root, cfg, sources = pipeline
    assert cfg.profile == "real" and cfg.data.source == "real" and cfg.train.questions == "dataset"
    manifest = read_json(root / "data/processed/manifest.json")
    n = {s: manifest["splits"][s]["questions"] for s in SPLITS}
    assert n["ood"] == 12 and all(n[s] > 0 for s in SPLITS)
    by_source = {e["dataset"]: e for e in manifest["records"]["sources"]}
    assert set(by_source) == {"hotpotqa", "2wiki", "flashrag", "musique"}
    assert by_source["flashrag"]["without_gold"] > 0  # fullwiki contexts: kept, counted
    summary = read_json(root / "data/validation/summary.json")
    assert summary["success"] and (root / "data/validation/passed.json").exists()
    assert summary["records"]["prepared"] == manifest["records"]
    assert summary["records"]["without_gold"]["flashrag"]["without_gold"] == by_source["flashrag"]["without_gold"]
    report = read_json(root / "data/retrieval/report.json")
    assert report["passages"] == manifest["corpus_size"] > 1000  # the wiki corpus plus the contexts
    assert report["splits"]["ood"]["recall@5"] > 0 and report["splits"]["ood"]["no_supporting"] == 0
    assert (root / "data/models/sft").is_dir() and (root / "data/runs/grpo/curve.csv").exists()
    metrics = read_json(root / "data/eval/grpo/metrics.json")
    assert set(cfg.evaluate.splits) <= set(metrics["splits"])
    assert all(metrics["splits"][s]["n"] == 3 for s in cfg.evaluate.splits)
