"""Masks, masked statistics and the token-level reward tensor shared by estimators and losses.

Tensor conventions (used by :mod:`agentr1.rl.advantages` and :mod:`agentr1.rl.losses`)
-------------------------------------------------------------------------------------
Every per-token tensor is ``[B, T]``, right-padded, and aligned *by position*: entry ``[b, t]`` of
``token_rewards``, ``values``, ``logp``, ``old_logp``, ``ref_logp``, ``advantages`` all refer to
the same token ``t`` of sequence ``b``. The layout may be the response alone or
``prompt + response`` (as :func:`agentr1.rollout.trajectory.collate` builds it): nothing here ever
looks at a token whose mask is 0, so prompt positions just need mask 0.

* ``response_mask`` ``[B, T]``: 1 on a real response token (policy turn *or* observation), 0 on
  prompt and padding.
* ``action_mask`` ``[B, T]``: 1 on a token the policy sampled, 0 on observation/template tokens
  the environment injected, on the prompt and on padding. Always ``action_mask <= response_mask``.
* ``token_rewards`` ``[B, T]``: the outcome reward on the **last action token** of each sequence
  plus the process rewards on the tokens that **close tool calls** (:func:`build_token_rewards`).
* Masks may be bool, int or float; a non-zero entry counts as 1.

Which mask each function receives is the caller's switch (:func:`select_masks`):

==================  ======================  ===========================================
switch              on (Agent-R1)           off (ablation)
==================  ======================  ===========================================
``loss_mask``       ``action_mask``         ``response_mask``  (policy loss, KL, entropy)
``advantage_mask``  ``action_mask``         ``response_mask``  (recursion, whitening, broadcast)
==================  ======================  ===========================================

Masked statistics: :func:`masked_mean`, :func:`masked_var` (unbiased, Bessel-corrected, as in
verl's ``masked_var``) and :func:`masked_whiten` read only the entries where the mask is 1, and
use ``torch.where`` rather than multiplication so that ``nan``/``inf`` at masked-out positions can
never leak into a result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

WHITEN_EPS = 1e-8


def as_bool(mask: torch.Tensor) -> torch.Tensor:
    """``mask != 0`` as a bool tensor."""
    return mask if mask.dtype == torch.bool else mask != 0


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(x * mask)`` over ``dim`` (all entries when ``None``), ignoring ``x`` where mask is 0."""
    m = as_bool(mask)
    z = torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return z.sum() if dim is None else z.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(x * mask) / sum(mask)``; 0 where the mask is empty (no ``nan``)."""
    m = as_bool(mask)
    n = m.sum() if dim is None else m.sum(dim)
    return masked_sum(x, m, dim) / n.clamp(min=1).to(x.dtype)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries of ``x`` (a scalar), Bessel-corrected when ``unbiased``:
    ``sum(m * (x - mean)^2) / (n - 1)`` with ``n = sum(m)``. Defined as 0 when ``n <= 1`` (verl
    raises there; a batch with one action token is legal here and whitens to 0)."""
    m = as_bool(mask)
    n = int(m.sum())
    if n == 0:
        raise ValueError("masked_var: the mask selects no entries")
    mean = masked_mean(x, m)
    sq = masked_sum((x - mean) ** 2, m)
    if unbiased:
        return sq / (n - 1) if n > 1 else torch.zeros((), dtype=x.dtype, device=x.device)
    return sq / n


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = WHITEN_EPS
) -> torch.Tensor:
    """Whiten with statistics over the masked entries only (unbiased variance)::

        mu = mean_{m=1}(x),  s2 = var_{m=1}(x, unbiased)
        out = (x - mu) / sqrt(s2 + eps)        (shift_mean=True)
        out = (x - mu) / sqrt(s2 + eps) + mu   (shift_mean=False: rescale only)

    Entries where the mask is 0 come back as 0. Raises ``ValueError`` on an empty mask."""
    m = as_bool(mask)
    mean = masked_mean(x, m)
    var = masked_var(x, m)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(m, out, torch.zeros((), dtype=out.dtype, device=out.device))


def check_subset(action_mask: torch.Tensor, response_mask: torch.Tensor) -> None:
    """Raise ``ValueError`` unless shapes match and every action token is a response token."""
    if action_mask.shape != response_mask.shape:
        raise ValueError(f"action_mask {tuple(action_mask.shape)} vs response_mask {tuple(response_mask.shape)}")
    if bool((as_bool(action_mask) & ~as_bool(response_mask)).any()):
        raise ValueError("action_mask must be a subset of response_mask (an action token outside the response)")


def select_masks(
    action_mask: torch.Tensor, response_mask: torch.Tensor, loss_mask: bool, advantage_mask: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two masks of the Agent-R1 switches, as ``(loss_mask_tensor, adv_mask_tensor)``.

    ``loss_mask=True`` -> the losses (policy, KL, entropy) aggregate over ``action_mask``;
    ``False`` -> over ``response_mask`` (observations become training targets: the ablation).
    ``advantage_mask=True`` -> estimators recurse / whiten / broadcast over ``action_mask``;
    ``False`` -> over ``response_mask``. Both are bool tensors; ``action_mask`` must be a subset of
    ``response_mask``."""
    check_subset(action_mask, response_mask)
    a, r = as_bool(action_mask), as_bool(response_mask)
    return (a if loss_mask else r), (a if advantage_mask else r)


def response_mask_from(attention_mask: torch.Tensor, response_start: torch.Tensor) -> torch.Tensor:
    """``response_mask`` for a ``prompt + response`` batch (``collate``'s layout): 1 where
    ``attention_mask`` is 1 and the position is ``>= response_start[b]``; bool ``[B, L]``."""
    pos = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    return as_bool(attention_mask) & (pos.unsqueeze(0) >= response_start.to(attention_mask.device).unsqueeze(-1))


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` long: position of the last non-zero entry of each row, -1 for an empty row."""
    m = as_bool(mask)
    T = m.shape[-1]
    pos = torch.arange(T, device=m.device).expand_as(m)
    return torch.where(m, pos, torch.full_like(pos, -1)).max(dim=-1).values


ProcessRewards = torch.Tensor | Iterable[tuple[int, int, float]] | None


def build_token_rewards(
    outcome: torch.Tensor | Sequence[float],
    last_action: torch.Tensor,
    process: ProcessRewards = None,
    *,
    seq_len: int | None = None,
) -> torch.Tensor:
    """The token-level reward tensor ``[B, T]`` every estimator consumes::

        R[b, t] = outcome[b] * [t == last_action_index[b]] + sum of process rewards placed at (b, t)

    ``last_action`` is either the ``action_mask`` ``[B, T]`` (the outcome then goes on its last
    1 in each row) or a ``[B]`` long tensor of positions (then ``seq_len`` = T is required).
    ``process`` is ``None``, an iterable of ``(b, t, value)`` triples (``t`` = the token that
    closes the tool call, e.g. from ``Trajectory.token_index_for_char``; repeated positions add
    up), or a dense ``[B, T]`` tensor added as is (``collate``'s ``process_rewards``).

    When ``last_action`` is a mask, every process reward must sit on an action token: a reward on
    a mask-0 token would be silently ignored by the masked estimators, so it raises
    ``ValueError``. A row with no action token (nowhere to put the outcome) also raises.
    """
    out = torch.as_tensor(outcome, dtype=torch.float32)
    if out.dim() != 1:
        raise ValueError(f"outcome must be [B], got shape {tuple(out.shape)}")
    B = out.shape[0]
    out, T, idx, amask = _last_action_index(out, last_action, seq_len)
    rewards = torch.zeros((B, T), dtype=torch.float32, device=idx.device)
    rewards[torch.arange(B, device=idx.device), idx] = out.to(idx.device)
    if process is None:
        return rewards
    return _add_process_rewards(rewards, process, amask, B, T)


def _last_action_index(
    out: torch.Tensor, last_action: torch.Tensor, seq_len: int | None
) -> tuple[torch.Tensor, int, torch.Tensor, torch.Tensor | None]:
    """Where the outcome goes: ``last_action_index[b]`` (the last 1 of the ``action_mask`` row, or
    the given ``[B]`` position) and the width ``T``, checked to lie in ``[0, T)``. Returns
    ``(outcome, T, last_action_index, action_mask)``: the outcome moved to the mask's device, and
    the bool ``action_mask`` (``None`` for ``[B]`` positions)."""
    B = out.shape[0]
    amask: torch.Tensor | None = None
    if last_action.dim() == 2:
        amask = as_bool(last_action)
        if amask.shape[0] != B:
            raise ValueError(f"outcome has {B} rows, action_mask {amask.shape[0]}")
        T = amask.shape[1]
        if seq_len is not None and seq_len != T:
            raise ValueError(f"seq_len {seq_len} != action_mask width {T}")
        idx = last_index(amask)
        out = out.to(last_action.device)
    elif last_action.dim() == 1:
        if seq_len is None:
            raise ValueError("seq_len is required when last_action is a [B] index tensor")
        T, idx = seq_len, last_action.long()
        if idx.shape[0] != B:
            raise ValueError(f"outcome has {B} rows, last_action {idx.shape[0]}")
    else:
        raise ValueError(f"last_action must be [B, T] mask or [B] indices, got shape {tuple(last_action.shape)}")
    if bool((idx < 0).any()) or bool((idx >= T).any()):
        bad = torch.nonzero((idx < 0) | (idx >= T)).flatten().tolist()
        raise ValueError(f"rows {bad} have no valid last action token (empty response?)")
    return out, T, idx, amask


def _add_process_rewards(
    rewards: torch.Tensor,
    process: torch.Tensor | Iterable[tuple[int, int, float]],
    amask: torch.Tensor | None,
    B: int,
    T: int,
) -> torch.Tensor:
    """``R[b, t] += process rewards placed at (b, t)``: a dense ``[B, T]`` tensor added as is
    (out of place), or ``(b, t, value)`` triples added in place (repeated positions add up); each
    must lie in ``[B, T]`` and, when ``amask`` is given, on an action token."""
    if isinstance(process, torch.Tensor):
        if process.shape != (B, T):
            raise ValueError(f"dense process rewards must be [{B}, {T}], got {tuple(process.shape)}")
        proc = process.to(rewards)
        if amask is not None and bool(((proc != 0) & ~amask).any()):
            raise ValueError("a process reward sits on a token outside the action mask")
        return rewards + proc
    for b, t, v in process:
        if not (0 <= b < B and 0 <= t < T):
            raise ValueError(f"process reward at ({b}, {t}) outside [{B}, {T}]")
        if amask is not None and not bool(amask[b, t]):
            raise ValueError(f"process reward at ({b}, {t}) is not on an action token")
        rewards[b, t] += float(v)
    return rewards
