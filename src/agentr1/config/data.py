"""``data``: the synthetic world (families, questions, type mix, hops), the real datasets and the
tool questions of ``task: tools``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from agentr1.config.base import _Section
from agentr1.registry import DATASETS


class SplitCounts(_Section):
    train: int = Field(4000, ge=0)
    dev: int = Field(200, ge=0)
    test: int = Field(600, ge=0)
    ood: int = Field(200, ge=0)


class TypeMix(_Section):
    """Fractions of in-domain (train/dev/test) questions per type; they must sum to 1."""

    bridge: float = Field(0.3, ge=0, le=1)
    comparison: float = Field(0.25, ge=0, le=1)
    compositional: float = Field(0.25, ge=0, le=1)
    inference: float = Field(0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> TypeMix:
        total = self.bridge + self.comparison + self.compositional + self.inference
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"type fractions must sum to 1 (got {total:.4f})")
        return self


class SyntheticConfig(_Section):
    """The contamination-free synthetic world (see ``agentr1.data.synthetic``).

    ``families`` is the number of independent entity clusters (a family tree plus the cities,
    companies and films around it) generated for each split; clusters of different splits share
    no entity, so dev/test/ood questions are about entities no training question mentions.
    ``train_chains``: the share of train questions that are 3-hop chains of templates the ood
    split does not use (``agentr1.data.questions.TRAIN_CHAIN_TEMPLATES``), so that training
    reaches past 2 hops; ``types`` splits the rest (and all of dev and test).
    """

    families: SplitCounts = SplitCounts(train=600, dev=60, test=60, ood=60)
    questions: SplitCounts = SplitCounts()
    types: TypeMix = TypeMix()
    ood_hops: list[int] = Field(default_factory=lambda: [3, 4])
    distractor_sentences: int = Field(2, ge=0, le=10)
    yes_no_fraction: float = Field(0.3, ge=0, le=1)
    train_chains: float = Field(
        0.1, ge=0, le=0.5
    )  # share of train questions that are 3-hop chains the ood split never asks

    @field_validator("ood_hops")
    @classmethod
    def _ood_hops(cls, v: list[int]) -> list[int]:
        if not v or any(h not in (3, 4) for h in v):
            raise ValueError("ood_hops must be a non-empty subset of [3, 4]")
        return v


class _Range(_Section):
    """An inclusive ``[min, max]`` range of integers (``min <= max``)."""

    min: int
    max: int

    @model_validator(mode="after")
    def _ordered(self) -> _Range:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class HopRange(_Range):
    """Allowed hop counts (supporting passages per question); ``min: 0`` admits questions that need
    no search (arithmetic word problems, GSM8K)."""

    min: int = Field(1, ge=0)
    max: int = Field(4, ge=1)


class SplitRatios(_Section):
    train: float = Field(0.8, ge=0, le=1)
    dev: float = Field(0.1, ge=0, le=1)
    test: float = Field(0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitRatios:
        total = self.train + self.dev + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"split ratios must sum to 1 (got {total:.4f})")
        return self


DatasetName = Annotated[str, AfterValidator(DATASETS.check)]


class RealSource(_Section):
    """One real dataset to load. ``path`` = a local file in the dataset's original format;
    without it the dataset is read from the hub through ``datasets`` (``hub_id``/``hub_config``/
    ``hub_split``). ``split: auto`` divides it by ``data.real.ratios``."""

    dataset: DatasetName
    split: Literal["train", "dev", "test", "ood", "auto"] = "auto"
    path: str | None = None
    hub_id: str | None = None
    hub_config: str | None = None
    hub_split: str = "validation"
    limit: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _has_location(self) -> RealSource:
        if self.path is None and self.hub_id is None:
            raise ValueError("set either path (local file) or hub_id (dataset hub id)")
        return self


class RealConfig(_Section):
    sources: list[RealSource] = Field(default_factory=list)
    ratios: SplitRatios = SplitRatios()
    corpus: str | None = None  # FlashRAG/Search-R1 corpus jsonl; else built from the contexts


class SmallRange(_Range):
    """An inclusive range of small counts (operations per problem, digits per operand)."""

    min: int = Field(2, ge=1, le=6)
    max: int = Field(4, ge=1, le=6)


class ToolQuestionsConfig(_Section):
    """Questions of ``data.task: tools`` added to each split of the synthetic world
    (:mod:`agentr1.data.toolquestions`): ``arithmetic`` word problems with fresh numbers
    (``operations`` arithmetic operations each, operands of ``digits`` digits) and ``multi_tool``
    questions about the world's years (search the entities, then calculate)."""

    arithmetic: SplitCounts = SplitCounts(train=0, dev=0, test=0, ood=0)
    multi_tool: SplitCounts = SplitCounts(train=0, dev=0, test=0, ood=0)
    operations: SmallRange = SmallRange()
    digits: SmallRange = SmallRange(min=3, max=4)


# Keys added after the nano results were committed: left out of dumps (config hashes, MLflow
# params) while at their defaults, so the default configuration hashes as it did before.
_NEW_DATA_KEYS = ("task", "tool_questions")


class DataConfig(_Section):
    """``task``: ``multihop`` (the synthetic world's multi-hop questions, or the real sources) or
    ``tools`` (the synthetic world's questions plus ``tool_questions``: arithmetic and multi-tool
    questions for ``env.tools: [search, calculator]``)."""

    source: Literal["synthetic", "real"] = "synthetic"
    task: Literal["multihop", "tools"] = "multihop"
    processed_dir: str = "data/processed"
    hops: HopRange = HopRange()
    synthetic: SyntheticConfig = SyntheticConfig()
    tool_questions: ToolQuestionsConfig = ToolQuestionsConfig()
    real: RealConfig = RealConfig()

    @model_validator(mode="after")
    def _real_has_sources(self) -> DataConfig:
        if self.source == "real" and not self.real.sources:
            raise ValueError("source is 'real' but data.real.sources is empty: add at least one")
        if self.task == "tools" and self.source != "synthetic":
            raise ValueError(
                "task 'tools' builds its questions in the synthetic world: set data.source: synthetic "
                "(GSM8K is a real source: data.real.sources with dataset: gsm8k, task: multihop)"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        for key in _NEW_DATA_KEYS:
            if getattr(self, key) == type(self).model_fields[key].default:
                out.pop(key, None)
        return out
