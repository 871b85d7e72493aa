"""The one Registry type (agentr1.registry) and the catalogue of built-in plug-ins."""

from __future__ import annotations

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


@pytest.mark.parametrize("kind", sorted(CATALOGUE))
def test_every_declared_builtin_loads(kind: str) -> None:
    """A renamed or moved implementation fails here, not in the middle of a stage."""
    from agentr1.env.formats import ToolFormat
    from agentr1.env.tools import Tool

    reg = CATALOGUE[kind]
    assert reg.names()
    for name in reg.names():
        obj = reg.get(name)
        assert callable(obj), (kind, name)
        if reg is registry.TOOLS:
            assert issubclass(obj, Tool) and obj.name == name
        if reg is registry.FORMATS:
            assert issubclass(obj, ToolFormat) and obj.name == name
        if reg is registry.KL_ESTIMATORS and "alias_of" in reg.spec(name).meta:
            assert obj is reg.get(reg.spec(name).meta["alias_of"])


def test_loading_params_imports_no_implementation(repo_root) -> None:
    """Validating every registry name of params.yaml imports neither torch nor the plug-ins."""
    code = ("import sys; from agentr1.config import load_config; load_config('params.yaml'); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('agentr1.rl', 'agentr1.env'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_built_in_tools_declare_the_options_their_classes_use() -> None:
    """A declared tool's ``options`` metadata (read by config validation without importing the
    tool) is the model its class declares, and names a loadable pydantic model."""
    for name in registry.TOOLS.names():
        assert isinstance(registry.TOOLS.spec(name).meta.get("options"), str), name
        assert registry.tool_options(name) is registry.TOOLS.get(name).options, name
