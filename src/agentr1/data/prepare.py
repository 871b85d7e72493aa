"""Stage ``prepare``: params -> the unified dataset in ``data.processed_dir``.

Writes ``train/dev/test/ood.parquet``, ``corpus.parquet`` and ``manifest.json`` (counts per
split/type/hops, corpus size; deterministic, no timestamps), all inside one atomic directory swap:
a failure anywhere leaves the previous output untouched and no temporary directory behind.

With ``tracking.enabled`` the stage is one MLflow run (``agentr1.tracking.mlflow_adapter.stage_run``,
imported only then: ``mlflow`` is a heavy import) with metrics ``prepare/<split>/questions``,
``prepare/questions``, ``prepare/corpus_size``, ``prepare/build_s``, ``prepare/total_s`` and the
manifest as artifact ``prepare/manifest.json``. Tracking never changes the files written.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentr1.config import SPLITS, Config
from agentr1.data.schema import CORPUS_FILE, Dataset, write_dataset
from agentr1.errors import StageError
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.tracking import tracked_stage

log = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"


def build_dataset(cfg: Config) -> tuple[Dataset, dict[str, Any]]:
    """The dataset for ``cfg.data.source`` plus source-specific manifest extras."""
    if cfg.data.source == "synthetic":
        from agentr1.data import synthetic

        try:
            world, questions = synthetic.generate(cfg.data.synthetic, cfg.seed)
        except ValueError as exc:
            raise StageError(str(exc)) from exc
        ds = synthetic.to_dataset(world, questions, cfg.data.synthetic, cfg.seed)
        return ds, {"entities": synthetic.world_stats(world)}
    from agentr1.data.multihop import load_sources

    try:
        return load_sources(cfg.data.real, seed=cfg.seed), {}
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


def manifest_metrics(manifest: dict[str, Any]) -> dict[str, float]:
    """The manifest's key numbers as flat MLflow metrics (questions per split, corpus size)."""
    metrics = {f"prepare/{split}/questions": manifest["splits"][split]["questions"] for split in SPLITS}
    metrics["prepare/questions"] = sum(metrics.values())
    metrics["prepare/corpus_size"] = manifest["corpus_size"]
    return metrics



def run_prepare(cfg: Config, args: Any = None) -> Path:
    """Build the dataset and swap it into ``cfg.data.processed_dir`` atomically; returns the dir."""
    with tracked_stage(cfg, "prepare") as run:
        t0 = time.perf_counter()
        ds, extra = build_dataset(cfg)
        t_build = time.perf_counter() - t0
        manifest = build_manifest(ds, cfg, extra)
        out = Path(cfg.data.processed_dir)
        with atomic_dir(out) as tmp:
            write_dataset(ds, tmp)
            write_json_atomic(tmp / MANIFEST_FILE, manifest)
        elapsed = time.perf_counter() - t0
        for split in SPLITS:
            info = manifest["splits"][split]
            log.info("prepare: %-5s %5d questions  types=%s  hops=%s", split, info["questions"], info["by_type"],
                     info["by_hops"])
        log.info("prepare: source=%s corpus=%d passages -> %s (build %.2fs, total %.2fs)", cfg.data.source,
                 len(ds.corpus), out, t_build, elapsed)
        if run is not None and run.enabled:
            import mlflow

            run.logger.log({**manifest_metrics(manifest), "prepare/build_s": t_build, "prepare/total_s": elapsed}, step=0)
            mlflow.log_artifact(str(out / MANIFEST_FILE), artifact_path="prepare", run_id=run.run_id)
    return out
