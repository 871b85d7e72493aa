"""``report``: the tables, plots and summary of stage ``report``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from agentr1.config.base import _distinct_splits, _Section
from agentr1.config.evaluate import BootstrapConfig


class ReportConfig(_Section):
    """Stage ``report`` (``agentr1.stages.report``): tables, plots and a summary from the
    evaluations in ``evaluate.out_dir`` into ``out_dir``. ``splits``: the evaluated splits
    reported (each a column; the average is their unweighted mean); ``metric``: the
    per-question score compared (``em`` | ``f1`` | ``subem``); ``bootstrap``: the two-level
    bootstrap over seeds x questions (``agentr1.report.stats``); ``min_seeds``: the training seeds
    each RL row of a difference needs for a verdict (fewer: "not judged"; the baselines are one SFT
    run each and need none); ``pair_seeds``: ``false`` (the default) draws each row's seeds on
    their own; ``true`` resamples one seed draw for both rows of a difference trained on the same
    seeds (a blocked design, as the questions are paired: narrower where a seed is slow in every
    method, but with 3 seeds it leans on the method x seed interaction of 3 values, and on two
    disjoint seed sets it flipped 2 verdicts of 57 where drawing each row's seeds on its own
    flipped none: bench/RESULTS.md sections 25-26)."""

    out_dir: str = "reports"
    splits: list[str] = Field(default_factory=lambda: ["test", "ood"])
    metric: Literal["em", "f1", "subem"] = "em"
    bootstrap: BootstrapConfig = BootstrapConfig()  # the report's own, independent of evaluate.bootstrap
    min_seeds: int = Field(3, ge=1)
    pair_seeds: bool = False

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, v: list[str]) -> list[str]:
        return _distinct_splits(v)
