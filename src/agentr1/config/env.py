"""``env`` and ``reward``: the tool environment, whose registered tools bring their own options
sections, and the outcome and per-call process rewards."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from agentr1.config.base import FormatName, MetricName, ToolName, _allowed, _Section
from agentr1.registry import TOOLS, tool_options


def _registered_sections(section: BaseModel, what: str, model_of: Any) -> dict[str, Any]:
    """Validate the extra keys of ``section``: each must be accepted by ``model_of(key)`` (which
    returns a pydantic model or a type to validate the value with, or raises ``ValueError`` naming
    what is allowed); a nested error names ``<key>.<field>`` and the fix."""
    out = {}
    for key, value in (section.__pydantic_extra__ or {}).items():
        model = model_of(key)
        try:
            out[key] = (
                model.model_validate(value)
                if isinstance(model, type) and issubclass(model, BaseModel)
                else TypeAdapter(model).validate_python(value)
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, (what, key, *e['loc'])))}: {e['msg']}"
                + (f" ({_allowed(e)})" if _allowed(e) else "")
                for e in exc.errors()
            )
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
    def _tool_sections(self) -> EnvConfig:
        def options_of(key: str) -> Any:
            if key not in TOOLS:
                raise ValueError(
                    f"env.{key}: unknown key (neither an env setting nor a registered tool; "
                    f"tools: {', '.join(TOOLS.names())}): remove it or fix its spelling"
                )
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
    hook pays ``successful_search`` only when a supporting passage came back. Each reward within
    -1..1 (the outcome reward is within -1..1 too: a larger per-call term would outweigh the answer)."""

    model_config = ConfigDict(extra="allow")

    enabled: bool = False
    invalid_call: float = Field(-0.1, ge=-1, le=1)
    failed_call: float = Field(-0.05, ge=-1, le=1)
    successful_search: float = Field(0.1, ge=-1, le=1)

    @model_validator(mode="after")
    def _tool_rewards(self) -> ProcessRewardConfig:
        def reward_key(key: str) -> Any:
            tool = key.removeprefix("successful_")
            if not key.startswith("successful_") or tool not in TOOLS:
                raise ValueError(
                    f"reward.process.{key}: unknown key (allowed extra keys: successful_<tool> for "
                    f"the tools {', '.join(TOOLS.names())}): remove it or fix its spelling"
                )
            return Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-1, le=1)]  # strict: no "0.5"

        self.__pydantic_extra__ = _registered_sections(self, "reward.process", reward_key)
        return self


class RewardConfig(_Section):
    """Outcome reward (paper Eq. 6) and optional per-call process rewards.

    See ``agentr1.env.rewards``: with format score f, R = format_score + (1 - format_score) *
    metric(answer) when the format is valid (f = 1), else R = f - 1."""

    metric: MetricName = "em"
    format_score: float = Field(0.0, ge=0, le=1)
    process: ProcessRewardConfig = ProcessRewardConfig()
