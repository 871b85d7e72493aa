"""agentr1.env: tools, tool-call formats, the tool environment and rewards.

Imports only ``agentr1.retrieval`` (the Retriever interface) and config types; never rollout/rl.
"""

from agentr1.env.base import CallOutcome, ParsedTurn, StepResult, ToolCall, ToolResult
from agentr1.env.formats import (
    HermesFormat,
    TagFormat,
    ToolFormat,
    available_formats,
    get_format,
    register_format,
    select_calls,
)
from agentr1.env.rewards import (
    FormatReport,
    available_metrics,
    episode_format,
    episode_format_ok,
    exact_match,
    f1_score,
    format_score,
    get_metric,
    normalize_answer,
    outcome_reward,
    process_rewards,
    register_metric,
    substring_exact_match,
)
from agentr1.env.search import SearchTool, format_passages
from agentr1.env.toolenv import ToolEnv
from agentr1.env.tools import Tool, available_tools, make_tool, register_tool

__all__ = [
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
    "available_formats",
    "available_metrics",
    "available_tools",
    "episode_format",
    "episode_format_ok",
    "exact_match",
    "f1_score",
    "format_passages",
    "format_score",
    "get_format",
    "get_metric",
    "make_tool",
    "normalize_answer",
    "outcome_reward",
    "process_rewards",
    "register_format",
    "register_metric",
    "register_tool",
    "select_calls",
    "substring_exact_match",
]
