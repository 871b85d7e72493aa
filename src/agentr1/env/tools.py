"""Tools the agent can call, and the registry that makes them available by name.

A :class:`Tool` declares ``name``, ``description`` and ``parameters`` (a JSON schema for the
``arguments`` object of a call). :meth:`Tool.validate` checks arguments against that schema plus a
size limit (``max_arg_chars`` characters of the compact JSON encoding) and returns readable error
strings; :meth:`Tool.execute` runs one call and :meth:`Tool.execute_batch` runs many (the default
loops; tools with a batched backend, such as search, override it with one backend call).

Tools never raise for bad input: ``execute``/``execute_batch`` return a failed
:class:`~agentr1.env.base.ToolResult` with a message the model can read. (The environment still
guards against a misbehaving user tool; see ``ToolEnv``.)

Users add a tool by subclassing :class:`Tool` and decorating it with
``@agentr1.registry.TOOLS.register("name")``; ``make_tool("name", **deps)`` builds it and
``TOOLS.names()`` lists the registered names.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import jsonschema

from agentr1.env.base import ToolResult
from agentr1.registry import TOOLS

DEFAULT_MAX_ARG_CHARS = 4096


class Tool(ABC):
    """A callable tool. Subclasses set ``name``, ``description`` and ``parameters`` (JSON schema of
    the arguments object) and implement :meth:`execute`."""

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    max_arg_chars: int = DEFAULT_MAX_ARG_CHARS

    # ------------------------------------------------------------------ schema / validation
    def schema(self) -> dict[str, Any]:
        """The tool's function spec as tool-calling chat templates expect it
        (``{"type": "function", "function": {name, description, parameters}}``)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def _validator(self) -> jsonschema.protocols.Validator:
        cached = getattr(self, "_cached_validator", None)
        if cached is None or cached.schema is not self.parameters:
            cls = jsonschema.validators.validator_for(self.parameters)
            cls.check_schema(self.parameters)
            cached = cls(self.parameters)
            self._cached_validator = cached
        return cached

    def validate(self, args: Any) -> list[str]:
        """Readable problems with ``args`` (empty list = valid).

        Checks, in order: ``args`` is a JSON object; its compact JSON encoding is at most
        ``max_arg_chars`` characters; it satisfies the ``parameters`` JSON schema (every violation
        is listed with its argument path)."""
        if not isinstance(args, dict):
            return [f"arguments must be a JSON object, got {type(args).__name__}"]
        try:
            size = len(json.dumps(args, ensure_ascii=False, separators=(",", ":")))
        except (TypeError, ValueError) as exc:
            return [f"arguments are not JSON-serializable: {exc}"]
        if size > self.max_arg_chars:
            return [f"arguments too large: {size} characters (limit {self.max_arg_chars})"]
        problems = []
        for err in sorted(self._validator().iter_errors(args), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in err.path)
            msg = _short_message(err)
            problems.append(f"argument '{where}': {msg}" if where else msg)
        return problems

    # ------------------------------------------------------------------ execution
    @abstractmethod
    def execute(self, args: dict[str, Any]) -> ToolResult:
        """Run one call. Bad input yields ``ToolResult(success=False)`` with a clear message."""

    def execute_batch(self, batch: Sequence[dict[str, Any]]) -> list[ToolResult]:
        """Run many calls; returns one result per element, in order. The default loops over
        :meth:`execute`; override it when the backend is batched."""
        return [self.execute(args) for args in batch]


def _short_message(err: jsonschema.ValidationError) -> str:
    """A compact message for one schema violation (no huge instance dumps)."""
    validator = err.validator
    if validator == "required":
        return err.message.replace("is a required property", "is required")
    if validator == "maxLength":
        return f"too long: {len(err.instance)} characters (limit {err.validator_value})"
    if validator == "minLength":
        return f"too short: {len(err.instance)} characters (minimum {err.validator_value})"
    if validator == "pattern":
        if err.validator_value == r"\S":
            return "must not be empty or blank"
        return f"must match the pattern {err.validator_value!r}"
    if validator == "type":
        return f"must be of type {err.validator_value}, got {type(err.instance).__name__}"
    if validator == "additionalProperties":
        return err.message
    message = err.message
    return message if len(message) <= 200 else message[:197] + "..."


# ---------------------------------------------------------------------------------- registry
def make_tool(name: str, **deps: Any) -> Tool:
    """Build the tool registered under ``name`` in :data:`~agentr1.registry.TOOLS` with
    constructor arguments ``deps``."""
    cls = TOOLS.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Tool)):
        raise TypeError(f"tool {name!r} is registered as {cls!r}, which is not a Tool subclass: register the class")
    return cls(**deps)
