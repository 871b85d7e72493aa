"""Data types of the tool environment: calls, results, parsed turns and step outcomes.

The environment side of the agent's MDP. ``agentr1.env`` knows nothing of rollouts or training:
the rollout engine hands it one generated turn (text) at a time and appends what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    """A tool call parsed from generated text. ``end`` is the index (in the turn's text) one past
    the last character of the call, i.e. where the closing tag ends: process rewards for this call
    are placed on the token that contains character ``end - 1``."""

    name: str
    arguments: dict[str, Any]
    raw: str
    start: int
    end: int


@dataclass
class ToolResult:
    content: str
    success: bool
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedTurn:
    """What a parser found in one generated turn: calls, a final answer, or format errors.

    ``errors`` holds one message per malformed call (bad JSON, unclosed tag, ...); ``error_ends``
    the matching character ends (for process rewards on invalid calls)."""

    calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    answer_end: int | None = None
    errors: list[str] = field(default_factory=list)
    error_ends: list[int] = field(default_factory=list)


@dataclass
class CallOutcome:
    """Per-call flags for rewards and metrics.

    valid:   the call parsed, named a known tool and had valid arguments;
    success: it executed without error;
    found_support: (search only) a returned passage is one of the question's supporting passages.
    end:     character index one past the call in the turn text (see ``ToolCall.end``).
    """

    name: str | None
    valid: bool
    success: bool
    end: int
    found_support: bool = False
    error: str | None = None


@dataclass
class StepResult:
    """The environment's answer to one generated turn.

    observation: text to append after the turn ("" when the episode ends);
    done:        whether the episode ended; reason in {"answer", "no_call", "max_turns", "continue"};
    answer:      the final answer when one was given;
    outcomes:    one CallOutcome per call attempt (valid or not) in this turn.
    """

    observation: str
    done: bool
    reason: str
    answer: str | None = None
    outcomes: list[CallOutcome] = field(default_factory=list)
