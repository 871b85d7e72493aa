"""A toy third tool, complete in this one file (docs/EXTENDING.md "Add a tool"; tests/test_calculator.py uses it).

Together with the config lines ``env.tools: [search, calculator, word_count]``,
``env.word_count: {max_words: 50}`` and, for a process reward, ``reward.process.
successful_word_count: 0.02``, this is the whole change that adds a tool: no other file is edited.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentr1.env import Tool, ToolResult
from agentr1.registry import TOOLS


class WordCountOptions(BaseModel):
    """``env.word_count``: the options (constructor keyword arguments) of the tool."""

    model_config = ConfigDict(extra="forbid")
    max_words: int = Field(100, ge=1)


@TOOLS.register("word_count")
class WordCountTool(Tool):
    """Count the words of a text (at most ``max_words``)."""

    name = "word_count"
    tag = "count"  # tag format: <count>some words</count>
    purpose = "counting words"
    example = {"text": "a few words"}
    action = "count words"
    options = WordCountOptions

    def __init__(self, max_words: int = 100) -> None:
        self.max_words = max_words
        self.description = f"Count the words of a text of at most {max_words} words."
        self.parameters = {
            "type": "object",
            "properties": {"text": {"type": "string", "pattern": r"\S"}},
            "required": ["text"],
            "additionalProperties": False,
        }

    @classmethod
    def success_reward(cls, outcome: Any, process_cfg: Any) -> float:
        """The default hook (``successful_word_count``), halved: a custom hook in one place."""
        return 0.5 * super().success_reward(outcome, process_cfg)

    def execute(self, args: dict[str, Any]) -> ToolResult:
        words = str(args.get("text", "")).split()
        if len(words) > self.max_words:
            return ToolResult(f"word_count failed: {len(words)} words (limit {self.max_words})", False)
        return ToolResult(str(len(words)), True)
