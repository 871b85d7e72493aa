"""The questions an evaluation plays and its split-level numbers.

:func:`select_questions` picks the first ``max_examples`` questions of each split;
:func:`eval_data_fingerprint` names them (the registry compares only versions evaluated on the
same questions); :func:`flat_metrics` flattens the split summaries of
:func:`agentr1.eval.metrics.summarize_split` to ``<split>/<key>``; :func:`sampled` is the
``k``-sample evaluation (sampled EM, pass@k) of every split, :func:`sampled_flat` its flat keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentr1.errors import StageError
from agentr1.eval.metrics import MEANS, SCORES
from agentr1.eval.quick import sample_policy, sampling_summary
from agentr1.eval.setup import EvalSetup

FLAT_KEYS = ("n", *MEANS, *(f"{m}_ci_{side}" for m in SCORES for side in ("lower", "upper")))


def select_questions(ds, splits: Sequence[str], max_examples: int | None) -> dict[str, list[dict[str, Any]]]:
    """The first ``max_examples`` questions (all when ``None``) of each split, in dataset order."""
    out = {}
    for split in splits:
        qs = ds.split(split)
        if not qs:
            raise StageError(f"split {split!r} has no questions in the processed data: remove it from evaluate.splits")
        out[split] = list(qs if max_examples is None else qs[:max_examples])
    return out


def eval_data_fingerprint(questions: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """``<split>+<split>:<sha256[:16]>`` of the evaluated question ids per split (the registry's
    ``agentr1.eval_data`` tag: the gate compares only versions evaluated on the same questions)."""
    ids = {split: sorted(str(q["id"]) for q in qs) for split, qs in questions.items()}
    digest = hashlib.sha256(json.dumps(ids, sort_keys=True).encode()).hexdigest()[:16]
    return f"{'+'.join(questions)}:{digest}"


def flat_metrics(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``{"<split>/<key>": value}`` for the split-level numbers (:data:`FLAT_KEYS`)."""
    return {f"{split}/{k}": s[k] for split, s in summaries.items() for k in FLAT_KEYS if k in s}


def sampled(setup: EvalSetup, questions: Mapping[str, Sequence[dict]], k: int, batch_size: int) -> dict[str, Any]:
    """``k`` samples per question of every split at ``setup.rollout``'s temperature and top-p,
    ``max(batch_size // k, 1)`` questions per call, the call starting at question ``start`` seeded
    ``setup.seed + start``; summarized by :func:`agentr1.eval.quick.sampling_summary`."""
    per_call = max(batch_size // k, 1)
    out: dict[str, Any] = {"k": k, "temperature": setup.rollout.temperature, "top_p": setup.rollout.top_p, "splits": {}}
    for split, qs in questions.items():
        ems: list[list[float]] = []
        for start in range(0, len(qs), per_call):
            ems += sample_policy(replace(setup, seed=setup.seed + start), qs[start : start + per_call], k)
        out["splits"][split] = sampling_summary(qs, ems)
    return out


def sampled_flat(sampling: Mapping[str, Any]) -> dict[str, float]:
    """The flat keys of a :func:`sampled` result: ``<split>/sampled_em`` and ``<split>/pass_at_<k>``
    per split, in that order."""
    flat: dict[str, float] = {}
    for split, entry in sampling["splits"].items():
        flat[f"{split}/sampled_em"] = entry["sampled_em"]
        flat[f"{split}/pass_at_{sampling['k']}"] = entry["pass_at_k"]
    return flat
