"""ToolEnv: one generated turn in, an observation, a done flag and per-call outcomes out.

For each turn (``step_batch`` handles a batch of independent episodes at once):

1. parse the turn with the format and apply the call policy (:func:`select_calls`);
2. decide, in this order:
   * a well-formed answer                    -> done, reason ``"answer"``, no observation;
   * ``turn_index >= max_turns - 1``         -> done, reason ``"max_turns"``, no observation;
   * no call attempt at all                  -> done, reason ``"no_call"``, no observation;
   * otherwise                               -> reason ``"continue"``: execute and observe;
3. check each call: the tool exists and ``tool.validate(args)`` passes, else the attempt is
   *invalid*; the valid calls of the whole batch are grouped per tool and each tool's
   ``execute_batch`` runs ONCE;
4. render the observation: first one block per executed call, in text order (the tool's output,
   or ``Error: <why it failed>``), then a bounded tail for the attempts that were not executed
   (malformed, invalid, over ``max_calls_per_turn``): at most :data:`ERROR_BLOCKS` blocks
   ``Error: <message>`` (a message shared by several attempts once, with their count), then one
   ``Error: N more ...`` block. Over ``observation_max_chars`` the tail keeps at most half of
   the room when results exist, and the blocks are shortened longest first; only whole blocks
   are rendered, so the wrapping tags always survive (:meth:`ToolEnv._observation`).

Every call attempt yields a :class:`CallOutcome` (``valid``: parsed, known tool, valid
arguments; ``success``: executed without error; ``found_support``: a returned passage id is in
the episode's ``supporting_ids``; ``end``: one past the attempt in the turn text). Attempts in a
turn that ends the episode (answer or turn limit) are validated but not executed
(``success=False``, ``error="not executed: ..."``).

No exception escapes ``step_batch`` for anything a model can generate: parser, validator and
tool failures all become error observations and failed outcomes (an ``ImportError`` excepted: a
dependency missing from the installation is no fault of the model's call, and scoring every call
as failed would train on it silently), and a turn that is not a string
at all (``None``, bytes) is a malformed turn ("could not read the turn"). The batch's structure is
the caller's contract and is checked first, before any tool runs: ``turn_texts`` and
``turn_indices`` must be lists of one entry per episode, each turn index an int >= 0, and
``supporting_ids`` (optional) one list of passage ids (or ``None``: none known) per episode;
anything else is a :class:`ValueError` naming the argument and the index.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from agentr1.env.base import CallOutcome, ParsedTurn, StepResult, ToolCall, ToolResult
from agentr1.env.formats import MULTI_CALL_POLICIES, ToolFormat, get_format, select_calls
from agentr1.env.tools import Tool, make_tool
from agentr1.registry import TOOLS
from agentr1.retrieval.base import Retriever


@dataclass
class _Attempt:
    """One call attempt of a turn; ``call`` is set when it is valid and may be executed."""

    end: int
    name: str | None
    call: ToolCall | None = None
    error: str | None = None
    result: ToolResult | None = None


@dataclass
class _Plan:
    reason: str
    answer: str | None = None
    attempts: list[_Attempt] = field(default_factory=list)


ERROR_BLOCKS = 3  # distinct error messages shown in an observation's tail; the rest are counted
MIN_BLOCK_CHARS = 16  # the least text a block keeps when the observation is cut


def error_tail(errors: list[str]) -> list[str]:
    """The error blocks of an observation: each distinct message once, in order of first
    appearance (``"Error: msg"``, or ``"Error: msg (N attempts)"`` when shared), at most
    :data:`ERROR_BLOCKS` of them, then one block counting the attempts left out."""
    counts: dict[str, int] = {}
    for e in errors:
        counts[e] = counts.get(e, 0) + 1
    shown = list(counts)[:ERROR_BLOCKS]
    blocks = [f"Error: {e}" + (f" ({counts[e]} attempts)" if counts[e] > 1 else "") for e in shown]
    hidden = len(errors) - sum(counts[e] for e in shown)
    if hidden:
        blocks.append(f"Error: {hidden} more call attempts failed or were not executed")
    return blocks


def _keep_blocks(results: list[str], tail: list[str], fits: int) -> tuple[list[str], list[str]]:
    """At most ``fits`` blocks, results first; the last block counts what was left out (when
    more than one block fits)."""
    if fits == 1:
        return (results[:1], []) if results else ([], tail[:1])
    if len(results) >= fits:
        kept = results[: fits - 1]
        notes = f" and {len(tail)} error blocks" if tail else ""
        return kept, [f"Error: {len(results) - len(kept)} more results{notes} left out (env.observation_max_chars)"]
    shown = fits - len(results) - 1
    return results, tail[:shown] + [
        f"Error: {len(tail) - shown} more error blocks left out (env.observation_max_chars)"
    ]


def _fit_texts(texts: list[str], budget: int) -> list[str]:
    """Shorten ``texts`` so their total length is <= ``budget``: short texts are kept whole and
    the rest share what is left equally (water filling); a cut text ends with an ellipsis."""
    if sum(len(t) for t in texts) <= budget:
        return list(texts)
    alloc = [0] * len(texts)
    remaining, left = max(budget, 0), len(texts)
    for i in sorted(range(len(texts)), key=lambda j: len(texts[j])):
        share = remaining // left
        alloc[i] = min(len(texts[i]), share)
        remaining -= alloc[i]
        left -= 1
    return [t if len(t) <= a else (t[: a - 1] + "…" if a > 0 else "") for t, a in zip(texts, alloc)]


def _is_list(x: Any) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes, bytearray))


def _check_batch(turn_texts: Any, turn_indices: Any, supporting_ids: Any) -> None:
    """The caller's side of :meth:`ToolEnv.step_batch` (module docstring); ``ValueError`` naming
    the argument and the index."""
    for name, value in (("turn_texts", turn_texts), ("turn_indices", turn_indices)):
        if not _is_list(value):
            raise ValueError(f"{name} must be a list with one entry per episode (got {type(value).__name__})")
    if len(turn_texts) != len(turn_indices):
        raise ValueError(
            f"turn_texts and turn_indices must have the same length ({len(turn_texts)} != {len(turn_indices)})"
        )
    for i, k in enumerate(turn_indices):
        if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 0:
            raise ValueError(f"turn_indices[{i}] must be an int >= 0 (got {k!r})")
    if supporting_ids is None:
        return
    if not _is_list(supporting_ids):
        raise ValueError(
            f"supporting_ids must be a list with one list of passage ids per episode "
            f"(got {type(supporting_ids).__name__})"
        )
    if len(supporting_ids) != len(turn_texts):
        raise ValueError(f"supporting_ids must have one entry per turn ({len(supporting_ids)} != {len(turn_texts)})")
    for i, ids in enumerate(supporting_ids):
        if ids is not None and not (_is_list(ids) or isinstance(ids, Set)):
            raise ValueError(f"supporting_ids[{i}] must be a list of passage ids or None (got {type(ids).__name__})")


class ToolEnv:
    """The tool environment shared by all episodes of a batch (it holds no episode state: the
    caller passes each turn's index and the episode's supporting passage ids).

    ``fmt`` is a format name (``get_format``) or a :class:`ToolFormat` instance, which is
    (re)bound to ``tools``. ``think`` is passed to the format when ``fmt`` is a name."""

    def __init__(
        self,
        tools: Mapping[str, Tool] | Sequence[Tool],
        fmt: ToolFormat | str,
        max_turns: int = 4,
        multi_call: str = "first",
        max_calls_per_turn: int = 3,
        observation_max_chars: int = 1600,
        think: bool = False,
    ) -> None:
        tool_list = list(tools.values()) if isinstance(tools, Mapping) else list(tools)
        self.tools: dict[str, Tool] = {}
        for tool in tool_list:
            if tool.name in self.tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        if multi_call not in MULTI_CALL_POLICIES:
            raise ValueError(f"multi_call must be one of {MULTI_CALL_POLICIES}, got {multi_call!r}")
        if max_turns < 1 or max_calls_per_turn < 1 or observation_max_chars < 1:
            raise ValueError("max_turns, max_calls_per_turn and observation_max_chars must be >= 1")
        self.fmt = get_format(fmt, tool_list, think) if isinstance(fmt, str) else fmt.bind(tool_list)
        self.max_turns = max_turns
        self.multi_call = multi_call
        self.max_calls_per_turn = max_calls_per_turn
        self.observation_max_chars = observation_max_chars

    @classmethod
    def from_config(cls, env_cfg: Any, retriever: Retriever | None) -> ToolEnv:
        """Build from ``cfg.env``: each name in ``env_cfg.tools`` is made with ``make_tool``,
        passing the fields of its options section (``env_cfg.<name>``, e.g. ``env_cfg.search``;
        none when the tool declares no ``options``) and the shared resources its class lists in
        ``resources`` (``retriever``) as keyword arguments."""
        available = {"retriever": retriever}
        tools = []
        for name in env_cfg.tools:
            section = getattr(env_cfg, name, None)
            deps: dict[str, Any] = section.model_dump() if hasattr(section, "model_dump") else {}
            for resource in getattr(TOOLS.get(name), "resources", ()):
                if available.get(resource) is None:
                    raise ValueError(f"tool {name!r} needs a {resource}")
                deps[resource] = available[resource]
            tools.append(make_tool(name, **deps))
        return cls(
            tools,
            env_cfg.format,
            max_turns=env_cfg.max_turns,
            multi_call=env_cfg.multi_call,
            max_calls_per_turn=env_cfg.max_calls_per_turn,
            observation_max_chars=env_cfg.observation_max_chars,
            think=env_cfg.think,
        )

    # ------------------------------------------------------------------ prompts
    @property
    def format(self) -> str:
        """The format's registered name ("tags" or "hermes"); the rollout engine picks its
        observation wrapping from it."""
        return self.fmt.name

    def system_prompt(self) -> str:
        return self.fmt.system_prompt()

    def user_prompt(self, question: str) -> str:
        return self.fmt.user_prompt(question)

    @property
    def stop_strings(self) -> list[str]:
        """Strings that end a generated turn. Under ``multi_call="first"`` every call's closing
        marker and ``</answer>``; under ``"all"`` only ``</answer>`` (several calls may follow
        each other, the turn then ends at the model's end-of-turn token)."""
        if self.multi_call == "first":
            return self.fmt.stop_strings
        return [s for s in self.fmt.stop_strings if s not in self.fmt.call_stop_strings]

    # ------------------------------------------------------------------ stepping
    def step(self, turn_text: str, turn_index: int, supporting_ids: Sequence[str] | None = None) -> StepResult:
        """One turn of one episode (see :meth:`step_batch`)."""
        support = None if supporting_ids is None else [list(supporting_ids)]
        return self.step_batch([turn_text], [turn_index], support)[0]

    def step_batch(
        self,
        turn_texts: Sequence[str],
        turn_indices: Sequence[int],
        supporting_ids: Sequence[Sequence[str]] | None = None,
    ) -> list[StepResult]:
        """One turn for each of a batch of episodes; ``turn_indices[i]`` is 0-based within
        episode i. Valid calls are executed with one ``execute_batch`` per tool for the batch.
        :class:`ValueError` naming the index when the batch itself is malformed (module docstring)."""
        _check_batch(turn_texts, turn_indices, supporting_ids)
        plans = [self._plan(text, idx) for text, idx in zip(turn_texts, turn_indices)]
        self._execute(plans)
        results = []
        for i, (plan, text) in enumerate(zip(plans, turn_texts)):
            ids = supporting_ids[i] if supporting_ids is not None else None
            support = set(map(str, ids)) if ids is not None else set()
            try:
                results.append(self._result(plan, support))
            except Exception as exc:  # noqa: BLE001 - last line of defence for the batch
                results.append(self._internal_error(text, exc))
        return results

    # ------------------------------------------------------------------ internals
    def _plan(self, text: Any, turn_index: int) -> _Plan:
        try:
            if not isinstance(text, str):
                raise TypeError(f"a turn must be a string, got {type(text).__name__}")
            parsed = select_calls(self.fmt.parse(text), self.multi_call, self.max_calls_per_turn)
            attempts = self._attempts(parsed)
            if parsed.answer is not None:
                plan = _Plan("answer", parsed.answer, attempts)
                why = "not executed: the turn gave the final answer"
            elif turn_index >= self.max_turns - 1:
                plan, why = _Plan("max_turns", None, attempts), "not executed: turn limit reached"
            elif not attempts:
                return _Plan("no_call")
            else:
                return _Plan("continue", None, attempts)
            for a in plan.attempts:  # validated, never executed
                a.error = a.error or why
            return plan
        except ImportError:  # the installation's fault (see _check): stop, never score it as the model's
            raise
        except Exception as exc:  # noqa: BLE001
            end = len(text) if isinstance(text, str) else 0
            return _Plan(
                "continue", None, [_Attempt(end, None, error=f"could not read the turn ({type(exc).__name__}: {exc})")]
            )

    def _attempts(self, parsed: ParsedTurn) -> list[_Attempt]:
        attempts = [_Attempt(end, None, error=msg) for msg, end in zip(parsed.errors, parsed.error_ends)]
        for call in parsed.calls:
            attempts.append(self._check(call))
        return sorted(attempts, key=lambda a: a.end)

    def _check(self, call: ToolCall) -> _Attempt:
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return _Attempt(call.end, call.name, error=f"unknown tool {call.name!r}; available tools: {known}")
        try:
            problems = tool.validate(call.arguments)
        except (
            ImportError
        ):  # a missing dependency is the installation's fault, not the model's: never a silent "invalid call"
            raise
        except Exception as exc:  # noqa: BLE001 - a user tool's validator must not kill the batch
            problems = [f"validation failed ({type(exc).__name__}: {exc})"]
        if problems:
            return _Attempt(call.end, call.name, error=f"invalid arguments for {call.name!r}: " + "; ".join(problems))
        return _Attempt(call.end, call.name, call=call)

    def _execute(self, plans: list[_Plan]) -> None:
        """Run every valid call of continuing turns: one ``execute_batch`` per tool."""
        groups: dict[str, list[_Attempt]] = {}
        for plan in plans:
            if plan.reason != "continue":
                continue
            for a in plan.attempts:
                if a.call is not None and a.error is None:
                    groups.setdefault(a.call.name, []).append(a)
        for name, attempts in groups.items():
            try:
                results = self.tools[name].execute_batch([a.call.arguments for a in attempts])
                results = list(results)
                if len(results) != len(attempts) or not all(isinstance(r, ToolResult) for r in results):
                    raise RuntimeError(f"execute_batch returned {len(results)} results for {len(attempts)} calls")
            except ImportError:  # a tool that cannot run here at all (a missing dependency) stops the step
                raise
            except Exception as exc:  # noqa: BLE001
                results = [ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", False) for _ in attempts]
            for a, r in zip(attempts, results):
                a.result = r

    def _result(self, plan: _Plan, support: set[str]) -> StepResult:
        outcomes, results, errors = [], [], []
        for a in plan.attempts:
            valid = a.call is not None
            if a.result is not None:
                ok = bool(a.result.success)
                meta = a.result.metadata if isinstance(a.result.metadata, dict) else {}
                ids = meta.get("ids") if isinstance(meta.get("ids"), (list, tuple)) else []
                found = ok and bool(support.intersection(map(str, ids)))
                error = None if ok else str(a.result.content)
                results.append(str(a.result.content) if ok else f"Error: {a.result.content}")
            else:
                ok, found, error = False, False, a.error or "not executed"
                errors.append(error)
            outcomes.append(CallOutcome(a.name, valid, ok, a.end, found, error))
        if plan.reason != "continue":
            return StepResult("", True, plan.reason, plan.answer, outcomes)
        return StepResult(self._observation(results, error_tail(errors)), False, "continue", None, outcomes)

    def _observation(self, results: list[str], tail: list[str]) -> str:
        """The executed calls' blocks, then the error ``tail``, within ``observation_max_chars``:
        whole blocks only (as many as fit :data:`MIN_BLOCK_CHARS` each; a dropped result is
        counted in the last block), the tail within half of the room when results exist,
        each part shortened longest first (:func:`_fit_texts`)."""
        limit, render = self.observation_max_chars, self.fmt.render_observation
        obs = render(results + tail)
        if len(obs) <= limit:
            return obs
        fits = max(
            k
            for k in range(1, len(results) + len(tail) + 1)
            if k == 1 or len(render([""] * k)) + MIN_BLOCK_CHARS * k <= limit
        )
        if fits < len(results) + len(tail):
            results, tail = _keep_blocks(results, tail, fits)
        room = limit - len(render([""] * (len(results) + len(tail))))
        tail_room = min(sum(map(len, tail)), room // 2) if results else room
        return render(_fit_texts(results, room - tail_room) + _fit_texts(tail, tail_room))

    def _internal_error(self, text: Any, exc: Exception) -> StepResult:
        end = len(text) if isinstance(text, str) else 0
        msg = f"internal environment error ({type(exc).__name__}: {exc})"
        obs = self.fmt.render_observation([f"Error: {msg}"])[: self.observation_max_chars]
        return StepResult(obs, False, "continue", None, [CallOutcome(None, False, False, end, False, msg)])
