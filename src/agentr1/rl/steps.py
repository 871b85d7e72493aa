"""The turns of a multi-turn batch: which turn each token belongs to, the anchor states that
group turns across a question's episodes (GiGPO), and step-level training rows.

Turns. In a right-padded batch (:func:`agentr1.rollout.collate`) the policy's turns are the
maximal runs of ``action_mask = 1`` tokens. Turn ``j`` of row ``b`` owns the tokens from the
start of its run up to the start of run ``j + 1`` (its action tokens, then the observation that
answers it), the last turn up to the row's end; tokens before the first run (the prompt) belong
to no turn (``-1``). :func:`turn_index` writes that as a ``[B, T]`` tensor.

Anchor states (GiGPO, arXiv 2505.10978). The state before turn ``j`` is the whole context the
policy sees when it starts that turn: the tokens ``input_ids[b, :start_j]`` (prompt, earlier
turns and observations). Two turns of episodes of the same question (same ``index``) whose
states are equal form one *step group* (:func:`anchor_groups`): every episode's first turn shares
the prompt, and a second turn joins another when both first turns wrote the same tokens and got
the same observation. With ``similarity < 1`` a state joins the first group (in row, turn order)
whose first state matches it with ``difflib.SequenceMatcher(...).ratio() >= similarity`` over
token ids, for episodes whose texts rarely coincide exactly.

Step rows (``train.sample_unit: step``, Agent-R1 v0.1.0's step-level samples): :func:`step_rows`
cuts each row into one row per turn, ``input_ids[b, :end_j]`` with every per-token tensor kept
and the loss / advantage masks limited to turn ``j``'s tokens. Each turn's tokens are then
trained on once, with the same prefix, advantage and old / reference log-probs as in the
trajectory row, so under ``token-mean`` aggregation over one mini-batch the two representations
give the same loss and gradient (the per-token terms and the global denominator are equal); the
``seq-mean-*`` modes average per row, so there they differ (a turn weighs as much as an episode).
Advantages are always computed on whole trajectories first: a critic's GAE on separate turn rows
would end each turn's chain at the turn (terminal, next value 0) instead of carrying it across
the turns of the episode.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from agentr1.rl.masks import as_bool

# per-token tensors of a prepared batch that step rows carry (the others are per row or unused)
TOKEN_KEYS = ("input_ids", "attention_mask", "action_mask", "response_mask", "loss_mask", "adv_mask", "old_logp",
              "ref_logp", "values", "advantages", "returns", "token_rewards", "logprobs",
              "behaviour_weight")


@dataclass(frozen=True)
class Steps:
    """A batch's turns: ``turn`` ``[B, T]`` (the turn owning each token, ``-1`` for none) and
    ``group`` ``[B, J]`` (the step group of turn ``j`` of row ``b``, dense ids; ``-1`` where row
    ``b`` has fewer than ``j + 1`` turns)."""

    turn: torch.Tensor
    group: torch.Tensor

    def sizes(self) -> torch.Tensor:
        """``[B, J]``: the size of each turn's step group (0 where there is no turn)."""
        valid = self.group >= 0
        if not bool(valid.any()):
            return torch.zeros_like(self.group)
        counts = torch.bincount(self.group[valid])
        return torch.where(valid, counts[self.group.clamp(min=0)], torch.zeros_like(self.group))


def turn_starts(action_mask: torch.Tensor) -> list[list[int]]:
    """Per row, the positions where a run of action tokens starts."""
    m = as_bool(action_mask)
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    starts = m & ~prev
    return [torch.nonzero(row).flatten().tolist() for row in starts]


def turn_index(action_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` long: the turn owning each token (module docstring), ``-1`` before the first."""
    m = as_bool(action_mask)
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    return torch.cumsum((m & ~prev).long(), dim=-1) - 1


def _states(input_ids: torch.Tensor, starts: list[list[int]]) -> list[list[tuple[int, ...]]]:
    return [[tuple(input_ids[b, :s].tolist()) for s in row] for b, row in enumerate(starts)]


def anchor_groups(input_ids: torch.Tensor, action_mask: torch.Tensor, index: Sequence[Hashable],
                  similarity: float = 1.0) -> Steps:
    """The batch's :class:`Steps`: turns from ``action_mask``, step groups of equal (or, with
    ``similarity < 1``, similar) states before each turn among rows of the same ``index``."""
    if not 0.0 < similarity <= 1.0:
        raise ValueError(f"similarity must be in (0, 1], got {similarity}")
    starts = turn_starts(action_mask)
    states = _states(input_ids, starts)
    B, J = len(starts), max((len(r) for r in starts), default=0)
    group = torch.full((B, max(J, 1)), -1, dtype=torch.long)
    exact: dict[tuple[Hashable, tuple[int, ...]], int] = {}
    reps: dict[Hashable, list[tuple[tuple[int, ...], int]]] = {}  # per question: (first state, group id)
    n = 0
    for b, row in enumerate(states):
        for j, state in enumerate(row):
            key = (index[b], state)
            gid = exact.get(key)
            if gid is None and similarity < 1.0:
                gid = next((g for rep, g in reps.get(index[b], ())
                            if difflib.SequenceMatcher(None, rep, state, autojunk=False).ratio() >= similarity), None)
            if gid is None:
                gid, n = n, n + 1
                reps.setdefault(index[b], []).append((state, gid))
            exact.setdefault(key, gid)
            group[b, j] = gid
    return Steps(turn_index(action_mask), group)


def step_rows(batch: dict, turn: torch.Tensor) -> dict:
    """One row per turn (module docstring): the per-token tensors of :data:`TOKEN_KEYS` present
    in ``batch``, row ``(b, j)`` cut after the last token of turn ``j`` (attention 0 beyond) and its
    ``loss_mask`` / ``adv_mask`` kept only on turn ``j``'s tokens; ``trajectory`` ``[B']`` and
    ``turn`` ``[B']`` name each row's episode and turn. Other keys are kept as they are."""
    pairs = [(b, j) for b in range(turn.shape[0]) for j in range(int(turn[b].max()) + 1)]
    rows = torch.tensor([b for b, _ in pairs], dtype=torch.long)
    turns = torch.tensor([j for _, j in pairs], dtype=torch.long)
    owned = turn[rows] == turns.unsqueeze(1)  # [B', T]: the tokens of each row's turn
    pos = torch.arange(turn.shape[1]).unsqueeze(0)
    last = torch.where(owned, pos, torch.full_like(pos, -1)).amax(dim=1, keepdim=True)
    keep = pos <= last  # the context up to the end of the turn
    out = dict(batch)
    for key in TOKEN_KEYS:
        if key not in batch:
            continue
        x = batch[key][rows]
        if key in ("loss_mask", "adv_mask"):
            x = torch.where(owned, x, torch.zeros((), dtype=x.dtype))
        elif key == "attention_mask":
            x = torch.where(keep, x, torch.zeros((), dtype=x.dtype))
        out[key] = x
    out["trajectory"], out["turn"] = rows, turns
    return out


__all__ = ["Steps", "TOKEN_KEYS", "anchor_groups", "step_rows", "turn_index", "turn_starts"]
