"""Named runs -> methods: one row per run with its seeds, mask ablations paired with their full-mask method.

A named run in params ``runs`` is a dict of ``train`` overrides, trained once per seed of params
``seeds``: its **method** is the run, labelled by its name, its runs the replicas ``<run>-<seed>``
(``grpo-0``, ``grpo-1``, ``grpo-2``: :func:`agentr1.config.root.replica`). Overrides are compared
with keys that merely restate the ``train`` default dropped.

A method whose overrides turn ``loss_mask`` and/or ``advantage_mask`` off is an **ablation** of
the method with the same overrides minus those keys (``ppo_no_adv_mask = {estimator: gae,
advantage_mask: false}`` -> ablation of ``ppo = {estimator: gae}``); ``ablation_of`` is ``None``
when params define no such full-mask method.

A method whose ``cold_start`` is ``reference`` starts from the reference demonstrator's cold start
(stage ``sft_reference``): it is compared with that baseline, and named "... from the reference
cold start".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentr1.config import TrainConfig
from agentr1.config.root import replica
from agentr1.registry import ESTIMATORS

SEED_KEY = "seed"
MASK_KEYS = ("loss_mask", "advantage_mask")
MASK_WORDS = {"loss_mask": "loss mask", "advantage_mask": "advantage mask"}
# Table 3 order of the baselines: eval policy name -> row name
BASELINES = {
    "base_tool_call": "Base Tool Call",
    "naive_rag": "Naive RAG",
    "cold_start": "Cold start SFT",
    "cold_start_reference": "Cold start SFT, reference demonstrator",
}
REFERENCE = "cold_start_reference"  # a baseline only where params define sft_reference
COLD_STARTS = {"sft": "cold_start", "reference": REFERENCE}  # train.cold_start -> the baseline RL starts from
_MISSING = object()


def report_baselines(has_reference: bool) -> dict[str, str]:
    """:data:`BASELINES` the params evaluate: the reference cold start only with ``sft_reference``."""
    return {k: v for k, v in BASELINES.items() if has_reference or k != REFERENCE}


@dataclass
class Method:
    """One row of the report: the runs (seeds) that share ``overrides``."""

    label: str
    runs: list[str]
    overrides: dict[str, Any]
    estimator: str
    masks_off: list[str] = field(default_factory=list)
    ablation_of: str | None = None
    display: str = ""
    cold_start: str = "cold_start"  # the baseline this method starts from (:data:`COLD_STARTS`)
    seeds: list[int] = field(default_factory=list)  # the training seed of each run, in ``runs``' order

    @property
    def is_ablation(self) -> bool:
        return bool(self.masks_off)


def canonical_overrides(override: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``override`` without ``seed`` and without keys whose value equals the ``train`` default."""
    defaults = defaults or {}
    return {k: v for k, v in override.items() if k != SEED_KEY and defaults.get(k, _MISSING) != v}


def _key(overrides: Mapping[str, Any]) -> str:
    return json.dumps(overrides, sort_keys=True, default=str)


def _effective(key: str, over: Mapping[str, Any], defaults: Mapping[str, Any], fallback: Any) -> Any:
    return over[key] if key in over else defaults.get(key, fallback)


def group_methods(
    runs: Mapping[str, Mapping[str, Any]], defaults: Mapping[str, Any] | None = None, seeds: Sequence[int] = (0,)
) -> list[Method]:
    """One method per named run, its runs the replicas for ``seeds`` (module docstring). ``defaults``
    = the ``train`` section as a dict (``cfg.train.model_dump()``); without it, overrides are compared
    as written and the masks default to on. Returns the methods in a stable order: full-mask methods
    by estimator (the registered names' order: gae, grpo, reinforce_pp, reinforce_pp_baseline, rloo;
    an unregistered one last) then label, then the ablations."""
    defaults = dict(defaults or {})
    methods: list[Method] = []
    for name in runs:
        canon = canonical_overrides(runs[name] or {}, defaults)
        off = [k for k in MASK_KEYS if _effective(k, canon, defaults, True) is False]
        estimator = str(_effective("estimator", canon, defaults, TrainConfig.model_fields["estimator"].default))
        start = COLD_STARTS[str(_effective("cold_start", canon, defaults, "sft"))]
        methods.append(
            Method(
                label=name,
                runs=[replica(name, s) for s in seeds],
                overrides=canon,
                estimator=estimator,
                masks_off=off,
                cold_start=start,
                seeds=list(seeds),
            )
        )

    by_overrides = {_key(m.overrides): m for m in methods if not m.is_ablation}
    for m in methods:
        if m.is_ablation:
            base = {k: v for k, v in m.overrides.items() if k not in MASK_KEYS}
            full = by_overrides.get(_key(base))
            m.ablation_of = full.label if full is not None else None

    est_order = ESTIMATORS.names()

    def order(m: Method) -> tuple:
        rank = est_order.index(m.estimator) if m.estimator in est_order else len(est_order)
        return (m.is_ablation, rank, m.label)

    methods.sort(key=order)
    _name_methods(methods)
    return methods


def estimator_label(name: str) -> str:
    """The report's name of estimator ``name``: its registered ``label``, else ``name`` itself."""
    return ESTIMATORS.spec(name).meta.get("label", name) if name in ESTIMATORS else name


def _name_methods(methods: list[Method]) -> None:
    """Row names: the estimator's ``label`` in :data:`~agentr1.registry.ESTIMATORS` (``GRPO``; its
    name when it declares none), with the run label added when several full-mask methods share an
    estimator; an ablation is ``<full-mask name> w/o <masks>``."""
    full = [m for m in methods if not m.is_ablation]
    for m in full:
        base = estimator_label(m.estimator)
        shared = sum(1 for o in full if o.estimator == m.estimator) > 1
        plain = not any(k not in ("estimator", "cold_start") for k in m.overrides)
        m.display = f"{base} ({m.label})" if shared and not plain else base
        if m.cold_start == REFERENCE:
            m.display += " from the reference cold start"
    names = {m.label: m.display for m in full}
    for m in methods:
        if m.is_ablation:
            words = " & ".join(MASK_WORDS[k] for k in m.masks_off)
            base = names.get(m.ablation_of or "", estimator_label(m.estimator))
            m.display = f"{base} w/o {words}" if m.ablation_of else f"{m.label} ({words} off)"
