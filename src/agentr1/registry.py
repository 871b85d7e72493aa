"""Named plug-in points: one small :class:`Registry` type and the catalogue of the built-ins.

Contract of a :class:`Registry` (``Registry(kind)``, ``kind`` a readable noun used in errors):

* an entry is a **name**, an **object** and its **metadata** (``meta``, a read-only mapping of
  what the object declares about itself, e.g. an advantage estimator's ``needs_values``);
* ``@reg.register(name, **meta)`` adds the decorated object; ``reg.declare(name, "pkg.mod:attr",
  **meta)`` adds an object by reference, imported on its first :meth:`Registry.get`;
* a name holds one object: registering a different object (or reference) or different metadata
  under a taken name raises ``ValueError``; repeating the identical registration is a no-op;
* ``reg.get(name)`` is the object, ``reg.spec(name)`` the :class:`Entry` (name, meta, ref);
  an unknown name raises :class:`UnknownName` (a ``KeyError`` *and* a ``ValueError``) whose
  message names the kind, the bad name and the registered names;
* ``reg.names(**meta)`` is the sorted names whose metadata has every given ``key=value``;
  ``name in reg`` tests membership. Neither imports anything.

Why built-ins are declared by reference, here. ``agentr1.config`` validates every name a params
file uses (``train.estimator``, ``env.format``, ...) against these registries before any stage
runs, and every stage imports ``agentr1.config``. The estimators and losses live in modules that
import torch (~1.5 s), so registering them with decorators in their own modules would make
``agentr1 prepare``/``validate``/``index``/``report`` import torch just to read params (and
import it before :func:`agentr1.numerics.pin_cpu_numerics` in any caller that loads params
first). Declaring each built-in once below, with its metadata and the ``module:attr`` that
implements it, keeps config validation import-free; the object itself is imported when a stage
first uses it. A user plug-in registers with the decorator from any module that is imported
before the params are loaded (``@ESTIMATORS.register("mine", needs_values=False)``).
``tests/test_registry.py`` resolves every declared reference, so a renamed function fails there.

Metadata each registry's entries declare (absent key = ``False``/not set):

============================  ==============================================================
``ESTIMATORS``                ``needs_values`` (the trainer builds a critic), ``grouped``
                              (compares the rollouts of one question: needs ``index`` and
                              ``group_size >= 2``), ``label`` (the report's row name)
``POLICY_LOSSES``             --
``KL_ESTIMATORS``             ``alias_of`` (verl's name for a Schulman estimator)
``TOOLS``                     ``options`` (the ``module:attr`` of the pydantic model of the
                              tool's ``env.<name>`` options; see :func:`tool_options`)
``FORMATS``, ``METRICS``      --
============================  ==============================================================

This module imports nothing from agentr1 (it names modules only as strings).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_UNSET: Any = object()


class UnknownName(KeyError, ValueError):
    """A name no registry entry has. A ``KeyError`` (a failed lookup) and a ``ValueError`` (bad
    input, so pydantic reports it as a validation error of the field that named it)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Entry:
    """One registered name: its metadata and, for a declared entry, the ``module:attr`` of its
    object (``None`` for an entry registered with the decorator)."""

    name: str
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    ref: str | None = None


def load_ref(ref: str, what: str) -> Any:
    """The object at ``ref`` (``"package.module:attr"``); ``ImportError`` naming ``what`` otherwise."""
    module, attr = ref.split(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"{what} is declared as {ref!r}, which does not load: {exc}") from exc


class Registry(Generic[T]):
    """Objects of one kind by name (module docstring)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._objects: dict[str, T] = {}

    def register(self, name: str, **meta: Any) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name`` with ``meta``; returns it."""

        def deco(obj: T) -> T:
            self._add(Entry(name, MappingProxyType(dict(meta))), obj)
            return obj

        return deco

    def declare(self, name: str, ref: str, **meta: Any) -> None:
        """Register the object at ``ref`` (``"package.module:attr"``), imported on first use."""
        if ref.count(":") != 1 or not all(ref.split(":")):
            raise ValueError(f"{self.kind} {name!r}: reference {ref!r} is not 'package.module:attr'")
        self._add(Entry(name, MappingProxyType(dict(meta)), ref), _UNSET)

    def _add(self, entry: Entry, obj: Any) -> None:
        old = self._entries.get(entry.name)
        if old is not None:
            same_obj = obj is _UNSET or self._objects.get(entry.name, _UNSET) is obj
            if not (old.ref == entry.ref and same_obj and dict(old.meta) == dict(entry.meta)):
                raise ValueError(f"{self.kind} {entry.name!r} is already registered ({old.ref or self._objects[entry.name]!r}"
                                 f", meta {dict(old.meta)}): pick another name")
            return
        self._entries[entry.name] = entry
        if obj is not _UNSET:
            self._objects[entry.name] = obj

    def remove(self, name: str) -> None:
        """Drop ``name`` (a test's cleanup; :class:`UnknownName` when it is not registered)."""
        self.spec(name)
        del self._entries[name]
        self._objects.pop(name, None)

    def spec(self, name: str) -> Entry:
        """The entry of ``name``; :class:`UnknownName` naming the registered names otherwise."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable "name" (a list in params)
            raise UnknownName(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}") from None

    def get(self, name: str) -> T:
        """The object registered under ``name`` (a declared one is imported now)."""
        entry = self.spec(name)
        if name not in self._objects:
            self._objects[name] = load_ref(entry.ref, f"{self.kind} {name!r}")  # type: ignore[arg-type]  # declared entries have a ref
        return self._objects[name]

    def names(self, **meta: Any) -> list[str]:
        """Registered names, sorted; with ``meta``, only those whose metadata has each ``key=value``
        (a key an entry does not declare counts as ``False``)."""
        return sorted(n for n, e in self._entries.items() if all(e.meta.get(k, False) == v for k, v in meta.items()))

    def check(self, name: str) -> str:
        """``name`` if registered, else :class:`UnknownName` (a pydantic field validator)."""
        self.spec(name)
        return name

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:
            return False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"


# ------------------------------------------------------------------------------- the catalogue
_ADV = "agentr1.rl.advantages"
ESTIMATORS: Registry[Callable[..., Any]] = Registry("advantage estimator")
ESTIMATORS.declare("gae", f"{_ADV}:gae", needs_values=True, label="PPO")
ESTIMATORS.declare("grpo", f"{_ADV}:grpo", grouped=True, label="GRPO")
ESTIMATORS.declare("reinforce_pp", f"{_ADV}:reinforce_pp", label="REINFORCE++")
ESTIMATORS.declare("reinforce_pp_baseline", f"{_ADV}:reinforce_pp_baseline", grouped=True, label="REINFORCE++ baseline")
ESTIMATORS.declare("rloo", f"{_ADV}:rloo", grouped=True, label="RLOO")

_LOSS = "agentr1.rl.losses"
POLICY_LOSSES: Registry[Callable[..., Any]] = Registry("policy loss")
POLICY_LOSSES.declare("ppo_clip", f"{_LOSS}:ppo_clip")
POLICY_LOSSES.declare("reinforce", f"{_LOSS}:reinforce")

KL_ESTIMATORS: Registry[Callable[..., Any]] = Registry("KL estimator")
KL_ESTIMATORS.declare("k1", f"{_LOSS}:kl_k1")
KL_ESTIMATORS.declare("k2", f"{_LOSS}:kl_k2")
KL_ESTIMATORS.declare("k3", f"{_LOSS}:kl_k3")
KL_ESTIMATORS.declare("abs", f"{_LOSS}:kl_abs")
KL_ESTIMATORS.declare("kl", f"{_LOSS}:kl_k1", alias_of="k1")
KL_ESTIMATORS.declare("mse", f"{_LOSS}:kl_k2", alias_of="k2")
KL_ESTIMATORS.declare("low_var_kl", f"{_LOSS}:kl_k3", alias_of="k3")

TOOLS: Registry[type] = Registry("tool")
TOOLS.declare("search", "agentr1.env.search:SearchTool", options="agentr1.config:SearchToolConfig")
TOOLS.declare("calculator", "agentr1.env.calculator:CalculatorTool", options="agentr1.config:CalculatorToolConfig")


def tool_options(name: str) -> Any:
    """The pydantic model of tool ``name``'s ``env.<name>`` options, or ``None`` when it takes none.

    A declared built-in names it in its ``options`` metadata (``module:attr``, imported here, so
    config validation never imports the tool); a tool registered with the decorator is already
    imported and declares it as its class attribute ``options``. ``tests/test_registry.py`` checks
    that a built-in's metadata and class attribute agree."""
    ref = TOOLS.spec(name).meta.get("options")
    if isinstance(ref, str):
        return load_ref(ref, f"the options of tool {name!r}")
    return getattr(TOOLS.get(name), "options", None)

FORMATS: Registry[type] = Registry("tool-call format")
FORMATS.declare("tags", "agentr1.env.formats:TagFormat")
FORMATS.declare("hermes", "agentr1.env.formats:HermesFormat")

METRICS: Registry[Callable[..., float]] = Registry("answer metric")
METRICS.declare("em", "agentr1.env.rewards:exact_match")
METRICS.declare("subem", "agentr1.env.rewards:substring_exact_match")
METRICS.declare("f1", "agentr1.env.rewards:f1_score")

__all__ = ["ESTIMATORS", "FORMATS", "KL_ESTIMATORS", "METRICS", "POLICY_LOSSES", "TOOLS", "Entry", "Registry", "UnknownName", "load_ref", "tool_options"]
