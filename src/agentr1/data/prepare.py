"""The unified dataset of ``data.*``: the ``prepare`` stage's work (:mod:`agentr1.stages.prepare`).

:func:`build_dataset` generates the synthetic world or loads the real sources;
:func:`build_manifest` summarises it (counts per split/type/hops, corpus size; deterministic, no
timestamps) for ``manifest.json``; for real sources it adds ``records`` (per source: questions kept,
records skipped per reason, questions kept without gold passages, passages already in the corpus;
:func:`agentr1.data.multihop.load_real`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentr1.config import SPLITS, Config
from agentr1.data.schema import CORPUS_FILE, Dataset
from agentr1.errors import StageError

MANIFEST_FILE = "manifest.json"


def build_dataset(cfg: Config) -> tuple[Dataset, dict[str, Any]]:
    """The dataset for ``cfg.data.source`` plus source-specific manifest extras."""
    if cfg.data.source == "synthetic":
        from agentr1.data import synthetic

        try:
            tools = cfg.data.tool_questions if cfg.data.task == "tools" else None
            world, questions = synthetic.generate(cfg.data.synthetic, cfg.seed, tools)
        except ValueError as exc:
            raise StageError(str(exc)) from exc
        ds = synthetic.to_dataset(world, questions, cfg.data.synthetic, cfg.seed)
        return ds, {"entities": synthetic.world_stats(world)}
    from agentr1.data.multihop import load_real

    try:
        ds, records = load_real(cfg.data.real, seed=cfg.seed)
        return ds, {"records": records}
    except ValueError as exc:
        raise StageError(str(exc)) from exc


def build_manifest(ds: Dataset, cfg: Config, extra: dict[str, Any]) -> dict[str, Any]:
    """Deterministic summary of ``ds`` (sorted keys, string keys for hop counts)."""
    splits = {}
    for split in SPLITS:
        rows = ds.split(split)
        splits[split] = {
            "questions": len(rows),
            "by_type": dict(sorted(Counter(r["type"] for r in rows).items())),
            "by_hops": {str(h): n for h, n in sorted(Counter(int(r["hops"]) for r in rows).items())},
        }
    return {
        "source": cfg.data.source,
        "seed": cfg.seed,
        "params_hash": cfg.section_hash("seed", "data"),
        "corpus_size": len(ds.corpus),
        "splits": splits,
        "files": sorted([f"{s}.parquet" for s in SPLITS] + [CORPUS_FILE, MANIFEST_FILE]),
        **extra,
    }
