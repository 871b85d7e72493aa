"""How a DVC stage declares itself: its module holds ``SPEC = StageSpec(...)``.

From the specs of the modules of :mod:`agentr1.stages` come the subcommands of ``agentr1`` (name,
help line, arguments), :data:`agentr1.stages.STAGES` and the ``dvc.lock`` keys ``agentr1 track``
can log (:attr:`StageSpec.lock`). A new stage is its module (with ``SPEC`` and ``run``), its
stage in ``dvc.yaml`` and its params.

The specs are read without importing the stage modules (:func:`discover`): those import torch,
transformers or great_expectations, which ``agentr1 --help`` and the light stages must not pay
for. So ``SPEC`` is a literal declaration: ``StageSpec(...)`` and ``Arg(...)`` calls whose
arguments are Python literals (strings, numbers, ``None``, booleans, tuples, lists, dicts),
evaluated from the module's source; anything else raises :class:`SpecError` naming the module.
Importing the module gives the same object (``tests/test_stage_spec.py`` checks they agree).
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from argparse import ArgumentParser
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SpecError(ValueError):
    """A stage module whose ``SPEC`` is not a literal :class:`StageSpec` declaration."""


class Arg:
    """One argument of a subcommand: ``Arg(*flags, group=None, **options)``, the flags and
    options of ``argparse``'s ``add_argument``. Arguments with the same ``group`` go into one
    mutually exclusive group (made where the first of them is added)."""

    __slots__ = ("flags", "group", "options")

    def __init__(self, *flags: str, group: str | None = None, **options: Any) -> None:
        self.flags, self.group, self.options = tuple(flags), group, dict(options)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Arg) and (self.flags, self.group, self.options) == (
            other.flags,
            other.group,
            other.options,
        )

    def __repr__(self) -> str:
        opts = ([f"group={self.group!r}"] if self.group else []) + [f"{k}={v!r}" for k, v in self.options.items()]
        return f"Arg({', '.join([*map(repr, self.flags), *opts])})"


def add_arguments(parser: ArgumentParser, args: Iterable[Arg]) -> None:
    """Add ``args`` to ``parser`` in order (exclusive groups as :class:`Arg` says)."""
    groups: dict[str, Any] = {}
    for a in args:
        if a.group is not None and a.group not in groups:
            groups[a.group] = parser.add_mutually_exclusive_group()
        (parser if a.group is None else groups[a.group]).add_argument(*a.flags, **a.options)


@dataclass(frozen=True)
class StageSpec:
    """A DVC stage as ``agentr1`` and ``agentr1 track`` see it.

    * ``name``: the subcommand ``agentr1 <name>`` and the stage's MLflow ``agentr1.stage`` tag;
    * ``help``: its help line; ``order``: its place among the stages in ``agentr1 --help``;
    * ``args``: its own arguments (:class:`Arg`);
    * ``lock``: ``dvc.lock`` key (before ``@``) -> the argument its ``@<name>`` fills, or ``None``
      for a plain key; default ``{name: None}``. ``agentr1 track`` logs an entry of such a key by
      this stage's ``log_outputs(ctx, args, replay=True)``.

    Its module may also define ``before(cfg, args)`` and ``names(cfg, args)`` (:mod:`agentr1.stages`).
    """

    name: str
    help: str
    order: int
    args: tuple[Arg, ...] = ()
    lock: Mapping[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "lock", dict(self.lock) or {self.name: None})


_CALLS = {"StageSpec": StageSpec, "Arg": Arg}


def _value(node: ast.expr, where: str) -> Any:
    """The value of a literal node, where ``StageSpec(...)`` and ``Arg(...)`` count as literals."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise SpecError(f"{where}: no *args or **kwargs in SPEC")
        return _CALLS[node.func.id](
            *(_value(a, where) for a in node.args), **{k.arg: _value(k.value, where) for k in node.keywords}
        )
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_value(e, where) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        return {_value(k, where): _value(v, where) for k, v in zip(node.keys, node.values)}
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise SpecError(
            f"{where}: SPEC must be a literal declaration (StageSpec/Arg calls over literals), "
            f"not {ast.unparse(node)!r}"
        ) from None


def read_spec(path: str | Path, module: str = "") -> StageSpec | None:
    """The ``SPEC`` declared at the top level of the Python file ``path``, evaluated from its
    source without importing it; ``None`` when it declares none."""
    where = module or str(path)
    for stmt in ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "SPEC" for t in targets) and stmt.value is not None:
                spec = _value(stmt.value, where)
                if not isinstance(spec, StageSpec):
                    raise SpecError(f"{where}: SPEC must be a StageSpec(...)")
                return spec
    return None


def discover(package: str = "agentr1.stages") -> dict[str, tuple[str, StageSpec]]:
    """Every module of ``package`` that declares a ``SPEC``: stage name -> (module, spec), in
    :attr:`StageSpec.order`. :class:`SpecError` for two modules declaring one name."""
    pkg = importlib.util.find_spec(package)
    assert pkg is not None and pkg.submodule_search_locations is not None, package
    found: list[tuple[str, StageSpec]] = []
    for info in pkgutil.iter_modules(pkg.submodule_search_locations):
        if info.ispkg:
            continue
        module = f"{package}.{info.name}"
        spec = read_spec(Path(info.module_finder.path) / f"{info.name}.py", module)  # type: ignore[union-attr]
        if spec is not None:
            found.append((module, spec))
    out: dict[str, tuple[str, StageSpec]] = {}
    for module, spec in sorted(found, key=lambda ms: (ms[1].order, ms[1].name)):
        if spec.name in out:
            raise SpecError(f"stage {spec.name!r} is declared by both {out[spec.name][0]} and {module}")
        out[spec.name] = (module, spec)
    return out
