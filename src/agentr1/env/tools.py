"""Tools the agent can call, and the registry that makes them available by name.

A :class:`Tool` declares ``name``, ``description`` and ``parameters`` (a JSON schema for the
``arguments`` object of a call). :meth:`Tool.validate` checks arguments against that schema plus a
size limit (``max_arg_chars`` characters of the compact JSON encoding) and returns readable error
strings; :meth:`Tool.execute` runs one call and :meth:`Tool.execute_batch` runs many (the default
loops; tools with a batched backend, such as search, override it with one backend call).

Tools never raise for bad input: ``execute``/``execute_batch`` return a failed
:class:`~agentr1.env.base.ToolResult` with a message the model can read. (The environment still
guards against a misbehaving user tool; see ``ToolEnv``.)

A tool declares everything about itself on its class (docs/EXTENDING.md "Add a tool"):

* ``name`` (what ``env.tools`` lists and Hermes calls name), ``description``, ``parameters``;
* ``tag``: its element in the tag format (``<calculate>...</calculate>``; default: ``name``);
* ``purpose``: how the tag format's system prompt says what it is for ("searching for the facts
  you need"); ``example``: example arguments shown in prompts and error hints; ``action``: the
  verb of the hint ("write <search>your query</search> to search");
* ``options``: the pydantic model of its ``env.<name>`` params section, whose fields are passed
  to the constructor as keyword arguments (``None``: no options);
* ``resources``: shared objects the environment passes to the constructor by keyword
  (``("retriever",)`` for search);
* :meth:`Tool.success_reward`: its process-reward hook for a successful call.

Users add a tool by subclassing :class:`Tool` in one module and naming the class in an entry point
of the ``agentr1.tools`` group (or, in-process, decorating it with
``@agentr1.registry.TOOLS.register("name")``); ``make_tool("name", **deps)`` builds it and
``TOOLS.names()`` lists the available names.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agentr1.env.base import CallOutcome, ToolResult
from agentr1.registry import TOOLS

if TYPE_CHECKING:
    import jsonschema

DEFAULT_MAX_ARG_CHARS = 4096


class Tool(ABC):
    """A callable tool. Subclasses set ``name``, ``description`` and ``parameters`` (JSON schema of
    the arguments object) and implement :meth:`execute`."""

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    max_arg_chars: int = DEFAULT_MAX_ARG_CHARS
    tag: str = ""  # tag-format element; "" = the name
    purpose: str = ""  # "" = f"calling {name}"
    example: dict[str, Any] = {}
    action: str = ""  # "" = f"call {name}"
    options: type[BaseModel] | None = None
    resources: tuple[str, ...] = ()

    @property
    def tag_name(self) -> str:
        """The element of this tool's calls in the tag format."""
        return self.tag or self.name

    @classmethod
    def success_reward(cls, outcome: CallOutcome, process_cfg: Any) -> float:
        """Process reward of one valid call that executed successfully (``reward.process`` is
        ``process_cfg``). Default: ``process_cfg.successful_<name>``, 0 when it is not set."""
        return float(getattr(process_cfg, f"successful_{cls.name}", 0.0) or 0.0)

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
        import jsonschema  # here: config validation imports tool modules for their options models

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
