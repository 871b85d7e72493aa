"""The promotion gate: does the challenger beat the champion beyond the confidence interval?

A pure function over evaluation summaries, so the rule is tested on hand cases and the registry
code (:mod:`agentr1.tracking.registry`) only gathers the inputs and moves the alias.

Rule (higher metric = better, e.g. EM):

1. no champion yet -> promote (the first evaluated policy becomes champion);
2. challenger *is* the champion (same version) -> keep;
3. different metrics or different evaluation data (``eval_data`` fingerprints) -> keep: scores
   on different questions are not comparable;
4. promote only when the intervals do not overlap: ``challenger.ci_lower > champion.ci_upper``
   (conservative: two disjoint 95% bootstrap intervals); otherwise keep ("within the CI").

The inputs are checked first (:class:`GateStats`): every number finite, the interval around the
value and, for a share such as EM (:func:`is_proportion`), everything in [0, 1], so a tampered or
broken metric (EM 1e308, NaN) is an error, never a promotion.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentr1.errors import StageError

Decision = Literal["promote", "keep"]

# the scores that are shares of episodes, in [0, 1], with their CI bounds: the answer scores
# (agentr1.eval.metrics.SCORES), the per-episode rates of MEANS (format_ok, answered,
# early_answer) and the sampled ones (agentr1.eval.splits.sampled_flat: sampled_em, pass_at_<k>).
# Not here: n, tool_calls, turns (counts) and reward (in [-1, 1] or wider, by reward settings).
PROPORTIONS = ("em", "f1", "subem", "format_ok", "answered", "early_answer", "sampled_em")
_PROPORTION = re.compile(rf"(?:{'|'.join(PROPORTIONS)}|pass_at_\d+)(?:_ci_lower|_ci_upper)?")


def is_proportion(metric: str) -> bool:
    """Whether metric ``<split>/<score>`` (or a bare ``<score>``, or its ``_ci_lower``/``_ci_upper``)
    is a share of episodes, so its values lie in [0, 1] (:data:`PROPORTIONS`)."""
    return _PROPORTION.fullmatch(metric.rpartition("/")[2]) is not None


@dataclass(frozen=True)
class GateStats:
    """One model's score on the gating metric: point estimate, 95% CI, and the fingerprint of
    the evaluation data it was computed on; ``version`` is the registry version (optional)."""

    metric: str
    value: float
    ci_lower: float
    ci_upper: float
    eval_data: str = ""
    version: str | None = None

    def __post_init__(self) -> None:
        share = is_proportion(self.metric)
        for name in ("value", "ci_lower", "ci_upper"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{self.metric}: {name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{self.metric}: {name} must be finite, got {value}")
            if share and not 0.0 <= value <= 1.0:
                raise ValueError(f"{self.metric}: {name} {value} is outside [0, 1] (a share of episodes)")
        if not self.ci_lower <= self.value <= self.ci_upper:
            raise ValueError(
                f"{self.metric}: CI [{self.ci_lower}, {self.ci_upper}] does not contain the value {self.value}"
            )


def gate(challenger: GateStats, champion: GateStats | None) -> tuple[Decision, str]:
    """``("promote" | "keep", reason)`` for moving ``champion`` to ``challenger`` (module rule)."""
    m = challenger.metric
    if champion is None:
        return "promote", f"no champion yet: challenger ({m} {challenger.value:.4f}) becomes the first champion"
    if challenger.version is not None and challenger.version == champion.version:
        return "keep", f"challenger is already the champion (version {champion.version})"
    if champion.metric != m:
        return "keep", f"metrics differ (challenger {m}, champion {champion.metric}): not comparable"
    if challenger.eval_data != champion.eval_data:
        return "keep", (
            f"evaluation data differ (challenger {challenger.eval_data or '?'}, champion "
            f"{champion.eval_data or '?'}): re-evaluate both on the same data"
        )
    summary = (
        f"challenger {m} {challenger.value:.4f} [{challenger.ci_lower:.4f}, {challenger.ci_upper:.4f}] vs "
        f"champion {champion.value:.4f} [{champion.ci_lower:.4f}, {champion.ci_upper:.4f}]"
    )
    if challenger.ci_lower > champion.ci_upper:
        return "promote", f"beats the champion beyond the CI: {summary}"
    return "keep", f"not beyond the CI (intervals overlap or challenger is worse): {summary}"


def check_gate_metric(metric: str, splits: Sequence[str], scores: Sequence[str]) -> None:
    """The gate reads ``<split>/<score>`` (+ CI) of ``metric`` from an evaluation of ``splits``
    with the scores ``scores``: :class:`StageError`, before any work, when it would not be there."""
    split, _, name = metric.partition("/")
    if split not in splits or name not in scores:
        raise StageError(
            f"tracking.gate_metric {metric!r} is not produced by this evaluation (evaluate.splits "
            f"{splits}, metrics {list(scores)}): add the split, pick another metric, or set "
            "evaluate.register: false"
        )
