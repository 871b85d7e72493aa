"""Command line: one subcommand per DVC stage (``agentr1 <stage> [--params params.yaml]``, run by
:func:`agentr1.stages.run` inside its stage context) and the commands around them.

Stage implementations are imported lazily so that ``agentr1 --help`` and light stages never pay
for torch, great_expectations or mlflow imports they do not use.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from agentr1.config import ConfigError, load_config, parse_sets
from agentr1.errors import StageError
from agentr1.numerics import pin_cpu_numerics
from agentr1.stages import STAGES
from agentr1.stages import run as run_stage

# the commands that are no DVC stage: subcommand -> ("module:function", help); each function
# takes (cfg, args). The DVC stages are agentr1.stages.STAGES, each run by agentr1.stages.run.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve-retriever": ("agentr1.retrieval.server:run_server", "serve the index over HTTP (POST /retrieve)"),
    "compare": ("agentr1.tracking.compare:run_compare", "compare MLflow runs or registry aliases (table + PNG)"),
    "promote": ("agentr1.tracking.compare:run_promote", "move the 'champion' alias if the challenger beats it beyond the CI"),
    "profile": ("agentr1.profiles:run_profile", "merge profiles/NAME.yaml onto params.yaml, validate; --dry-run, --print-set, --write"),
    "track": ("agentr1.stages.track:run_track",
              "log to MLflow every dvc.lock stage it lacks, from the outputs (after dvc repro/pull/exp apply; idempotent)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentr1", description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one param by dotted key path, e.g. --set env.max_turns=3 (repeatable)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in {**STAGES, **COMMANDS}.items():
        sp = sub.add_parser(name, help=help_text)
        if name == "serve-retriever":
            sp.add_argument("--host", default=None, help="bind address (default from params: 127.0.0.1)")
            sp.add_argument("--port", type=int, default=None)
        if name in ("compare", "promote"):
            sp.add_argument("--model", default=None, help="registered model (default: tracking.registered_model)")
        if name == "compare":
            pick = sp.add_mutually_exclusive_group()
            pick.add_argument("--runs", nargs="+", metavar="RUN_ID", help="MLflow run ids to compare")
            pick.add_argument("--aliases", nargs="+", default=["champion", "challenger"], help="registry aliases (default: champion challenger)")
            sp.add_argument("--metric", action="append", default=None, help="metric column, repeatable (default: tracking.gate_metric)")
            sp.add_argument("--out", default="mlflow/compare.png", help="PNG of the first metric (default: mlflow/compare.png)")
        if name == "promote":
            sp.add_argument("--metric", default=None, help="gating metric (default: tracking.gate_metric)")
            sp.add_argument("--dry-run", action="store_true", help="report the decision without moving aliases")
        if name == "track":
            sp.add_argument("--dry-run", action="store_true", help="print what would be logged, write nothing")
        if name == "train":
            sp.add_argument("--run", "--run-name", dest="run", default=None,
                            help="named run from params `runs` (default: the train section as is); under torchrun "
                                 "spell it --run-name (torchrun itself claims the prefix --run)")
            sp.add_argument("--resume", action="store_true", help="continue from <train.out_dir>/<run>/state")
        if name == "evaluate":
            sp.add_argument("--policy", required=True, metavar="NAME",
                            help="a named run of params `runs`, or a baseline: cold_start, base_tool_call, naive_rag")
        if name == "profile":
            sp.add_argument("name", metavar="NAME", help="nano (params.yaml as is), a profile in profiles/ (smol, paper) or a .yaml path")
            mode = sp.add_mutually_exclusive_group()
            mode.add_argument("--print-set", action="store_true",
                              help='the -S arguments of `dvc exp run` (shell-quoted): eval "dvc exp run -n NAME $(agentr1 profile NAME --print-set)"')
            mode.add_argument("--dry-run", action="store_true", help="the resolved config and every stage's command, in order")
            mode.add_argument("--write", metavar="PATH", default=None, help="write the merged, validated params to PATH")
            sp.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                            help="processes per node for train (default: the profile's launch.nproc_per_node, else 1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        pin_cpu_numerics()  # before any stage imports torch (agentr1.numerics)
    except ValueError as exc:
        print(f"agentr1: {exc}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        overrides = parse_sets(args.set)
        cfg = load_config(args.params, overrides)
    except ConfigError as exc:
        print(f"agentr1: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command in STAGES:
            run_stage(args.command, cfg, args)
        else:
            module_name, func_name = COMMANDS[args.command][0].split(":")
            getattr(importlib.import_module(module_name), func_name)(cfg, args)
    except (ConfigError, StageError) as exc:
        print(f"agentr1 {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
