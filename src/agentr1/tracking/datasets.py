"""The processed data a stage read, as MLflow dataset inputs (the runs table's "Dataset" column,
the run page's "Datasets used").

One input per file of ``data.processed_dir`` the stage reads, named ``<data.source>/<split>``
(``synthetic/test``), with its digest (the first 16 hex digits of the file's SHA-256: the same
bytes, the same digest, on any machine), its source (the file's path in the project) and its
rows (the profile ``{"num_rows": n}``, read from the Parquet footer: the file's rows, of which
``evaluate.max_examples`` may use the first ones only), and the context MLflow shows beside it:

====================  ======================================================================
stage                 inputs (context)
====================  ======================================================================
``sft``,              ``train`` (training), ``dev`` (validation: the copy probe and gate)
``sft_reference``
``train``             ``dev`` (validation: the dev curve), ``corpus`` (retrieval: searched by
                      every rollout), ``train`` (training) when ``train.questions: dataset``
                      (``fresh``: the questions come from new worlds, none from a file)
``evaluate``          each split of ``evaluate.splits`` (evaluation), ``corpus`` (retrieval)
====================  ======================================================================

A file that is not there (a stage run outside the pipeline, a test) is left out, with a log line.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CONTEXT_TAG = "mlflow.data.context"  # MLflow's input tag for what the run used a dataset for


def stage_inputs(cfg: Any, stage: str) -> list[tuple[str, str]]:
    """``[(file stem, context)]``: what ``stage`` reads of ``data.processed_dir`` (module table)."""
    if stage in ("sft", "sft_reference"):
        return [("train", "training"), ("dev", "validation")]
    if stage == "train":
        own = [("train", "training")] if cfg.train.questions == "dataset" else []
        return [*own, ("dev", "validation"), ("corpus", "retrieval")]
    if stage == "evaluate":
        return [*((s, "evaluation") for s in cfg.evaluate.splits), ("corpus", "retrieval")]
    return []


def file_digest(path: Path) -> str:
    """The first 16 hex digits of the SHA-256 of ``path``'s bytes."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def dataset_inputs(cfg: Any, stage: str) -> list[Any]:
    """The :class:`mlflow.entities.DatasetInput` list of ``stage`` (:func:`stage_inputs`)."""
    import pyarrow.parquet as pq
    from mlflow.data.sources import LocalArtifactDatasetSource
    from mlflow.entities import Dataset, DatasetInput, InputTag

    folder = Path(cfg.data.processed_dir)
    out = []
    for stem, context in stage_inputs(cfg, stage):
        path = folder / f"{stem}.parquet"
        if not path.is_file():
            log.info("no %s: the %s run lists no %s dataset", path, stage, stem)
            continue
        source = LocalArtifactDatasetSource(path.as_posix())
        dataset = Dataset(
            name=f"{cfg.data.source}/{stem}",
            digest=file_digest(path),
            source_type=source._get_source_type(),
            source=source.to_json(),
            profile=json.dumps({"num_rows": pq.ParquetFile(path).metadata.num_rows}),
        )
        out.append(DatasetInput(dataset, tags=[InputTag(CONTEXT_TAG, context)]))
    return out


def log_dataset_inputs(client: Any, run_id: str, cfg: Any, stage: str) -> int:
    """Log :func:`dataset_inputs` on run ``run_id``; how many."""
    inputs = dataset_inputs(cfg, stage)
    if inputs:
        client.log_inputs(run_id, datasets=inputs)
    return len(inputs)
