"""What every params section shares: :class:`_Section` (unknown keys refused, scalars taken as
written, no inf/nan), :class:`ConfigError`, the split names, the registry-checked name types and the
helpers that keep error messages short (a value quoted at most 80 characters, an "allowed" hint per
pydantic error)."""

from __future__ import annotations

import reprlib
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

from agentr1.registry import ESTIMATORS, FORMATS, KL_ESTIMATORS, METRICS, POLICY_LOSSES, TOOLS

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
        """An int field takes an int, a bool field a bool, a float field a number (not a bool, not a
        string): no coercion from ``true``, ``"16"``, ``"0.5"`` or ``30.0`` (see
        :mod:`agentr1.yamlparams` for what YAML reads as a number)."""
        return _scalar_as_written(value, cls.model_fields[info.field_name].annotation)


def _scalar_as_written(value: Any, annotation: Any) -> Any:
    """``value`` unchanged, or ``ValueError`` when a scalar field would have to coerce it."""
    kinds = set(get_args(annotation)) if get_origin(annotation) in (Union, UnionType) else {annotation}
    if value is None and type(None) in kinds:
        return value
    kinds.discard(type(None))
    if kinds == {int} and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(
            f"an integer written as an integer is required, not {_yaml_kind(value)} (YAML's yes/on, "
            "0x10, 1:30, 010 or 30.0 are not integers here)"
        )
    if kinds == {bool} and not isinstance(value, bool):
        raise ValueError(f"true or false is required, not {_yaml_kind(value)}")
    if kinds == {float} and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"a number written as a number is required, not {_yaml_kind(value)} (no quotes: 0.5, 1e-4)")
    return value


def _yaml_kind(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


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


def _distinct_splits(v: list[str]) -> list[str]:
    """A non-empty list of distinct split names (``ValueError`` otherwise)."""
    unknown = [s for s in v if s not in SPLITS]
    if not v or unknown or len(set(v)) != len(v):
        raise ValueError(f"splits must be a non-empty list of distinct names from {list(SPLITS)} (got {v})")
    return v


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
