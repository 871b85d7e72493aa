"""The records report of real data as MLflow metrics (stages ``prepare`` and ``validate``).

Kept apart from :mod:`agentr1.stages.outputs` on purpose: ``pretrain`` depends on that module in
``dvc.yaml``, and the committed base must not be rebuilt (80 minutes) for a change it never uses.
"""

from __future__ import annotations

import re
from typing import Any

_NOT_KEY = re.compile(r"[^a-z0-9]+")


def metric_key(text: str, limit: int = 60) -> str:
    """``text`` as one part of an MLflow metric name: lower case, every run of other characters
    than ``a-z0-9`` one ``_``, at most ``limit`` characters (``"no 'context' (missing or empty)"``
    -> ``no_context_missing_or_empty``)."""
    return _NOT_KEY.sub("_", text.lower()).strip("_")[:limit].rstrip("_") or "_"


def records_metrics(records: dict[str, Any] | None, prefix: str) -> dict[str, float]:
    """The records report of real data (``manifest.json`` ``records``,
    :func:`agentr1.data.multihop.load_real`) as flat metrics: per source
    ``<prefix>.<sources_i_dataset>.questions|without_gold|passages_already_in_corpus|skipped`` and
    ``...skipped.<reason>`` (:func:`metric_key`), and ``<prefix>.corpus.passages|passages_already_in_corpus``."""
    out: dict[str, float] = {}
    for entry in (records or {}).get("sources") or []:
        key = f"{prefix}.{metric_key(entry['source'].removeprefix('data.real.') + '_' + entry['dataset'])}"
        for name in ("questions", "without_gold", "passages_already_in_corpus"):
            out[f"{key}.{name}"] = entry[name]
        out[f"{key}.skipped"] = sum(entry["skipped"].values())
        out.update({f"{key}.skipped.{metric_key(reason)}": n for reason, n in entry["skipped"].items()})
    corpus = (records or {}).get("corpus")
    if corpus:
        out.update({f"{prefix}.corpus.{k}": corpus[k] for k in ("passages", "passages_already_in_corpus")})
    return out
