"""Stage ``sft_reference``: the reference cold start, the sft stage with params ``sft_reference``.

The cold start of stage ``sft`` imitates the demonstrator that ``sft.oracle_noise`` states; the
reference cold start is the same SFT (base, demonstrations, steps, optimizer) with the keys that
``sft_reference`` overrides - a near-perfect demonstrator, its own ``out_dir`` and
``report_dir`` - so that the report can answer "why not start from the better demonstrator":
its greedy EM (``evaluate_baseline@cold_start_reference``) and what RL does from it (a named run
with ``cold_start: reference``). Everything else is :mod:`agentr1.stages.sft` on
:meth:`agentr1.config.Config.reference_config`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentr1.errors import StageError
from agentr1.stages import sft
from agentr1.stages.context import StageContext
from agentr1.stages.spec import StageSpec

SPEC = StageSpec(
    "sft_reference",
    "the reference cold start: the sft stage with params sft_reference (a better demonstrator)",
    order=55,
)


def _reference(ctx: StageContext) -> StageContext:
    if ctx.cfg.sft_reference is None:
        raise StageError(
            "params define no sft_reference (the keys of sft the reference demonstrator changes, with its "
            "own out_dir and report_dir): add it, or drop the sft_reference stage from dvc.yaml"
        )
    return replace(ctx, cfg=ctx.cfg.reference_config())


def run(ctx: StageContext, args: Any = None) -> dict:
    """:func:`agentr1.stages.sft.run` with the reference's ``sft`` section."""
    return sft.run(_reference(ctx), args)


def log_outputs(ctx: StageContext, args: Any = None, replay: bool = False) -> None:
    """:func:`agentr1.stages.sft.log_outputs` of the reference's report."""
    sft.log_outputs(_reference(ctx), args, replay)
