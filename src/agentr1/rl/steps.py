"""The turns of a multi-turn batch: which turn each token belongs to, the anchor states that
group turns across a question's episodes (GiGPO), and step-level training rows.

Turns. In a right-padded batch (:func:`agentr1.rollout.collate`) the policy's turns are the
maximal runs of ``action_mask = 1`` tokens. Turn ``j`` of row ``b`` owns the tokens from the
start of its run up to the start of run ``j + 1`` (its action tokens, then the observation that
answers it), the last turn up to the row's end; tokens before the first run (the prompt) belong
to no turn (``-1``). :func:`turn_index` writes that as a ``[B, T]`` tensor.

Anchor states (GiGPO, arXiv 2505.10978). ``anchor`` says what "the state before turn ``j``" is:

* ``context`` (this project's default): the whole context the policy sees when it starts the turn,
  ``input_ids[b, :start_j]`` (prompt, earlier turns and observations);
* ``observation`` (verl-agent's ``anchor_obs``): only the environment's last word before the turn,
  the observation tokens ``input_ids[b, end_(j-1):start_j]`` between the end of turn ``j - 1``'s
  action run and the start of turn ``j``'s (the prompt for ``j = 0``).

Turns of episodes of the same question (same ``index``) whose states are equal form one *step group*
(:func:`anchor_groups`; states are hashed first, so exact matching costs one dict lookup per turn):
every episode's first turn shares the prompt, and with ``context`` a second turn joins another when
both first turns wrote the same tokens and got the same observation. With ``similarity < 1`` a state
that matches no group exactly joins the first group (in order of creation) whose representative (its
first state) has ``difflib.SequenceMatcher(None, state, representative).ratio() >= similarity`` -
verl-agent's rule (``are_similar(obs, rep)``: the new state first, difflib's default ``autojunk``;
the ratio is not symmetric in its arguments), over token ids where verl-agent compares the
observation's text. Three bounds keep it cheap (``bench/gigpo_similarity.py``): only the last
``window`` tokens of the two states are compared (``None`` = all); difflib's ``real_quick_ratio``
(O(1)) rejects a representative before any real comparison; and a state gets at most ``max_compare``
real comparisons (``quick_ratio``, then the quadratic ``ratio``), with the representatives in order
of creation, before it opens a group of its own (``None`` = no cap). A step's similarity work is
then at most ``turns x max_compare`` comparisons of ``window`` tokens, whatever the states' length
or the group size. Under ``context`` a turn never joins a group that already holds a turn of its own
episode: a later state extends the same episode's earlier one, so a similarity test would compare a
decision with its own past (exact equality cannot, the lengths differ). Under ``observation``
verl-agent's rule is kept: an episode that meets the same observation twice has both turns in one
group.

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

from agentr1.rl.batches import TOKEN_KEYS
from agentr1.rl.masks import as_bool


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


def _runs(action_mask: torch.Tensor) -> list[list[tuple[int, int]]]:
    """Per row, the ``(start, end)`` (end exclusive) of each run of action tokens."""
    m = as_bool(action_mask)
    prev, nxt = torch.zeros_like(m), torch.zeros_like(m)
    prev[:, 1:], nxt[:, :-1] = m[:, :-1], m[:, 1:]
    starts = [torch.nonzero(r).flatten().tolist() for r in m & ~prev]
    ends = [(torch.nonzero(r).flatten() + 1).tolist() for r in m & ~nxt]
    return [list(zip(s, e)) for s, e in zip(starts, ends)]


def turn_index(action_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` long: the turn owning each token (module docstring), ``-1`` before the first."""
    m = as_bool(action_mask)
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    return torch.cumsum((m & ~prev).long(), dim=-1) - 1


ANCHORS = ("context", "observation")


def anchor_states(
    input_ids: torch.Tensor, action_mask: torch.Tensor, anchor: str = "context"
) -> list[list[tuple[int, ...]]]:
    """Per row, the state before each of its turns as a tuple of token ids (module docstring)."""
    if anchor not in ANCHORS:
        raise ValueError(f"anchor must be one of {ANCHORS}, got {anchor!r}")
    out = []
    for b, row in enumerate(_runs(action_mask)):
        ids = input_ids[b].tolist()
        if anchor == "context":
            out.append([tuple(ids[:s]) for s, _ in row])
        else:
            out.append([tuple(ids[(row[j - 1][1] if j else 0) : s]) for j, (s, _) in enumerate(row)])
    return out


def anchor_groups(
    input_ids: torch.Tensor,
    action_mask: torch.Tensor,
    index: Sequence[Hashable],
    similarity: float = 1.0,
    anchor: str = "context",
    window: int | None = None,
    max_compare: int | None = None,
) -> Steps:
    """The batch's :class:`Steps`: turns from ``action_mask``, step groups of equal (or, with
    ``similarity < 1``, similar over the last ``window`` tokens, at most ``max_compare`` real
    comparisons per turn) ``anchor`` states before each turn among rows of the same ``index``
    (module docstring)."""
    if not 0.0 < similarity <= 1.0:
        raise ValueError(f"similarity must be in (0, 1], got {similarity}")
    for name, v in (("window", window), ("max_compare", max_compare)):
        if v is not None and v < 1:
            raise ValueError(f"{name} must be >= 1 (or None for no bound), got {v}")
    states = anchor_states(input_ids, action_mask, anchor)
    B, J = len(states), max((len(r) for r in states), default=0)
    group = torch.full((B, max(J, 1)), -1, dtype=torch.long)
    exact: dict[tuple[Hashable, tuple[int, ...]], int] = {}
    reps: dict[
        Hashable, list[tuple[difflib.SequenceMatcher, int]]
    ] = {}  # per question: (matcher on its representative, group id)
    members: list[set[int]] = []  # per group: the rows (episodes) with a turn in it
    cut = (lambda st: st) if window is None else (lambda st: st[-window:])
    n = 0
    for b, row in enumerate(states):
        for j, state in enumerate(row):
            key = (index[b], state)
            gid = exact.get(key)
            if gid is None and similarity < 1.0:
                tail, tried = cut(state), 0
                for matcher, g in reps.get(index[b], ()):
                    if anchor == "context" and b in members[g]:
                        continue  # a later state of the same episode: never its own baseline
                    matcher.set_seq1(tail)  # verl-agent's order: (state, representative)
                    if matcher.real_quick_ratio() < similarity:
                        continue
                    if matcher.quick_ratio() >= similarity and matcher.ratio() >= similarity:
                        gid = g
                        break
                    tried += 1
                    if max_compare is not None and tried >= max_compare:
                        break
            if gid is None:
                gid, n = n, n + 1
                if similarity < 1.0:  # the representative is each comparison's second sequence: analysed once
                    reps.setdefault(index[b], []).append((difflib.SequenceMatcher(None, None, cut(state)), gid))
                members.append(set())
            exact.setdefault(key, gid)
            members[gid].add(b)
            group[b, j] = gid
    return Steps(turn_index(action_mask), group)


def step_rows(batch: dict, turn: torch.Tensor) -> dict:
    """One row per turn (module docstring): the per-token tensors of :data:`agentr1.rl.batches.TOKEN_KEYS` present
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


__all__ = ["ANCHORS", "Steps", "anchor_groups", "anchor_states", "step_rows", "turn_index"]
