"""The one Registry type (agentr1.registry) and the built-in plug-ins pyproject.toml declares."""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import sys

import pytest

from agentr1 import registry
from agentr1.registry import Registry, UnknownName

CATALOGUE = {name: reg for name, reg in vars(registry).items() if isinstance(reg, Registry)}


def test_register_get_names_and_metadata() -> None:
    reg: Registry = Registry("widget")

    @reg.register("b", size=2, round=True)
    def b():
        return "b"

    reg.register("a", size=1)(len)
    assert reg.get("b") is b and reg.get("a") is len
    assert reg.names() == ["a", "b"] and "a" in reg and "c" not in reg and ["a"] not in reg
    assert dict(reg.spec("b").meta) == {"size": 2, "round": True} and reg.spec("b").ref is None
    assert reg.names(round=True) == ["b"] and reg.names(round=False) == ["a"]  # undeclared counts as False
    assert reg.names(size=1) == ["a"]
    with pytest.raises(TypeError):
        reg.spec("b").meta["size"] = 3  # read-only
    reg.remove("a")
    assert reg.names() == ["b"]


def test_a_taken_name_refuses_another_object_or_metadata() -> None:
    reg: Registry = Registry("widget")
    reg.register("x", size=1)(len)
    reg.register("x", size=1)(len)  # the identical registration again: a no-op
    with pytest.raises(ValueError, match="widget 'x' is already registered.*pick another name"):
        reg.register("x", size=1)(abs)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("x", size=2)(len)
    with pytest.raises(ValueError, match="already registered"):
        reg.declare("x", "builtins:len", size=1)
    assert reg.get("x") is len and dict(reg.spec("x").meta) == {"size": 1}


def test_unknown_name_names_the_kind_the_name_and_the_choices() -> None:
    reg: Registry = Registry("widget")
    reg.register("beta")(len)
    reg.register("alpha")(abs)
    for call in (reg.get, reg.spec, reg.check, reg.remove):
        with pytest.raises(UnknownName) as exc:
            call("gamma")
        assert str(exc.value) == "unknown widget 'gamma'; available: alpha, beta"  # not KeyError's quoted repr
        assert isinstance(exc.value, KeyError) and isinstance(exc.value, ValueError)
    with pytest.raises(UnknownName, match=r"unknown widget \['a'\]"):
        reg.get(["a"])  # an unhashable value from a params file is an unknown name, not a TypeError
    assert reg.check("alpha") == "alpha"


def test_declared_entries_load_on_first_get() -> None:
    reg: Registry = Registry("widget")
    reg.declare("dumps", "json:dumps", text=True)
    reg.declare("gone", "json:no_such_function")
    assert reg.names(text=True) == ["dumps"] and reg.spec("dumps").ref == "json:dumps"
    import json

    assert reg.get("dumps") is json.dumps
    with pytest.raises(ImportError, match="widget 'gone' is declared as 'json:no_such_function'"):
        reg.get("gone")
    with pytest.raises(ValueError, match="not 'package.module:attr'"):
        reg.declare("bad", "json.dumps")


def test_call_passes_the_options_the_signature_takes() -> None:
    reg: Registry = Registry("widget")

    @reg.register("scale")
    def scale(x, factor=2):
        return x * factor

    @reg.register("anything")
    def anything(x, **kw):
        return x, kw

    assert reg.call("scale", 3, factor=5) == 15
    assert reg.call("scale", 3, offset=1, shared={"offset"}) == 6  # a shared knob it does not take: dropped
    with pytest.raises(TypeError, match="widget 'scale' takes no option 'ofset'"):
        reg.call("scale", 3, ofset=1, shared={"offset"})
    assert reg.call("anything", 1, offset=2, shared={"offset"}) == (1, {"offset": 2})
    with pytest.raises(UnknownName, match="unknown widget 'scal'; available: anything, scale"):
        reg.call("scal", 3)


def test_plugin_declarations_hold_a_reference_and_read_only_metadata() -> None:
    decl = registry.Plugin("json:dumps", text=True)
    assert decl.ref == "json:dumps" and dict(decl.meta) == {"text": True}
    with pytest.raises(TypeError):
        decl.meta["text"] = False
    with pytest.raises(ValueError, match="not 'package.module:attr'"):
        registry.Plugin("json.dumps")


AGENTR1_GROUPS = {
    ep.group for ep in importlib.metadata.distribution("agentr1").entry_points if ep.group.startswith("agentr1.")
}


def test_every_group_of_pyproject_is_a_registry() -> None:
    assert AGENTR1_GROUPS == {reg.group for reg in CATALOGUE.values()}


@pytest.mark.parametrize("kind", sorted(CATALOGUE))
def test_every_declared_builtin_loads(kind: str) -> None:
    """Every entry point agentr1 declares is a name of its registry and resolves (a renamed or
    moved implementation fails here, not in the middle of a stage)."""
    reg = CATALOGUE[kind]
    declared = sorted(
        ep.name for ep in importlib.metadata.distribution("agentr1").entry_points if ep.group == reg.group
    )
    assert declared and declared == reg.names()
    for name in reg.names():
        assert callable(reg.get(name)), (kind, name)


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def test_the_metadata_builtins_declare_matches_their_objects() -> None:
    from agentr1.env.formats import ToolFormat
    from agentr1.env.tools import Tool
    from agentr1.retrieval.base import Retriever

    for name in registry.ESTIMATORS.names():
        meta, fn = registry.ESTIMATORS.spec(name).meta, registry.ESTIMATORS.get(name)
        assert set(meta) <= {"needs_values", "grouped", "stepwise", "label"} and isinstance(meta["label"], str), name
        assert bool(meta.get("needs_values")) == ("values" in _parameters(fn)), name  # a critic is built for it
        assert bool(meta.get("grouped")) == ("index" in _parameters(fn)), name
        assert bool(meta.get("stepwise")) == ("steps" in _parameters(fn)), name  # the trainer computes step groups
    for name in registry.KL_ESTIMATORS.names():
        meta = registry.KL_ESTIMATORS.spec(name).meta
        if "alias_of" in meta:
            assert registry.KL_ESTIMATORS.get(name) is registry.KL_ESTIMATORS.get(meta["alias_of"]), name
            assert "alias_of" not in registry.KL_ESTIMATORS.spec(meta["alias_of"]).meta
    for name in registry.TOOLS.names():
        cls = registry.TOOLS.get(name)
        assert issubclass(cls, Tool) and cls.name == name
        assert registry.tool_options(name) is cls.options and cls.options().model_dump() is not None
    for name in registry.FORMATS.names():
        assert issubclass(registry.FORMATS.get(name), ToolFormat) and registry.FORMATS.get(name).name == name
    for name in registry.DATASETS.names():
        assert {"records", "limit", "origin"} <= _parameters(registry.DATASETS.get(name)), name
    for name in registry.BACKENDS.names():
        assert "rollout_cfg" in _parameters(registry.BACKENDS.get(name)), name
    for name in registry.RETRIEVERS.names():
        cls = registry.RETRIEVERS.get(name)
        assert issubclass(cls, Retriever) and callable(cls.index_corpus) and callable(cls.open_index), name
    for reg in CATALOGUE.values():  # metadata is only declared where a registry reads it
        if reg not in (registry.ESTIMATORS, registry.KL_ESTIMATORS):
            assert all(not reg.spec(name).meta for name in reg.names()), reg


def test_loading_params_imports_no_torch(repo_root) -> None:
    """Validating every registry name of params.yaml imports no torch: the estimators' metadata
    comes from their declarations (agentr1.rl.plugins), not from agentr1.rl.advantages; the tool
    modules (no torch) are imported for their options models."""
    code = (
        "import sys; from agentr1.config import load_config; load_config('params.yaml'); "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('agentr1.rl.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['agentr1.rl.plugins']", out.stdout + out.stderr


def test_a_name_an_entry_point_declares_cannot_be_registered_again() -> None:
    with pytest.raises(ValueError, match="tool 'search' is already registered"):
        registry.TOOLS.register("search")(type("Other", (), {}))
    assert registry.TOOLS.get("search").__name__ == "SearchTool"
