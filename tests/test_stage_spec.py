"""Stages declare themselves: ``SPEC`` in each stage module, read from its source without importing
it, gives the subcommands of ``agentr1``, ``stages.STAGES`` and ``track.LOCK_KINDS``; a new stage
module is found by the package scan alone."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentr1.stages import STAGES
from agentr1.stages.spec import Arg, SpecError, StageSpec, add_arguments, discover, read_spec

PIPELINE = ["prepare", "validate", "index", "pretrain", "sft", "sft_reference", "train", "evaluate", "report"]


def test_the_stages_are_the_pipeline_in_order_with_their_lock_keys() -> None:
    from agentr1.stages.track import LOCK_KINDS

    assert list(STAGES) == PIPELINE
    assert LOCK_KINDS == {
        **{s: (s, None) for s in PIPELINE if s not in ("train", "evaluate")},
        "train": ("train", "run"),
        "evaluate": ("evaluate", "policy"),
        "evaluate_baseline": ("evaluate", "policy"),
    }


@pytest.mark.parametrize("stage", PIPELINE)
def test_the_spec_read_from_source_is_the_imported_one(stage: str) -> None:
    """What the package scan reads without importing equals the module's own ``SPEC`` object,
    and the module has what ``agentr1`` and ``agentr1 track`` call."""
    module_name, spec = STAGES[stage]
    module = importlib.import_module(module_name)
    assert module.SPEC == spec and spec.name == stage
    assert callable(module.run) and callable(module.log_outputs)


def test_the_parser_reads_no_stage_module() -> None:
    """``agentr1 --help`` and a light stage never import torch nor the stage modules."""
    code = (
        "import sys; from agentr1.cli import build_parser; p = build_parser(); "
        "p.parse_args(['train', '--run-name', 'ppo', '--resume']); "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('agentr1.stages.') "
        "and m.rsplit('.', 1)[1] in " + repr(PIPELINE) + "))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cli_arguments_come_from_the_specs() -> None:
    from agentr1.cli import build_parser

    args = build_parser().parse_args(["train", "--run-name", "ppo", "--resume"])
    assert (args.command, args.run, args.resume) == ("train", "ppo", True)
    assert build_parser().parse_args(["evaluate", "--policy", "cold_start"]).policy == "cold_start"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate"])  # --policy is required


def test_exclusive_arguments_share_one_group() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(
        parser,
        [
            Arg("--a", group="g", action="store_true"),
            Arg("--b", group="g", action="store_true"),
            Arg("--c", action="store_true"),
        ],
    )
    assert parser.parse_args(["--a", "--c"]).a
    with pytest.raises(SystemExit):
        parser.parse_args(["--a", "--b"])


def _package(root: Path, name: str, modules: dict[str, str]) -> str:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, source in modules.items():
        (pkg / f"{mod}.py").write_text(textwrap.dedent(source))
    return name


def test_a_new_stage_module_is_found_by_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(
        tmp_path,
        "pkg_new_stage",
        {
            "distill": """
            import torch  # never imported by the scan
            from agentr1.stages.spec import Arg, StageSpec

            SPEC = StageSpec("distill", "distil the " "policy", order=65,
                             args=(Arg("--teacher", default=None, help="a run"),), lock={"distill": "teacher"})
        """,
            "first": 'SPEC = StageSpec("first", "the first", order=1)\n',
            "helpers": "X = 1\n",  # no SPEC: not a stage
        },
    )
    found = discover(name)
    assert list(found) == ["first", "distill"] and found["distill"][0] == f"{name}.distill"
    spec = found["distill"][1]
    assert spec == StageSpec(
        "distill", "distil the policy", 65, (Arg("--teacher", default=None, help="a run"),), {"distill": "teacher"}
    )
    assert found["first"][1].lock == {"first": None}
    assert f"{name}.distill" not in sys.modules  # read from its source, never imported


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ('SPEC = StageSpec("x", HELP, order=1)\n', "literal declaration"),
        ('SPEC = StageSpec("x", f"{1}", order=1, **{})\n', r"no \*args or \*\*kwargs"),
        ('SPEC = {"name": "x"}\n', "must be a StageSpec"),
    ],
)
def test_a_spec_that_is_no_literal_is_refused_naming_the_module(tmp_path: Path, source: str, words: str) -> None:
    path = tmp_path / "bad.py"
    path.write_text(source)
    with pytest.raises(SpecError, match=words) as err:
        read_spec(path, "pkg.bad")
    assert "pkg.bad" in str(err.value)


def test_two_modules_declaring_one_stage_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(
        tmp_path,
        "pkg_twice",
        {"a": 'SPEC = StageSpec("x", "a", order=1)\n', "b": 'SPEC = StageSpec("x", "b", order=2)\n'},
    )
    with pytest.raises(SpecError, match="stage 'x' is declared by both pkg_twice.a and pkg_twice.b"):
        discover(name)
