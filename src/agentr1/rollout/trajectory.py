"""The trajectory: exactly what the policy did in one episode, token by token.

``response_ids`` interleaves the policy's sampled tokens (``action_mask`` 1) with the tokens of
the observations the environment returned (``action_mask`` 0), in order. ``logprobs`` holds the
sampling-time log-probability of every action token (0.0 elsewhere). Turn ``k`` of the policy is
``response_ids[turn_spans[k][0]:turn_spans[k][1]]``; decoding it gives ``turn_texts[k]``, the
exact text the environment saw. ``turn_char_ends[k][i]`` is the length of the decode of the first
``i + 1`` tokens of that turn, which maps a character of the turn text (e.g. the closing ``>`` of
a tool call, ``CallOutcome.end - 1``) to the response token holding it
(:meth:`Trajectory.token_index_for_char`) - where process rewards go.

Storage: Parquet (one row per trajectory, explicit schema; the per-turn tool outcomes are a JSON
string column so new ``CallOutcome`` fields need no schema change) and JSONL (one object a line).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from agentr1.env.base import CallOutcome
from agentr1.io import atomic_path


@dataclass
class Trajectory:
    """One multi-turn episode (see the module docstring for the alignment of the fields).

    reason:          why it ended: the env's reason ("answer", "no_call", "max_turns") or
                     "max_length" (total token limit reached; the response is truncated);
    outcome_reward:  scalar reward, filled later by the reward function (None until then);
    process_rewards: per response token, filled later (None until then);
    sample_index:    index within the group of samples drawn for the same question;
    outcomes:        per policy turn, one :class:`CallOutcome` per call attempt (saved as dicts:
                     :meth:`to_dict` / :meth:`from_dict`).
    """

    qid: str
    question: str
    golds: list[str]
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_texts: list[str] = field(default_factory=list)
    turn_char_ends: list[list[int]] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    outcomes: list[list[CallOutcome]] = field(default_factory=list)
    answer: str | None = None
    reason: str = ""
    sample_index: int = 0
    outcome_reward: float | None = None
    process_rewards: list[float] | None = None
    prompt_text: str = ""
    response_text: str = ""

    # ------------------------------------------------------------------ derived views
    @property
    def num_turns(self) -> int:
        return len(self.turn_spans)

    @property
    def num_action_tokens(self) -> int:
        return sum(self.action_mask)

    @property
    def input_ids(self) -> list[int]:
        """Prompt followed by response: the sequence a training forward pass sees."""
        return self.prompt_ids + self.response_ids

    def token_index_for_char(self, turn: int, char_index: int) -> int:
        """Response position of the token of policy turn ``turn`` holding character ``char_index``
        of that turn's text (pass ``CallOutcome.end - 1`` for the call's closing character).

        Raises ``IndexError`` when the turn or the character does not exist.
        """
        ends = self.turn_char_ends[turn]
        if not 0 <= char_index < (ends[-1] if ends else 0):
            raise IndexError(f"char {char_index} outside turn {turn} (length {ends[-1] if ends else 0})")
        return self.turn_spans[turn][0] + bisect.bisect_right(ends, char_index)

    def check(self) -> None:
        """Raise ``ValueError`` when the per-token fields are misaligned (cheap invariant check)."""
        n = len(self.response_ids)
        if len(self.action_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"{self.qid}: response/action_mask/logprobs lengths {n}/{len(self.action_mask)}/{len(self.logprobs)}"
            )
        if self.process_rewards is not None and len(self.process_rewards) != n:
            raise ValueError(f"{self.qid}: process_rewards has {len(self.process_rewards)} entries for {n} tokens")
        span_tokens = sum(e - s for s, e in self.turn_spans)
        if span_tokens != sum(self.action_mask):
            raise ValueError(f"{self.qid}: turn spans cover {span_tokens} tokens, action_mask {sum(self.action_mask)}")

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values; each ``CallOutcome`` becomes the dict of its fields."""
        d = asdict(self)
        d["turn_spans"] = [list(s) for s in self.turn_spans]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        """The inverse of :meth:`to_dict` (unknown keys are ignored)."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        kwargs["turn_spans"] = [tuple(s) for s in kwargs.get("turn_spans", [])]
        kwargs["outcomes"] = [
            [_outcome(o, d.get("qid"), k) for o in turn] for k, turn in enumerate(kwargs.get("outcomes", []))
        ]
        return cls(**kwargs)


def _outcome(o: Any, qid: Any, turn: int) -> CallOutcome:
    try:
        return CallOutcome(**o)
    except TypeError as exc:
        raise ValueError(
            f"trajectory {qid}: outcomes[{turn}] holds {o!r}, not the fields of a CallOutcome "
            f"({', '.join(f.name for f in fields(CallOutcome))}): {exc}"
        ) from None


PARQUET_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("question", pa.string()),
        ("golds", pa.list_(pa.string())),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("action_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float64())),
        ("turn_spans", pa.list_(pa.list_(pa.int32()))),
        ("turn_texts", pa.list_(pa.string())),
        ("turn_char_ends", pa.list_(pa.list_(pa.int32()))),
        ("observations", pa.list_(pa.string())),
        ("outcomes", pa.string()),
        ("answer", pa.string()),
        ("reason", pa.string()),
        ("sample_index", pa.int32()),
        ("outcome_reward", pa.float64()),
        ("process_rewards", pa.list_(pa.float64())),
        ("prompt_text", pa.string()),
        ("response_text", pa.string()),
    ]
)


def save_trajectories(trajs: list[Trajectory], path: str | Path) -> Path:
    """Write ``trajs`` to ``path``; the format follows the suffix (``.parquet`` or ``.jsonl``)."""
    path = Path(path)
    if path.suffix == ".parquet":
        rows = []
        for t in trajs:
            row = t.to_dict()
            row["outcomes"] = json.dumps(row["outcomes"], sort_keys=True)
            rows.append(row)
        table = pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA)
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd", write_statistics=False)
    elif path.suffix == ".jsonl":
        with atomic_path(path) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                for t in trajs:
                    f.write(json.dumps(t.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    else:
        raise ValueError(f"unknown trajectory file type {path.suffix!r}; use .parquet or .jsonl")
    return path


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read a file written by :func:`save_trajectories`."""
    path = Path(path)
    if path.suffix == ".parquet":
        out = []
        for row in pq.read_table(path).to_pylist():
            row["outcomes"] = json.loads(row["outcomes"])
            out.append(Trajectory.from_dict(row))
        return out
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            return [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]
    raise ValueError(f"unknown trajectory file type {path.suffix!r}; use .parquet or .jsonl")


def collate(trajs: list[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded training batch over ``prompt + response`` (length L = longest sequence).

    Keys (all ``[B, L]`` unless noted): ``input_ids``; ``attention_mask`` (1 on real tokens);
    ``action_mask`` (1 on policy-sampled response tokens, 0 on prompt, observations and padding);
    ``logprobs`` (sampling-time log-prob of the token *at* that position, 0 elsewhere);
    ``response_start`` ``[B]`` (index of the first response token = prompt length);
    ``response_length`` ``[B]``. When every trajectory has them, also ``outcome_rewards`` ``[B]``
    and ``process_rewards`` ``[B, L]`` (aligned like ``logprobs``).

    Position ``i``'s token is predicted by the logits at ``i - 1``: log-probs recomputed by a
    forward pass are ``log_softmax(logits[:, :-1]).gather(input_ids[:, 1:])``, aligned with
    ``logprobs[:, 1:]``.
    """
    if not trajs:
        raise ValueError("collate needs at least one trajectory")
    B = len(trajs)
    L = max(len(t.prompt_ids) + len(t.response_ids) for t in trajs)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention = torch.zeros((B, L), dtype=torch.long)
    action = torch.zeros((B, L), dtype=torch.long)
    logprobs = torch.zeros((B, L), dtype=torch.float32)
    with_process = all(t.process_rewards is not None for t in trajs)
    process = torch.zeros((B, L), dtype=torch.float32) if with_process else None
    start = torch.zeros(B, dtype=torch.long)
    length = torch.zeros(B, dtype=torch.long)
    for b, t in enumerate(trajs):
        p, r = len(t.prompt_ids), len(t.response_ids)
        input_ids[b, : p + r] = torch.tensor(t.prompt_ids + t.response_ids, dtype=torch.long)
        attention[b, : p + r] = 1
        action[b, p : p + r] = torch.tensor(t.action_mask, dtype=torch.long)
        logprobs[b, p : p + r] = torch.tensor(t.logprobs, dtype=torch.float32)
        if process is not None:
            process[b, p : p + r] = torch.tensor(t.process_rewards, dtype=torch.float32)
        start[b], length[b] = p, r
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "action_mask": action,
        "logprobs": logprobs,
        "response_start": start,
        "response_length": length,
    }
    if process is not None:
        batch["process_rewards"] = process
    if all(t.outcome_reward is not None for t in trajs):
        batch["outcome_rewards"] = torch.tensor([t.outcome_reward for t in trajs], dtype=torch.float32)
    return batch
