"""A tool that answers its text back, with a configurable prefix (``env.echo.prefix``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from agentr1.env.base import ToolResult
from agentr1.env.tools import Tool


class EchoOptions(BaseModel):
    """``env.echo``: the constructor's keyword arguments."""

    model_config = ConfigDict(extra="forbid")
    prefix: str = "echo: "


class EchoTool(Tool):
    """Answers ``prefix + text``; its options model is :class:`EchoOptions`."""

    name, description, options = "echo", "Repeat a text.", EchoOptions
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "pattern": r"\S"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    purpose, action, example = "hearing your words again", "echo", {"text": "hello"}

    def __init__(self, prefix: str = "echo: ") -> None:
        self.prefix = prefix

    def execute(self, args: dict[str, Any]) -> ToolResult:
        return ToolResult(self.prefix + args["text"], True, {})
