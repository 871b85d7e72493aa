"""Command line: one subcommand per DVC stage (``agentr1 <stage> [--params params.yaml]``, run by
:func:`agentr1.stages.run` inside its stage context) and the commands around them.

The subcommands, their help lines and arguments come from the stages' declarations
(:data:`agentr1.stages.STAGES`: each stage module's ``SPEC``, read without importing it) and
from :data:`COMMANDS`. Stage implementations are imported lazily so that ``agentr1 --help`` and
light stages never pay for torch, great_expectations or mlflow imports they do not use.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from dataclasses import dataclass
from typing import Any

from agentr1.config import ConfigError, load_config, parse_sets
from agentr1.errors import StageError
from agentr1.io import check_destination
from agentr1.numerics import pin_cpu_numerics
from agentr1.stages import STAGES
from agentr1.stages import run as run_stage
from agentr1.stages.spec import Arg, add_arguments


@dataclass(frozen=True)
class Command:
    """A command that is no DVC stage: ``target`` is ``"module:function"``, called with
    ``(cfg, args)``; ``help`` its help line; ``args`` its arguments. The DVC stages declare
    themselves (``SPEC`` of their module, :data:`agentr1.stages.STAGES`), each run by
    :func:`agentr1.stages.run`."""

    target: str
    help: str
    args: tuple[Arg, ...] = ()


def port_number(text: str) -> int:
    """``--port``: an integer 0..65535 (0 = any free port); else argparse's usage error."""
    try:
        port = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port number: give an integer 0..65535 (0 = any free port)"
        ) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range: a port is 0..65535 (0 = any free port)")
    return port


_MODEL = Arg("--model", default=None, help="registered model (default: tracking.registered_model)")
_MODELS = Arg(
    "--model",
    nargs="+",
    default=None,
    metavar="NAME",
    help="registered model(s) (default: tracking.registered_model); several: their aliases side by side, "
    "e.g. --model agentr1-policy agentr1-policy-smol --aliases champion",
)
COMMANDS: dict[str, Command] = {
    "serve-retriever": Command(
        "agentr1.retrieval.server:run_server",
        "serve the index over HTTP (POST /retrieve)",
        (
            Arg("--host", default=None, help="bind address (default from params: 127.0.0.1)"),
            Arg(
                "--port", type=port_number, default=None, help="0..65535; 0 = any free port (default from params: 8765)"
            ),
        ),
    ),
    "compare": Command(
        "agentr1.tracking.compare:run_compare",
        "compare MLflow runs or registry aliases (table + PNG)",
        (
            _MODELS,
            Arg("--runs", group="pick", nargs="+", metavar="RUN_ID", help="MLflow run ids to compare"),
            Arg(
                "--aliases",
                group="pick",
                nargs="+",
                default=["champion", "challenger"],
                help="registry aliases (default: champion challenger)",
            ),
            Arg(
                "--metric",
                action="append",
                default=None,
                help="metric column, repeatable (default: tracking.gate_metric)",
            ),
            Arg("--out", default="mlflow/compare.png", help="PNG of the first metric (default: mlflow/compare.png)"),
        ),
    ),
    "promote": Command(
        "agentr1.tracking.compare:run_promote",
        "move the 'champion' alias if the challenger beats it beyond the CI",
        (
            _MODEL,
            Arg("--metric", default=None, help="gating metric (default: tracking.gate_metric)"),
            Arg(
                "--version",
                default=None,
                metavar="N",
                help="gate version N instead of the one the 'challenger' alias names",
            ),
            Arg("--dry-run", action="store_true", help="report the decision without moving aliases"),
        ),
    ),
    "profile": Command(
        "agentr1.profiles:run_profile",
        "merge profiles/NAME.yaml onto params.yaml, validate; --dry-run, --print-set, --write",
        (
            Arg(
                "name",
                metavar="NAME",
                help="nano (params.yaml as is), a profile in profiles/ (smol, paper) or a .yaml path",
            ),
            Arg(
                "--print-set",
                group="mode",
                action="store_true",
                help='the -S arguments of `dvc exp run` (shell-quoted): eval "dvc exp run -n NAME $(agentr1 profile NAME --print-set)"',
            ),
            Arg(
                "--dry-run",
                group="mode",
                action="store_true",
                help="the resolved config and every stage's command, in order",
            ),
            Arg(
                "--write", group="mode", metavar="PATH", default=None, help="write the merged, validated params to PATH"
            ),
            Arg(
                "--nproc-per-node",
                type=int,
                default=None,
                metavar="N",
                help="processes per node for train (default: the profile's launch.nproc_per_node, else 1)",
            ),
        ),
    ),
    "pipeline": Command(
        "agentr1.pipelines:run_pipeline",
        "write pipelines/NAME/{params,dvc}.yaml: profile NAME as a DVC pipeline of its own, beside the default's",
        (
            Arg("name", metavar="NAME", help="a profile in profiles/ (smol, ...)"),
            Arg("--check", action="store_true", help="write nothing; exit 1 when the committed files are stale"),
        ),
    ),
    "track": Command(
        "agentr1.stages.track:run_track",
        "log to MLflow every dvc.lock stage it lacks, from the outputs (after dvc repro/pull/exp apply; idempotent)",
        (Arg("--dry-run", action="store_true", help="print what would be logged, write nothing"),),
    ),
}


# DVC stage -> the params fields of the folders it writes, each with whether the folder is swapped in
# whole (written through a temporary sibling: its parent must take new entries) or written into.
# Checked before the stage starts (:func:`check_stage_destinations`); a stage not listed here gets
# its own section's ``<stage>.out_dir`` checked, when it has one.
STAGE_DESTINATIONS: dict[str, tuple[tuple[str, bool], ...]] = {
    "prepare": (("data.processed_dir", True),),
    "validate": (("validate.report_dir", False),),
    "index": (("retrieval.index_dir", True), ("retrieval.report_dir", False)),
    "pretrain": (("pretrain.out_dir", True), ("pretrain.report_dir", False)),
    "sft": (("sft.out_dir", True), ("sft.report_dir", True)),
    "train": (("train.out_dir", False),),
    "evaluate": (("evaluate.out_dir", False),),
    "report": (("report.out_dir", False),),
}


def _field(cfg: Any, dotted: str) -> Any:
    """``cfg.a.b`` for ``"a.b"``; a section stored under a trailing ``_`` (``validate_``, whose plain
    name is pydantic's ``validate`` method) is read there first."""
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part + "_") if hasattr(node, part + "_") else getattr(node, part)
    return node


def check_stage_destinations(stage: str, cfg: Any, args: Any = None) -> None:
    """:class:`StageError` naming the field and path when a folder ``stage`` writes
    (:data:`STAGE_DESTINATIONS`) or, with tracking on a local store, the artifact root could not
    be written: before the stage's work (an evaluation's rollouts), not after it."""
    if stage == "train" and getattr(args, "run", None) and cfg.is_run(args.run):
        cfg = cfg.for_run(args.run)  # a run may set its own train.out_dir
    default = ((f"{stage}.out_dir", False),) if hasattr(getattr(cfg, stage, None), "out_dir") else ()
    for dotted, replaced in STAGE_DESTINATIONS.get(stage, default):
        check_destination(_field(cfg, dotted), dotted, replaced=replaced)
    check_artifact_root(cfg)


def check_artifact_root(cfg: Any) -> None:
    """The folder a local (sqlite/file) MLflow store keeps artifacts in must take new entries
    (``AGENTR1_ARTIFACT_ROOT`` when set, else ``tracking.artifact_root``); a server decides its own."""
    from agentr1.tracking.uri import artifact_root, resolve_tracking_uri

    if not cfg.tracking.enabled or resolve_tracking_uri(cfg).startswith(("http://", "https://")):
        return
    check_destination(*artifact_root(cfg))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentr1", description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one param by dotted key path, e.g. --set env.max_turns=3 (repeatable)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, spec) in STAGES.items():
        add_arguments(sub.add_parser(name, help=spec.help), spec.args)
    for name, command in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=command.help), command.args)
    return parser


def configure_logging(verbose: bool) -> None:
    """INFO (DEBUG with ``--verbose``) to stderr, unless logging is configured already. The level is
    also the handler's: a library that sets its own logger to DEBUG (``bm25s`` does when imported)
    would otherwise print its debug lines among the stage's INFO lines. ``faiss.loader`` logs at INFO
    every SIMD build it tries and fails to import (the faiss-cpu wheel ships only the generic one:
    ``ModuleNotFoundError`` lines at every dense index load, issue 49): kept to WARNING unless
    ``--verbose``."""
    level = logging.DEBUG if verbose else logging.INFO
    root = logging.getLogger()
    fresh = not root.handlers
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("faiss.loader").setLevel(level if verbose else logging.WARNING)
    if fresh:
        for handler in root.handlers:
            handler.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    try:
        pin_cpu_numerics()  # before any stage imports torch (agentr1.numerics)
    except ValueError as exc:
        print(f"agentr1: {exc}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        overrides = parse_sets(args.set)
        cfg = load_config(args.params, overrides)
    except ConfigError as exc:
        print(f"agentr1: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command in STAGES:
            check_stage_destinations(args.command, cfg, args)
            run_stage(args.command, cfg, args)
        else:
            if args.command == "track":
                check_artifact_root(cfg)
            module_name, func_name = COMMANDS[args.command].target.split(":")
            getattr(importlib.import_module(module_name), func_name)(cfg, args)
    except (ConfigError, StageError) as exc:
        print(f"agentr1 {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
