"""The import rules of docs/ARCHITECTURE.md, checked on the source with ``ast``.

Every ``import`` and ``from ... import`` counts, at module level or inside a function (a lazy
import is still a dependency), except those under ``if TYPE_CHECKING:`` (types only, never run).

1. Layers, bottom to top: a module may import modules of its own layer and of the layers below,
   never one above.
2. The domain packages never import ``mlflow`` or ``prefect``: only ``agentr1.tracking`` and
   ``agentr1.stages`` (and the flows outside the package) talk to them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "agentr1"

# bottom to top; the names are agentr1's top-level modules and packages
LAYERS: list[set[str]] = [
    {"errors", "io", "numerics", "registry", "yamlparams", "config"},  # the foundation: no domain knowledge
    {"data"},
    {"retrieval"},
    {"models"},
    {"env"},
    {"rollout"},
    {"eval"},
    {"lm"},  # language-model training (pretraining, SFT, the lr schedule): models, rollout's collate
    {"rl"},  # uses lm's optimizer and schedule
    {"report"},
    {"tracking"},  # MLflow and S3 at the edge
    {"stages", "profiles", "pipelines", "cli"},  # the DVC stages and the commands (pipelines: a profile as its own)
]
DOMAIN = {"data", "retrieval", "models", "env", "rollout", "eval", "lm", "rl", "report"}
EDGE_ONLY = {"mlflow", "prefect"}  # only tracking/stages (and flows/) may import these


def layer_of(part: str) -> int:
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    raise AssertionError(f"agentr1.{part} is in no layer of tests/test_import_rules.py: add it to LAYERS")


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imported_modules(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every absolute import in ``source`` outside ``TYPE_CHECKING``."""
    tree = ast.parse(source)
    skip = _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "agentr1":  # from agentr1 import stages
                found += [(node.lineno, f"agentr1.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def violations(modules: dict[str, str]) -> list[str]:
    """The broken rules in ``{"agentr1.pkg.mod": source}``, one line each."""
    out = []
    for name, source in sorted(modules.items()):
        part = name.split(".")[1]
        here = layer_of(part)
        for line, target in imported_modules(source):
            top = target.split(".")[0]
            if top in EDGE_ONLY and part in DOMAIN:
                out.append(f"{name}:{line} imports {target}: domain package agentr1.{part} must not import {top}")
            elif top == "agentr1" and "." in target:
                dst = target.split(".")[1]
                if dst != part and layer_of(dst) > here:
                    out.append(f"{name}:{line} imports {target}: agentr1.{dst} is above agentr1.{part}")
    return out


def package_sources(root: Path = SRC) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        if name.count(".") == 0:  # agentr1/__init__.py
            continue
        out[name] = path.read_text(encoding="utf-8")
    return out


def test_the_package_keeps_its_import_rules() -> None:
    found = violations(package_sources())
    assert not found, "import rules broken (docs/ARCHITECTURE.md):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "name, source, why",
    [
        ("agentr1.rl.trainer", "def f():\n    import mlflow\n", "must not import mlflow"),
        ("agentr1.data.prepare", "from prefect import flow\n", "must not import prefect"),
        ("agentr1.env.tools", "from agentr1.stages import run\n", "agentr1.stages is above agentr1.env"),
        ("agentr1.rollout.engine", "from agentr1 import rl\n", "agentr1.rl is above agentr1.rollout"),
        ("agentr1.config", "from agentr1.rl.advantages import ESTIMATORS\n", "agentr1.rl is above agentr1.config"),
    ],
)
def test_a_deliberate_violation_is_caught(name: str, source: str, why: str) -> None:
    found = violations({name: source})
    assert len(found) == 1 and why in found[0], found


def test_what_the_rules_allow() -> None:
    ok = {
        "agentr1.tracking.run": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentr1.stages import run\n"
        "import mlflow\nfrom agentr1.rollout.trajectory import Trajectory\n",
        "agentr1.stages.train": "import mlflow\nfrom agentr1.rl.trainer import Trainer\nfrom agentr1 import tracking\n",
        "agentr1.rl.trainer": "from agentr1.rl.losses import x\nfrom agentr1.eval.quick import y\nimport torch\n",
    }
    assert violations(ok) == []
