"""Params mappings as dotted keys (:func:`flatten`), merged (:func:`deep_merge`: profiles, named
runs) and a section with overrides merged in (:func:`merge_section`: a named run's ``train``,
:func:`merge_run`; the reference cold start's ``sft``)."""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agentr1.config.train import TrainConfig

S = TypeVar("S", bound=BaseModel)


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


def merge_section(section: S, override: Mapping[str, Any] | None, where: str) -> S:
    """A validated params ``section`` with ``override`` merged in (nested keys merge) -> a
    validated section of the same class; ``ValueError`` naming ``<where>.<key>`` when an override
    is invalid (``where``: the params key the override sits under)."""
    try:
        return type(section).model_validate(deep_merge(section.model_dump(by_alias=True), override or {}))
    except ValidationError as exc:
        msgs = [f"{where}." + ".".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in exc.errors()]
        raise ValueError("; ".join(msgs)) from None


def merge_run(train: TrainConfig, override: dict[str, Any], name: str = "<run>") -> TrainConfig:
    """``train`` with a named run's overrides (:func:`merge_section`; errors name ``runs.<name>.<key>``)."""
    return merge_section(train, override, f"runs.{name}")
