"""Stage ``prepare``: params -> the unified dataset in ``data.processed_dir``.

Writes ``train/dev/test/ood.parquet``, ``corpus.parquet`` and ``manifest.json`` (counts per
split/type/hops, corpus size; deterministic, no timestamps; :mod:`agentr1.data.prepare`), all
inside one atomic directory swap: a failure anywhere leaves the previous output untouched and no
temporary directory behind.

Real data (``data.source: real``): ``dvc.yaml``'s ``prepare`` depends on the folder
:data:`RAW_DIR` (``data/raw``), so a raw file there that changes makes ``dvc status`` report the
stage changed and ``dvc repro`` rebuild it. DVC cannot depend on a path a param names, so a
source or corpus file elsewhere is read but not watched: the stage says so with a warning naming
the param and the fix (:func:`unwatched_inputs`).

Tracking (:func:`log_outputs`): metrics ``prepare/<split>.questions``, ``prepare/questions``,
``prepare/corpus_size``, ``prepare/build_s``, ``prepare/total_s`` (live runs only: no file keeps
them), for real data the manifest's records report per source (``prepare/records.<source>.questions``,
``.without_gold``, ``.skipped``, ``.skipped.<reason>``, ``.passages_already_in_corpus``:
:func:`~agentr1.stages.records.records_metrics`) and the manifest as artifact ``prepare/manifest.json``. Tracking never changes the files
written.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from agentr1.config import SPLITS
from agentr1.data.prepare import MANIFEST_FILE, build_dataset, build_manifest
from agentr1.data.schema import write_dataset
from agentr1.io import atomic_dir, write_json_atomic
from agentr1.stages.context import StageContext
from agentr1.stages.records import records_metrics
from agentr1.stages.spec import StageSpec

SPEC = StageSpec("prepare", "build the unified dataset (data/processed)", order=10)

log = logging.getLogger(__name__)


def manifest_metrics(manifest: dict[str, Any]) -> dict[str, float]:
    """The manifest's key numbers as flat MLflow metrics (questions per split, corpus size)."""
    metrics = {f"prepare/{split}.questions": manifest["splits"][split]["questions"] for split in SPLITS}
    metrics["prepare/questions"] = sum(metrics.values())
    metrics["prepare/corpus_size"] = manifest["corpus_size"]
    metrics.update(records_metrics(manifest.get("records"), "prepare/records"))
    return metrics


RAW_DIR = Path("data/raw")  # the folder dvc.yaml's prepare stage depends on


def unwatched_inputs(real_cfg, root: Path | None = None) -> list[str]:
    """``"<param>: <path>"`` for each local file of ``data.real`` (sources' ``path``, ``corpus``)
    outside :data:`RAW_DIR` (relative to ``root``, default the working directory): DVC does not see
    those change. Symlinks count where they are, not where they point (DVC hashes the link's
    target wherever it lies)."""
    raw = ((root or Path.cwd()) / RAW_DIR).absolute()
    named = [(f"data.real.sources[{i}].path", s.path) for i, s in enumerate(real_cfg.sources) if s.path]
    named += [("data.real.corpus", real_cfg.corpus)] if real_cfg.corpus else []
    out = []
    for key, path in named:
        where = Path(path) if Path(path).is_absolute() else (root or Path.cwd()) / path
        if not where.absolute().is_relative_to(raw):
            out.append(f"{key}: {path}")
    return out


def run(ctx: StageContext, args: Any = None) -> Path:
    """Build the dataset and swap it into ``data.processed_dir`` atomically; returns the dir."""
    cfg = ctx.cfg
    if cfg.data.source == "real":
        for item in unwatched_inputs(cfg.data.real):
            log.warning(
                "prepare: %s is outside %s/, which dvc.yaml's prepare stage depends on: `dvc repro` will not "
                "see this file change (move it, or a symlink to it, under %s/)",
                item,
                RAW_DIR,
                RAW_DIR,
            )
    with ctx.phase("total", quiet=True):
        with ctx.phase("build", quiet=True):
            ds, extra = build_dataset(cfg)
        manifest = build_manifest(ds, cfg, extra)
        out = Path(cfg.data.processed_dir)
        with atomic_dir(out) as tmp:
            write_dataset(ds, tmp)
            write_json_atomic(tmp / MANIFEST_FILE, manifest)
    for split in SPLITS:
        info = manifest["splits"][split]
        log.info(
            "prepare: %-5s %5d questions  types=%s  hops=%s", split, info["questions"], info["by_type"], info["by_hops"]
        )
    for entry in (manifest.get("records") or {}).get("sources", []):
        skipped = ", ".join(f"{n} {why}" for why, n in entry["skipped"].items()) or "none"
        log.info(
            "prepare: %s (%s): %d questions kept, %d without gold passages; skipped: %s; %d of its %d "
            "passages already in the corpus",
            entry["source"],
            entry["dataset"],
            entry["questions"],
            entry["without_gold"],
            skipped,
            entry["passages_already_in_corpus"],
            entry["passages"],
        )
    log.info(
        "prepare: source=%s corpus=%d passages -> %s (build %.2fs, total %.2fs)",
        cfg.data.source,
        len(ds.corpus),
        out,
        ctx.times["build"],
        ctx.times["total"],
    )
    log_outputs(ctx)
    return out


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False) -> None:
    """The stage's MLflow run from its outputs (the manifest) and, in a live run, its timings;
    the same for a run reconstructed by ``agentr1 track`` (``replay``)."""
    manifest_path = Path(ctx.cfg.data.processed_dir) / MANIFEST_FILE
    times = {f"prepare/{k}_s": ctx.times[k] for k in ("build", "total") if k in ctx.times}
    ctx.run.log_metrics({**manifest_metrics(json.loads(manifest_path.read_text())), **times})
    ctx.run.log_artifacts([manifest_path], artifact_path="prepare")
