"""Params mappings as dotted keys (:func:`flatten`), merged (:func:`deep_merge`: profiles, named
runs) and a named run's ``train`` section (:func:`merge_run`)."""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError

from agentr1.config.sft import SFTConfig
from agentr1.config.train import TrainConfig


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{"a.b.c": leaf}`` (the dotted keys of ``--set``); lists, ``None`` and
    empty mappings are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any], replace: Collection[str] = ()) -> dict[str, Any]:
    """``over`` merged onto ``base`` in new containers (both inputs untouched): where both hold a
    mapping under a key the two merge, recursively; any other value of ``over`` (a scalar, a list,
    a mapping over a non-mapping) replaces, and so does a top-level key named in ``replace``
    (a profile's ``runs``)."""
    out = {k: copy.deepcopy(v) for k, v in base.items()}
    for k, v in over.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), Mapping) and k not in replace
        out[k] = deep_merge(out[k], v) if both else copy.deepcopy(v)
    return out


def merge_run(train: TrainConfig, override: dict[str, Any], name: str = "<run>") -> TrainConfig:
    """``train`` with a named run's overrides (nested keys merge) -> a validated TrainConfig;
    ``ValueError`` naming ``runs.<name>.<key>`` when an override is invalid."""
    try:
        return TrainConfig.model_validate(deep_merge(train.model_dump(), override or {}))
    except ValidationError as exc:
        msgs = [f"runs.{name}." + ".".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in exc.errors()]
        raise ValueError("; ".join(msgs)) from None


def merge_sft(sft: SFTConfig, override: dict[str, Any]) -> SFTConfig:
    """``sft`` with the overrides of ``sft_reference`` (nested keys merge) -> a validated
    SFTConfig; ``ValueError`` naming ``sft_reference.<key>`` when an override is invalid."""
    try:
        return SFTConfig.model_validate(deep_merge(sft.model_dump(by_alias=True), override or {}))
    except ValidationError as exc:
        msgs = ["sft_reference." + ".".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in exc.errors()]
        raise ValueError("; ".join(msgs)) from None
