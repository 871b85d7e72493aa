"""Answered before the evidence: which supporting passages an episode had retrieved when it answered.

Per episode of a question with ``hops`` and supporting passages S (its ``supporting_ids``):

* **retrieved** R: the distinct ids of the passages the episode's tool calls returned, over every
  call that executed successfully (``ToolResult.metadata["ids"]``: the ids the ToolEnv tests for
  ``CallOutcome.found_support``; a calculator call returns none). Calls run before the answer (the
  turn that answers executes none of its calls), so R is what the episode had when it answered.
  The naive-RAG baseline makes no call: its R is the passages of its one retrieval (the question
  as the query) that its prompt holds.
* **support_found** = |S & R| / |S| (:func:`support_found`; None without S): the failure breakdown
  of the report tells a wrong answer with every supporting passage in context (reading) from one
  whose searches missed some (a broken chain) or all of them;
* **early_answer** = 1.0 when hops >= 2, the episode answered, S is not empty and S is not a
  subset of R (some supporting passage had not been retrieved when it answered); 0.0 otherwise:
  a single-hop question, an episode without an answer and a question without supporting passages
  (the tool task's arithmetic questions) are never early.

A trajectory keeps per call only ``found_support`` (some supporting passage came back), which
cannot tell one supporting passage retrieved twice from two retrieved once. So the evaluation
records the ids while it runs: :func:`recording` wraps the env's tools for a block (each executed
call's result is kept) and gives an env (:attr:`RetrievalLog.env`) whose steps file those ids
under the calls' :class:`CallOutcome`. What the env does, the rollouts and what a trajectory
stores are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from agentr1.env.base import CallOutcome, StepResult, ToolResult

MULTI_HOP = 2  # the fewest hops of a multi-hop question


def early_answer(question: Mapping[str, Any], answered: bool, retrieved: Iterable[str]) -> float:
    """``early_answer`` of one episode (module docstring): 1.0 when the question has ``hops`` >= 2
    and ``supporting_ids``, the episode ``answered`` and ``retrieved`` lacks one of them, else 0.0."""
    hops = question.get("hops")
    support = {str(s) for s in question.get("supporting_ids") or ()}
    if hops is None or int(hops) < MULTI_HOP or not answered or not support:
        return 0.0
    return float(not support <= {str(r) for r in retrieved})


def support_found(question: Mapping[str, Any], retrieved: Iterable[str]) -> float | None:
    """The share of the question's supporting passages S that the episode retrieved (|S & R| / |S|),
    None for a question without supporting passages: with a wrong answer, 1.0 is a *reading* failure
    (every passage was there), 0 < x < 1 a chain that broke on the way, 0.0 a search that never found
    the first passage."""
    support = {str(s) for s in question.get("supporting_ids") or ()}
    if not support:
        return None
    return len(support & {str(r) for r in retrieved}) / len(support)


def result_ids(result: ToolResult) -> tuple[str, ...]:
    """The passage ids of a successful tool result (``metadata["ids"]``, as the ToolEnv reads them
    for ``found_support``); ``()`` for a failed one or one without ids."""
    meta = result.metadata if isinstance(result.metadata, dict) else {}
    ids = meta.get("ids")
    return tuple(map(str, ids)) if result.success and isinstance(ids, (list, tuple)) else ()


class RetrievalLog:
    """The ids each executed tool call returned while :func:`recording` runs.

    ``env``: the env to roll out in; each of its steps pairs the executed calls' outcomes with
    the results the tools returned. :meth:`retrieved`: an episode's R. :meth:`take`: the results
    of calls made outside a step (naive RAG's retrieval), in call order."""

    def __init__(self, env: Any) -> None:
        self.env = _RecordingEnv(env, self)
        self._results: dict[str, list[ToolResult]] = {}
        self._ids: dict[int, tuple[CallOutcome, tuple[str, ...]]] = {}  # id(outcome) -> (outcome, ids)

    def take(self, tool: str) -> list[tuple[str, ...]]:
        """The ids of each call of ``tool`` made since the last step or take (:func:`result_ids`),
        in call order; they are then forgotten."""
        return [result_ids(r) for r in self._results.pop(tool, [])]

    def retrieved(self, traj: Any) -> set[str]:
        """R of an episode rolled out in :attr:`env` (``traj.outcomes``); ``RuntimeError`` for a
        successful call this log did not see (the episode ran in another env)."""
        out: set[str] = set()
        for turn in traj.outcomes:
            for o in turn:
                entry = self._ids.get(id(o))
                if entry is not None and entry[0] is o:
                    out.update(entry[1])
                elif o.success:
                    raise RuntimeError(
                        f"episode {getattr(traj, 'qid', '?')}: a successful {o.name} call that the "
                        "retrieval log did not record (roll out in RetrievalLog.env)"
                    )
        return out

    def _file(self, results: Sequence[StepResult]) -> None:
        """Pair one step's executed calls with the tools' results. The ToolEnv runs each tool once
        per step on the valid attempts of the turns that continue, in batch order then text order:
        the order of the valid outcomes of the results that are not done. A tool that failed as a
        whole (it raised, or returned a wrong number of results) had every call failed by the env:
        those calls retrieved nothing."""
        executed: dict[str, list[CallOutcome]] = {}
        for res in results:
            if not res.done:
                for o in res.outcomes:
                    if o.valid:
                        executed.setdefault(str(o.name), []).append(o)
        pending, self._results = self._results, {}
        for tool in sorted(executed.keys() | pending.keys()):
            outs, got = executed.get(tool, []), pending.get(tool, [])
            if len(outs) == len(got):
                ids = [result_ids(r) for r in got]
            elif not any(o.success for o in outs):
                ids = [()] * len(outs)
            else:
                raise RuntimeError(
                    f"tool {tool!r} returned {len(got)} results for {len(outs)} executed calls: "
                    "cannot tell which call retrieved what"
                )
            for o, i in zip(outs, ids):
                self._ids[id(o)] = (o, i)


class _RecordingEnv:
    """``env`` whose steps file the executed calls' ids in ``log``; everything else is ``env``'s."""

    def __init__(self, env: Any, log: RetrievalLog) -> None:
        self._env, self._log = env, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def step_batch(self, turn_texts, turn_indices, supporting_ids=None) -> list[StepResult]:
        self._log._results.clear()  # calls made outside a step are not this step's
        results = self._env.step_batch(turn_texts, turn_indices, supporting_ids)
        self._log._file(results)
        return results

    def step(self, turn_text, turn_index, supporting_ids=None) -> StepResult:
        support = None if supporting_ids is None else [list(supporting_ids)]
        return self.step_batch([turn_text], [turn_index], support)[0]


class _RecordingTool:
    """``tool`` whose executed calls' results are kept in ``log`` under ``name``."""

    def __init__(self, name: str, tool: Any, log: RetrievalLog) -> None:
        self._name, self._tool, self._log = name, tool, log

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._tool, attr)

    def execute_batch(self, batch):
        results = list(self._tool.execute_batch(batch))
        self._log._results.setdefault(self._name, []).extend(results)
        return results

    def execute(self, args):
        return self.execute_batch([args])[0]


@contextmanager
def recording(env: Any) -> Iterator[RetrievalLog]:
    """A :class:`RetrievalLog` of ``env``'s tool calls for the block: the env's tools are wrapped
    (each keeps its executed calls' results) and restored when the block ends."""
    log = RetrievalLog(env)
    tools = env.tools
    env.tools = {name: _RecordingTool(name, tool, log) for name, tool in tools.items()}
    try:
        yield log
    finally:
        env.tools = tools
