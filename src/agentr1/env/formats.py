"""Tool-call formats: how tools are described to the model, how its turn is parsed, and how
observations and answers are written back.

One module of more than 400 lines on purpose: both formats are one scanner, :meth:`ToolFormat.parse`, over
their own ``_Marker`` tables, and :func:`select_calls` relies on what it guarantees (every element ends at a stop
string, so a cut turn parses like the uncut one); split per format, the private ``_Marker`` and those rules would
sit apart from the markers that must obey them.

Two formats are registered in :data:`agentr1.registry.FORMATS` (``get_format(name, tools=...,
think=...)`` builds one):

``tags`` (Search-R1 style)
    call ``<search>query</search>``, ``<calculate>2 * 3</calculate>`` (the tag is the tool's
    ``tag_name``; for a tool with exactly one required string parameter and no other, the content,
    stripped, is that parameter; for any other schema it is the JSON arguments object,
    ``<lookup>{"city": "Korvash", "year": 1900}</lookup>``); observation
    ``<information>...</information>``; answer ``<answer>...</answer>``; optional
    ``<think>...</think>`` reasoning.
``hermes`` (Qwen / Hermes function calling)
    call ``<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>`` (JSON);
    observation ``<tool_response>...</tool_response>``; answer ``<answer>...</answer>``.

Parsing (identical rules for both formats)
------------------------------------------
The scanner walks the text left to right looking for the format's *opening* markers (one per
call kind, plus ``<answer>``) and *closing* markers (the :attr:`ToolFormat.stop_strings`).

* an opening marker's content runs to the **first closing marker after it**; if that is the
  matching one the element is well formed and ends one past it; if it is another closing marker the
  attempt is malformed ("expected </search>, found </answer>") and ends one past that marker; if
  there is none, the attempt is an unclosed tag and ends at ``len(text)``;
* a closing marker with no opening marker before it is a malformed (stray) attempt.

Every element therefore ends exactly at a stop string (or at the end of the text), so a turn the
generator cut right after its first stop string parses exactly like the uncut text under
``multi_call="first"`` — the property the rollout engine relies on.

A well-formed call becomes a :class:`~agentr1.env.base.ToolCall` with ``start`` = index of its
opening marker and ``end`` = one past its closing marker. A malformed attempt becomes a message in
``ParsedTurn.errors`` with its end in ``error_ends``. An answer is well formed when its content is
non-blank (``ParsedTurn.answer`` = stripped content, ``answer_end`` = one past ``</answer>``).
Whether a call names a known tool and has valid arguments is checked by the environment, not
here.

:func:`select_calls` then applies the per-turn policy (``multi_call`` first|all, capped by
``max_calls_per_turn``).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentr1.env.base import ParsedTurn, ToolCall
from agentr1.env.tools import Tool
from agentr1.registry import FORMATS

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class _Marker:
    """An opening marker: the element kind ("call" or "answer"), the called tool's name for tag
    calls (``tag``), and the closing marker that completes it."""

    kind: str
    close: str
    tag: str | None = None


class ToolFormat(ABC):
    """Describe tools to the model, parse its turns and render what goes back.

    A format is bound to the tools it describes (``tools``; :meth:`bind` rebinds). ``think``
    asks the model to reason inside ``<think>...</think>`` before acting (never required by the
    parser)."""

    name: str = ""  # the name it is registered under in agentr1.registry.FORMATS

    def __init__(self, tools: Sequence[Tool] = (), think: bool = False) -> None:
        self.think = think
        self.tools: list[Tool] = []
        self.bind(tools)

    # ------------------------------------------------------------------ binding
    def bind(self, tools: Sequence[Tool]) -> ToolFormat:
        """Bind the tools this format describes and parses; returns ``self``."""
        self.tools = list(tools)
        self._check_tools(self.tools)
        self._openers = self._opening_markers()
        closers = sorted({m.close for m in self._openers.values()}, key=len, reverse=True)
        markers = sorted(set(self._openers) | set(closers), key=len, reverse=True)
        self._any_marker = re.compile("|".join(re.escape(m) for m in markers))
        self._closer = re.compile("|".join(re.escape(c) for c in closers))
        return self

    def _check_tools(self, tools: Sequence[Tool]) -> None:
        """Raise ValueError when a tool cannot be expressed in this format."""
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate tool names: {names}")

    @abstractmethod
    def _opening_markers(self) -> dict[str, _Marker]:
        """Opening marker -> what it opens (calls and the answer)."""

    # ------------------------------------------------------------------ prompts
    @property
    def call_stop_strings(self) -> list[str]:
        """Closing markers of calls (each ends a turn when one call per turn is wanted)."""
        return sorted({m.close for m in self._openers.values() if m.kind == "call"})

    @property
    def stop_strings(self) -> list[str]:
        """Strings that end a turn: every call's closing marker, then ``</answer>``."""
        return self.call_stop_strings + [ANSWER_CLOSE]

    def answer_instruction(self) -> str:
        return (
            f"When you know the final answer, write it between {ANSWER_OPEN} and {ANSWER_CLOSE} "
            f"without explanation and without further tool calls, e.g. {ANSWER_OPEN}Paris"
            f"{ANSWER_CLOSE}. Give short answers (a name, a date, yes or no)."
        )

    def think_instruction(self) -> str:
        return f"Before each action, reason step by step between {THINK_OPEN} and {THINK_CLOSE}. " if self.think else ""

    @abstractmethod
    def system_prompt(self, tools: Sequence[Tool] | None = None) -> str:
        """The system prompt: the tools (names, descriptions, JSON schemas), how to call them,
        how results come back, and how to give the final answer. ``tools`` defaults to the bound
        tools."""

    def user_prompt(self, question: str) -> str:
        """The user message for one question."""
        return f"Question: {question.strip()}"

    # ------------------------------------------------------------------ rendering
    @abstractmethod
    def render_call(self, name: str, args: dict[str, Any]) -> str:
        """The exact text of a call, as the model should write it."""

    def render_answer(self, answer: str) -> str:
        return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"

    @abstractmethod
    def render_observation(self, texts: Sequence[str]) -> str:
        """The text appended after a turn: one result block per text, in call order."""

    @abstractmethod
    def usage_hint(self) -> str:
        """A one-line reminder of the call/answer syntax, appended to format errors."""

    # ------------------------------------------------------------------ parsing
    @abstractmethod
    def _make_call(self, marker: _Marker, content: str, raw: str, start: int, end: int) -> ToolCall | str:
        """Turn a well-delimited call's content into a ToolCall, or an error message."""

    def parse(self, text: str) -> ParsedTurn:
        """Every call, malformed attempt and the first well-formed answer in ``text`` (see the
        module docstring for the rules). Never raises for any string."""
        out = ParsedTurn()
        pos = 0
        hint = self.usage_hint()
        while True:
            m = self._any_marker.search(text, pos)
            if m is None:
                break
            start, token = m.start(), m.group(0)
            marker = self._openers.get(token)
            if marker is None:  # a closing marker with nothing open
                out.errors.append(f"stray {token} without its opening tag; {hint}")
                out.error_ends.append(m.end())
                pos = m.end()
                continue
            content_start = m.end()
            close = self._closer.search(text, content_start)
            if close is None:
                out.errors.append(f"unclosed {token} tag (missing {marker.close}); {hint}")
                out.error_ends.append(len(text))
                break
            end = close.end()
            if close.group(0) != marker.close:
                out.errors.append(f"{token} was closed by {close.group(0)} instead of {marker.close}; {hint}")
                out.error_ends.append(end)
            else:
                content = text[content_start : close.start()]
                if marker.kind == "answer":
                    if out.answer is None:
                        if content.strip():
                            out.answer, out.answer_end = content.strip(), end
                        else:
                            out.errors.append(
                                f"empty answer (nothing between {ANSWER_OPEN} and {ANSWER_CLOSE}); {hint}"
                            )
                            out.error_ends.append(end)
                else:
                    made = self._make_call(marker, content, text[start:end], start, end)
                    if isinstance(made, ToolCall):
                        out.calls.append(made)
                    else:
                        out.errors.append(f"{made}; {hint}")
                        out.error_ends.append(end)
            pos = end
        return out


# ----------------------------------------------------------------------------------- formats
def get_format(name: str, tools: Sequence[Tool] = (), think: bool = False) -> ToolFormat:
    """A new instance of the format registered under ``name`` in
    :data:`~agentr1.registry.FORMATS`, bound to ``tools``."""
    return FORMATS.get(name)(tools=tools, think=think)


def tag_parameter(tool: Tool) -> str | None:
    """The parameter a tag call's content fills: the tool's single required string parameter when
    it has no other; ``None`` when the content is the JSON arguments object."""
    params = tool.parameters or {}
    required = list(params.get("required") or [])
    props = params.get("properties") or {}
    if len(required) == 1 and set(props) <= set(required) and (props.get(required[0]) or {}).get("type") == "string":
        return required[0]
    return None


class TagFormat(ToolFormat):
    """Search-R1 style tags: ``<search>q</search>``, ``<information>``, ``<answer>``."""

    name = "tags"
    OBS_OPEN = "<information>"
    OBS_CLOSE = "</information>"
    RESERVED = {"answer", "think", "information"}

    def _check_tools(self, tools: Sequence[Tool]) -> None:
        super()._check_tools(tools)
        tags = [t.tag_name for t in tools]
        if len(set(tags)) != len(tags):
            raise ValueError(f"two tools use the same tag: {tags}")
        for tool in tools:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", tool.tag_name) or tool.tag_name in self.RESERVED:
                raise ValueError(f"tool {tool.name!r}: {tool.tag_name!r} cannot be a tag")

    def _opening_markers(self) -> dict[str, _Marker]:
        markers = {f"<{t.tag_name}>": _Marker("call", f"</{t.tag_name}>", t.name) for t in self.tools}
        markers[ANSWER_OPEN] = _Marker("answer", ANSWER_CLOSE)
        return markers

    def _tool(self, name: str) -> Tool:
        tool = next((t for t in self.tools if t.name == name), None)
        if tool is None:
            raise ValueError(f"tag format has no tool {name!r}")
        return tool

    def _example(self, tool: Tool | None) -> str:
        """An example call of ``tool`` (its ``example`` arguments, else its parameter's name;
        search's when there is no tool)."""
        if tool is None:
            return "<search>your query</search>"
        if tool.example:
            return self.render_call(tool.name, tool.example)
        return f"<{tool.tag_name}>{tag_parameter(tool) or '{...}'}</{tool.tag_name}>"

    def system_prompt(self, tools: Sequence[Tool] | None = None) -> str:
        tools = self.tools if tools is None else list(tools)
        purposes = " and ".join(t.purpose or f"calling {t.name}" for t in tools) or "searching for the facts you need"
        lines = [
            f"You answer questions by {purposes}.",
            self.think_instruction()
            + f"To call a tool, write its name as a tag around its argument, e.g. {self._example(tools[0] if tools else None)}. "
            f"The result comes back between {self.OBS_OPEN} and {self.OBS_CLOSE}.",
            "Tools:",
        ]
        for tool in tools:
            param = tag_parameter(tool) or "JSON arguments object"
            lines.append(
                f"- <{tool.tag_name}>{param}</{tool.tag_name}>: {tool.description} "
                f"Parameters (JSON schema): {json.dumps(tool.parameters, ensure_ascii=False)}"
            )
        lines.append("You may call tools as many times as you need, one call at a time.")
        lines.append(self.answer_instruction())
        return "\n".join(lines)

    def render_call(self, name: str, args: dict[str, Any]) -> str:
        tool = self._tool(name)
        param = tag_parameter(tool)
        content = args[param] if param is not None else json.dumps(args, ensure_ascii=False)
        return f"<{tool.tag_name}>{content}</{tool.tag_name}>"

    def render_observation(self, texts: Sequence[str]) -> str:
        blocks = "\n".join(f"{self.OBS_OPEN}{t}{self.OBS_CLOSE}" for t in texts)
        return f"\n\n{blocks}\n\n"

    def usage_hint(self) -> str:
        calls = [f"{self._example(t)} to {t.action or 'call ' + t.name}" for t in self.tools] or [
            f"{self._example(None)} to search"
        ]
        return f"write {', '.join(calls)} or {ANSWER_OPEN}...{ANSWER_CLOSE} to answer"

    def _make_call(self, marker: _Marker, content: str, raw: str, start: int, end: int) -> ToolCall | str:
        tool = self._tool(marker.tag)  # type: ignore[arg-type]  # call markers carry the tool's name
        param = tag_parameter(tool)
        if param is not None:
            return ToolCall(tool.name, {param: content.strip()}, raw, start, end)
        try:
            args = json.loads(content)
        except (ValueError, RecursionError) as exc:
            return f"<{tool.tag_name}> must hold a JSON object of arguments ({type(exc).__name__})"
        if not isinstance(args, dict):
            return f"<{tool.tag_name}> must hold a JSON object of arguments, got {type(args).__name__}"
        return ToolCall(tool.name, args, raw, start, end)


class HermesFormat(ToolFormat):
    """Qwen / Hermes function calling: ``<tool_call>{json}</tool_call>``, ``<tool_response>``."""

    name = "hermes"
    CALL_OPEN = "<tool_call>"
    CALL_CLOSE = "</tool_call>"
    OBS_OPEN = "<tool_response>"
    OBS_CLOSE = "</tool_response>"

    def _opening_markers(self) -> dict[str, _Marker]:
        return {
            self.CALL_OPEN: _Marker("call", self.CALL_CLOSE),
            ANSWER_OPEN: _Marker("answer", ANSWER_CLOSE),
        }

    def system_prompt(self, tools: Sequence[Tool] | None = None) -> str:
        tools = self.tools if tools is None else list(tools)
        specs = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools)
        lines = [
            "You answer questions by calling tools to find the facts you need.",
            self.think_instruction().rstrip(),
            "# Tools",
            "The functions you can call are described between <tools> and </tools>:",
            f"<tools>\n{specs}\n</tools>",
            f"To call a function, write a JSON object with its name and arguments between "
            f"{self.CALL_OPEN} and {self.CALL_CLOSE}:",
            f'{self.CALL_OPEN}\n{{"name": <function-name>, "arguments": <arguments-object>}}\n{self.CALL_CLOSE}',
            f"The result comes back between {self.OBS_OPEN} and {self.OBS_CLOSE}.",
            self.answer_instruction(),
        ]
        return "\n".join(line for line in lines if line)

    def render_call(self, name: str, args: dict[str, Any]) -> str:
        body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        return f"{self.CALL_OPEN}\n{body}\n{self.CALL_CLOSE}"

    def render_observation(self, texts: Sequence[str]) -> str:
        blocks = "\n".join(f"{self.OBS_OPEN}\n{t}\n{self.OBS_CLOSE}" for t in texts)
        return f"\n{blocks}\n"

    def usage_hint(self) -> str:
        name = self.tools[0].name if self.tools else "search"
        return (
            f'write {self.CALL_OPEN}{{"name": "{name}", "arguments": {{...}}}}{self.CALL_CLOSE} '
            f"or {ANSWER_OPEN}...{ANSWER_CLOSE}"
        )

    def _make_call(self, marker: _Marker, content: str, raw: str, start: int, end: int) -> ToolCall | str:
        try:
            obj = json.loads(content)
        except json.JSONDecodeError as exc:
            return f"invalid JSON in {self.CALL_OPEN}: {exc.msg} at position {exc.pos}"
        except (ValueError, RecursionError) as exc:
            return f"invalid JSON in {self.CALL_OPEN}: {type(exc).__name__}"
        if not isinstance(obj, dict):
            return f"{self.CALL_OPEN} must hold a JSON object with 'name' and 'arguments', got {type(obj).__name__}"
        name = obj.get("name")
        if not isinstance(name, str) or not name.strip():
            return "the tool call has no 'name' (a non-empty string)"
        if "arguments" not in obj:
            return f"the call to {name!r} has no 'arguments' object"
        args = obj["arguments"]
        if isinstance(args, str):  # some models emit the arguments object JSON-encoded
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                return f"the 'arguments' of {name!r} must be a JSON object, got an unparsable string"
        if not isinstance(args, dict):
            return f"the 'arguments' of {name!r} must be a JSON object, got {type(args).__name__}"
        return ToolCall(name.strip(), args, raw, start, end)


# ------------------------------------------------------------------------------ turn policy
MULTI_CALL_POLICIES = ("first", "all")


def select_calls(parsed: ParsedTurn, multi_call: str, max_calls_per_turn: int) -> ParsedTurn:
    """Apply the per-turn call policy to a parse. Elements are taken in text order (by end).

    ``first``: only the first element (call, malformed attempt or answer) counts; the generator
    stops at the first stop string, so nothing after it exists in a real rollout.
    ``all``:   every element up to and including the first answer; call attempts (well formed or
    not) beyond ``max_calls_per_turn`` become errors "not executed: at most N calls per turn".
    """
    if multi_call not in MULTI_CALL_POLICIES:
        raise ValueError(f"multi_call must be one of {MULTI_CALL_POLICIES}, got {multi_call!r}")
    events: list[tuple[int, int, Any]] = [(c.end, 0, c) for c in parsed.calls]
    events += [(end, 1, msg) for msg, end in zip(parsed.errors, parsed.error_ends)]
    if parsed.answer is not None and parsed.answer_end is not None:
        events.append((parsed.answer_end, 2, parsed.answer))
    events.sort(key=lambda e: (e[0], e[1]))
    if multi_call == "first":
        events = events[:1]
    out = ParsedTurn()
    attempts = 0
    for end, kind, obj in events:
        if kind == 2:
            out.answer, out.answer_end = obj, end
            break
        attempts += 1
        if attempts > max_calls_per_turn:
            out.errors.append(f"not executed: at most {max_calls_per_turn} calls per turn")
            out.error_ends.append(end)
        elif kind == 0:
            out.calls.append(obj)
        else:
            out.errors.append(obj)
            out.error_ends.append(end)
    return out
