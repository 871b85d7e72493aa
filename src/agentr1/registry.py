"""Named plug-in points: one small :class:`Registry` type, fed by Python entry points.

Contract of a :class:`Registry` (``Registry(kind, group)``, ``kind`` a readable noun used in
errors, ``group`` the entry-point group it reads):

* an entry is a **name**, an **object** and its **metadata** (``meta``, a read-only mapping of
  what the object declares about itself, e.g. an advantage estimator's ``needs_values``);
* the entries come from the installed distributions' entry points of ``group`` (agentr1's own in
  ``pyproject.toml``, ``[project.entry-points."agentr1.estimators"]`` ...; a separately installed
  package adds one the same way, without touching agentr1), read on first use: the names are the
  entry-point names, the object behind one is imported when it is first needed. An entry point
  names either the object itself or a :class:`Plugin` declaration in a light module, which holds
  the object's ``module:attr`` and its metadata: that is how an entry whose object imports torch
  declares metadata that config validation reads without importing torch;
* ``@reg.register(name, **meta)`` adds the decorated object in-process (a test's or a script's
  plug-in); ``reg.declare(name, "pkg.mod:attr", **meta)`` adds one by reference;
* a name holds one object: a different object (or reference) or different metadata under a taken
  name raises ``ValueError``; repeating the identical registration is a no-op;
* ``reg.get(name)`` is the object, ``reg.spec(name)`` the :class:`Entry` (name, meta, ref);
  :meth:`Registry.call` calls the object with the keyword arguments its signature takes; an
  unknown name raises :class:`UnknownName` (a ``KeyError`` *and* a ``ValueError``) whose message
  names the kind, the bad name and the available names;
* ``reg.names()`` is the sorted names and ``name in reg`` tests membership, neither importing
  anything; ``reg.names(**meta)`` keeps those whose metadata has every given ``key=value``
  (reading the declarations, which for an entry point naming its object directly imports it).

Entry points are read once per process, in one scan of ``sys.path`` for all groups, when a
registry is first used; :func:`refresh` forgets that reading, so that a distribution put on
``sys.path`` later (a test's plug-in) is seen, while keeping what was registered in-process.
There is no ``agentr1.rewards`` group: the outcome reward's pluggable part is its answer metric
(``METRICS``) and a per-call process reward is its tool's ``success_reward`` hook (``TOOLS``).

The groups and the metadata their entries declare (absent key = ``False``/not set):

==================  ========================  =====================================================
registry            entry-point group         metadata
==================  ========================  =====================================================
``ESTIMATORS``      ``agentr1.estimators``    ``needs_values`` (the trainer builds a critic),
                                              ``grouped`` (compares the rollouts of one question:
                                              needs ``index`` and ``group_size >= 2``),
                                              ``stepwise`` (also compares turns from equal states:
                                              needs ``steps``, ``agentr1.rl.steps``), ``label``
                                              (the report's row name)
``POLICY_LOSSES``   ``agentr1.policy_losses`` --
``KL_ESTIMATORS``   ``agentr1.kl_estimators`` ``alias_of`` (verl's name for a Schulman estimator)
``TOOLS``           ``agentr1.tools``         -- (a tool class declares its ``env.<name>`` options
                                              model as its attribute ``options``: :func:`tool_options`)
``FORMATS``         ``agentr1.formats``       --
``METRICS``         ``agentr1.metrics``       -- (the outcome reward's answer metric)
``DATASETS``        ``agentr1.datasets``      -- (a loader ``fn(records, limit, origin[, namespace])``)
``BACKENDS``        ``agentr1.backends``      -- (a rollout backend builder, :mod:`agentr1.rollout.factory`)
``RETRIEVERS``      ``agentr1.retrievers``    -- (an index backend: ``retrieval.base.IndexBackend``)
==================  ========================  =====================================================

This module imports nothing from agentr1 (it names modules only as strings).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import weakref
from collections.abc import Callable, Collection, Mapping
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
    """One registered name: its metadata and the ``module:attr`` of its object (``None`` for an
    object registered with the decorator)."""

    name: str
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    ref: str | None = None


@dataclass(frozen=True, init=False)
class Plugin:
    """A declaration an entry point can name instead of the object: where the object is
    (``"package.module:attr"``, imported on first :meth:`Registry.get`) and its metadata.
    ``Plugin("agentr1.rl.advantages:grpo", grouped=True, label="GRPO")``."""

    ref: str
    meta: Mapping[str, Any]

    def __init__(self, ref: str, **meta: Any) -> None:
        if ref.count(":") != 1 or not all(ref.split(":")):
            raise ValueError(f"plug-in reference {ref!r} is not 'package.module:attr'")
        object.__setattr__(self, "ref", ref)
        object.__setattr__(self, "meta", MappingProxyType(dict(meta)))


def load_ref(ref: str, what: str) -> Any:
    """The object at ``ref`` (``"package.module:attr"``); ``ImportError`` naming ``what`` otherwise."""
    module, attr = ref.split(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"{what} is declared as {ref!r}, which does not load: {exc}") from exc


_ENTRY_POINTS: importlib.metadata.EntryPoints | None = None
_REGISTRIES: weakref.WeakSet[Registry[Any]] = weakref.WeakSet()


def _entry_points(group: str) -> importlib.metadata.EntryPoints:
    """The installed entry points of ``group`` (all groups are read in one scan, once per process
    until :func:`refresh`)."""
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        _ENTRY_POINTS = importlib.metadata.entry_points()
    return _ENTRY_POINTS.select(group=group)


def refresh() -> None:
    """Read the entry points again on next use, in every registry (after ``sys.path`` or the
    installed distributions changed); in-process registrations are kept."""
    global _ENTRY_POINTS
    _ENTRY_POINTS = None
    importlib.invalidate_caches()
    for reg in _REGISTRIES:
        reg._forget_entry_points()


class Registry(Generic[T]):
    """Objects of one kind by name (module docstring)."""

    def __init__(self, kind: str, group: str | None = None) -> None:
        self.kind = kind
        self.group = group
        self._entries: dict[str, Entry] = {}
        self._objects: dict[str, T] = {}
        self._pending: dict[str, importlib.metadata.EntryPoint] = {}  # entry points not resolved yet
        self._from_group: set[str] = set()  # names that came from entry points
        self._read = group is None
        _REGISTRIES.add(self)

    # ------------------------------------------------------------------ entry points
    def _load_group(self) -> None:
        if self._read:
            return
        self._read = True
        found: dict[str, importlib.metadata.EntryPoint] = {}
        for ep in _entry_points(self.group):  # type: ignore[arg-type]  # _read is True without a group
            if ep.name in found and found[ep.name].value != ep.value:
                raise ValueError(
                    f"{self.kind} {ep.name!r} is declared twice in entry-point group {self.group!r}: "
                    f"{found[ep.name].value!r} and {ep.value!r}"
                )
            found[ep.name] = ep
        for name, ep in found.items():
            old = self._entries.get(name)
            if old is not None and old.ref != ep.value:
                raise ValueError(
                    f"{self.kind} {name!r} is registered in-process ({old.ref or self._objects[name]!r}) "
                    f"and declared by the entry point {ep.value!r}: pick another name"
                )
            if old is None:
                self._pending[name] = ep
                self._from_group.add(name)

    def _forget_entry_points(self) -> None:
        for name in self._from_group:
            self._entries.pop(name, None)
            self._objects.pop(name, None)
            self._pending.pop(name, None)
        self._from_group.clear()
        self._read = self.group is None

    def _resolve(self, name: str) -> None:
        """Turn the pending entry point ``name`` into an entry (importing what it names)."""
        ep = self._pending.pop(name)
        try:
            obj = ep.load()
        except (ImportError, AttributeError) as exc:
            self._pending[name] = ep
            raise ImportError(
                f"{self.kind} {name!r} is declared as {ep.value!r} (entry point of "
                f"{self.group!r}), which does not load: {exc}"
            ) from exc
        if isinstance(obj, Plugin):
            self._entries[name] = Entry(name, obj.meta, obj.ref)
        else:
            self._entries[name] = Entry(name, MappingProxyType({}), ep.value)
            self._objects[name] = obj

    # ------------------------------------------------------------------ in-process
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
        self._load_group()
        if entry.name in self._pending:
            self._resolve(entry.name)
        old = self._entries.get(entry.name)
        if old is not None:
            same_obj = obj is _UNSET or self._objects.get(entry.name, _UNSET) is obj
            if not (old.ref == entry.ref and same_obj and dict(old.meta) == dict(entry.meta)):
                raise ValueError(
                    f"{self.kind} {entry.name!r} is already registered ({old.ref or self._objects[entry.name]!r}"
                    f", meta {dict(old.meta)}): pick another name"
                )
            return
        self._entries[entry.name] = entry
        if obj is not _UNSET:
            self._objects[entry.name] = obj

    def remove(self, name: str) -> None:
        """Drop ``name`` (a test's cleanup; :class:`UnknownName` when it is not registered)."""
        self.spec(name)
        del self._entries[name]
        self._objects.pop(name, None)

    # ------------------------------------------------------------------ lookups
    def _unknown(self, name: Any) -> UnknownName:
        available = self.names()
        hint = (
            ""
            if available or self.group is None
            else (f" (no entry point of the group {self.group!r} is installed: install agentr1, e.g. `make setup`)")
        )
        return UnknownName(f"unknown {self.kind} {name!r}; available: {', '.join(available)}{hint}")

    def spec(self, name: str) -> Entry:
        """The entry of ``name``; :class:`UnknownName` naming the available names otherwise."""
        if name not in self:
            raise self._unknown(name)
        if name in self._pending:
            self._resolve(name)
        return self._entries[name]

    def get(self, name: str) -> T:
        """The object registered under ``name`` (a declared one is imported now)."""
        entry = self.spec(name)
        if name not in self._objects:
            self._objects[name] = load_ref(entry.ref, f"{self.kind} {name!r}")  # type: ignore[arg-type]  # declared entries have a ref
        return self._objects[name]

    def call(self, name: str, /, *args: Any, shared: Collection[str] = (), **options: Any) -> Any:
        """``get(name)(*args, **kw)`` where ``kw`` is the ``options`` its signature takes.

        An option the object does not take is dropped when it is in ``shared`` (a knob the caller
        passes to every entry, each using the ones it declares as parameters) and a ``TypeError``
        naming the entry and the option otherwise (a typo, not a knob). An object taking
        ``**kwargs`` receives every option."""
        fn = self.get(name)
        params = inspect.signature(fn).parameters
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs: dict[str, Any] = {}
        for key, value in options.items():
            if takes_all or key in params:
                kwargs[key] = value
            elif key not in shared:
                raise TypeError(f"{self.kind} {name!r} takes no option {key!r}")
        return fn(*args, **kwargs)

    def names(self, **meta: Any) -> list[str]:
        """Available names, sorted; with ``meta``, only those whose metadata has each ``key=value``
        (a key an entry does not declare counts as ``False``)."""
        self._load_group()
        every = sorted({*self._entries, *self._pending})
        if not meta:
            return every
        return [n for n in every if all(self.spec(n).meta.get(k, False) == v for k, v in meta.items())]

    def check(self, name: str) -> str:
        """``name`` if registered, else :class:`UnknownName` (a pydantic field validator)."""
        if name not in self:
            raise self._unknown(name)
        return name

    def __contains__(self, name: object) -> bool:
        self._load_group()
        try:
            return name in self._entries or name in self._pending
        except TypeError:  # an unhashable "name" (a list in params)
            return False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"


# ------------------------------------------------------------------------- the plug-in points
ESTIMATORS: Registry[Callable[..., Any]] = Registry("advantage estimator", "agentr1.estimators")
POLICY_LOSSES: Registry[Callable[..., Any]] = Registry("policy loss", "agentr1.policy_losses")
KL_ESTIMATORS: Registry[Callable[..., Any]] = Registry("KL estimator", "agentr1.kl_estimators")
TOOLS: Registry[type] = Registry("tool", "agentr1.tools")
FORMATS: Registry[type] = Registry("tool-call format", "agentr1.formats")
METRICS: Registry[Callable[..., float]] = Registry("answer metric", "agentr1.metrics")
DATASETS: Registry[Callable[..., Any]] = Registry("dataset", "agentr1.datasets")
BACKENDS: Registry[Callable[..., Any]] = Registry("rollout backend", "agentr1.backends")
RETRIEVERS: Registry[type] = Registry("retriever", "agentr1.retrievers")


def tool_options(name: str) -> Any:
    """The pydantic model of tool ``name``'s ``env.<name>`` options (its class attribute
    ``options``), or ``None`` when it takes none. Tool modules import no torch, so config
    validation may import them to read it."""
    return getattr(TOOLS.get(name), "options", None)


__all__ = [
    "BACKENDS",
    "DATASETS",
    "ESTIMATORS",
    "FORMATS",
    "KL_ESTIMATORS",
    "METRICS",
    "POLICY_LOSSES",
    "RETRIEVERS",
    "TOOLS",
    "Entry",
    "Plugin",
    "Registry",
    "UnknownName",
    "load_ref",
    "refresh",
    "tool_options",
]
