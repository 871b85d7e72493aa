"""agentr1.env: tools, tool-call formats, the tool environment and rewards.

Imports only ``agentr1.retrieval`` (the Retriever interface) and config types; never rollout/rl.
"""

from agentr1.env.base import CallOutcome, ParsedTurn, StepResult, ToolCall, ToolResult
from agentr1.env.calculator import CalculatorTool, format_number
from agentr1.env.formats import (
    HermesFormat,
    TagFormat,
    ToolFormat,
    get_format,
    select_calls,
)
from agentr1.env.rewards import (
    FormatReport,
    episode_format,
    episode_format_ok,
    exact_match,
    f1_score,
    format_score,
    normalize_answer,
    outcome_reward,
    process_rewards,
    substring_exact_match,
)
from agentr1.env.search import SearchTool, format_passages
from agentr1.env.toolenv import ToolEnv
from agentr1.env.tools import Tool, make_tool

__all__ = [
    "CalculatorTool",
    "CallOutcome",
    "FormatReport",
    "HermesFormat",
    "ParsedTurn",
    "SearchTool",
    "StepResult",
    "TagFormat",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolFormat",
    "ToolResult",
    "episode_format",
    "episode_format_ok",
    "exact_match",
    "f1_score",
    "format_number",
    "format_passages",
    "format_score",
    "get_format",
    "make_tool",
    "normalize_answer",
    "outcome_reward",
    "process_rewards",
    "select_calls",
    "substring_exact_match",
]
