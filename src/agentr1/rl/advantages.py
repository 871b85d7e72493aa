"""Advantage estimators, registered by name (verl ``core_algos`` style, multi-turn-correct).

Every estimator is a pure function of padded ``[B, T]`` tensors (conventions in
:mod:`agentr1.rl.masks`) and returns ``(advantages [B, T], returns [B, T])``, both exactly 0
outside ``mask``. ``mask`` is the *recursion mask*: ``action_mask`` with the advantage mask on
(Agent-R1), ``response_mask`` with it off (the ablation); see :func:`agentr1.rl.masks.select_masks`.

Multi-turn semantics of the mask. The tokens where ``mask = 1`` form the chain the estimator sees,
in order; a token with ``mask = 0`` (an observation, the prompt, padding) is *not a time step*:
its reward and value are ignored, nothing is written there, and the running return / GAE / "next
value" carry across it unchanged. (verl 0.7.0's GAE multiplied the running GAE by the mask and so
reset it at every observation, cutting credit between turns.) Hence, with the mask on,
inserting observation tokens anywhere leaves every action token's advantage and return unchanged.
Rewards belong on mask tokens (:func:`agentr1.rl.masks.build_token_rewards` enforces that for
action tokens). The last mask token of a sequence is terminal (its next value is 0; truncated
episodes are not bootstrapped).

Outcome estimators (``grpo``, ``rloo``, ``reinforce_pp_baseline``) reduce each sequence to a
score ``s_b = sum_t mask[b,t] * r[b,t]`` (outcome + process rewards + any KL penalty) and
broadcast a per-sequence advantage onto its mask tokens. For them ``returns = advantages``.

Groups. ``index`` ``[B]`` (an int tensor or a list of hashables, e.g. question ids) says which
samples answer the same prompt. For group ``g`` with ``n_g`` members: ``mean_g`` is the plain
mean and ``std_g`` the **unbiased** (Bessel, ``n - 1``) standard deviation, as ``torch.std`` in
verl. A **singleton group** (``n_g = 1``) has no baseline to compare against: its advantage is
**0** in every group estimator (verl instead passes the raw score through with mean 0 / std 1).

Registry: :data:`agentr1.registry.ESTIMATORS` names every estimator and holds what it declares
(``needs_values``: a critic; ``grouped``: ``index``); :func:`compute_advantage` is the
dispatcher a trainer calls with the run's config.

One module of more than 400 lines on purpose: the estimators share the group and sequence helpers
(:func:`group_ids`, :func:`group_stats`, :func:`group_normalized`, :func:`sequence_scores`) and the
multi-turn mask semantics above, which each states against the same conventions; split per
estimator, those helpers and the checks that every estimator is 0 off the mask would sit apart.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from agentr1.registry import ESTIMATORS
from agentr1.rl.masks import WHITEN_EPS, as_bool, masked_sum, masked_whiten
from agentr1.rl.stats import step_stats
from agentr1.rl.steps import Steps

# Shared knobs a trainer may pass to any estimator; each is forwarded only to estimators whose
# signature takes it (the signature is the estimator's list of knobs). Anything else unknown to
# the chosen estimator is a TypeError (a typo, not a knob).
SHARED_OPTIONS = frozenset(
    {
        "values",
        "index",
        "gamma",
        "lam",
        "whiten",
        "norm_by_std",
        "eps",
        "steps",
        "step_weight",
        "episode_stats",
        "diagnostics",
    }
)


def compute_advantage(
    name: str, token_rewards: torch.Tensor, mask: torch.Tensor, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run estimator ``name`` of :data:`~agentr1.registry.ESTIMATORS`. Keyword arguments in
    :data:`SHARED_OPTIONS` (``values``, ``index``, ``gamma``, ``lam``, ``whiten``,
    ``norm_by_std``, ``eps``, ``steps``, ``step_weight``, ``episode_stats``, ``diagnostics``) are passed only where the estimator
    accepts them, so one config serves every estimator; the input it declares it needs
    (``values`` for ``needs_values``, ``index`` for ``grouped``, ``steps`` for ``stepwise``)
    missing or ``None`` raises ``ValueError``; any other keyword the
    estimator does not take raises ``TypeError`` (:meth:`~agentr1.registry.Registry.call`)."""
    meta = ESTIMATORS.spec(name).meta
    for need, flag in (("values", "needs_values"), ("index", "grouped"), ("steps", "stepwise")):
        if meta.get(flag) and kwargs.get(need) is None:
            raise ValueError(f"advantage estimator {name!r} needs {need!r}")
    return ESTIMATORS.call(name, token_rewards=token_rewards, mask=mask, shared=SHARED_OPTIONS, **kwargs)


# ----------------------------------------------------------------------------- helpers
def _zero(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros((), dtype=x.dtype, device=x.device)


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.float()


def _check(token_rewards: torch.Tensor, mask: torch.Tensor, *others: torch.Tensor) -> None:
    if token_rewards.dim() != 2:
        raise ValueError(f"token_rewards must be [B, T], got {tuple(token_rewards.shape)}")
    for t in (mask, *others):
        if t.shape != token_rewards.shape:
            raise ValueError(f"shape {tuple(t.shape)} != token_rewards {tuple(token_rewards.shape)}")
    if not bool(as_bool(mask).any()):
        raise ValueError("the advantage mask selects no token in the batch")


def group_ids(
    index: torch.Tensor | Sequence[Hashable], batch_size: int, device: torch.device | None = None
) -> tuple[torch.Tensor, int]:
    """Dense group ids ``[B]`` (0..G-1, in order of first appearance) and ``G``."""
    if isinstance(index, torch.Tensor):
        keys: list[Hashable] = index.reshape(-1).tolist()
    else:
        keys = list(index)
    if len(keys) != batch_size:
        raise ValueError(f"index has {len(keys)} entries for a batch of {batch_size}")
    ids: dict[Hashable, int] = {}
    dense = [ids.setdefault(k, len(ids)) for k in keys]
    return torch.tensor(dense, dtype=torch.long, device=device), len(ids)


def group_stats(
    scores: torch.Tensor, gid: torch.Tensor, n_groups: int, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample ``(count, mean, unbiased std)`` of its group; std is 0 for singletons. With
    ``weights`` ``[B]`` (positive integers) sample ``b`` counts as ``weights[b]`` equal samples:
    ``count = sum w``, ``mean = sum w s / count``, ``var = sum w (s - mean)^2 / (count - 1)``; without
    them every weight is 1 (``1.0 * x == x``: the same bits as unweighted sums)."""
    w = torch.ones_like(scores) if weights is None else weights.to(scores.dtype)
    zeros = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device)
    count = zeros.clone().index_add_(0, gid, w)
    mean = zeros.clone().index_add_(0, gid, w * scores) / count
    sq = zeros.clone().index_add_(0, gid, w * (scores - mean[gid]) ** 2)
    var = torch.where(count > 1, sq / (count - 1).clamp(min=1), torch.zeros_like(sq))
    return count[gid], mean[gid], var.sqrt()[gid]


def group_normalized(
    scores: torch.Tensor,
    gid: torch.Tensor,
    n_groups: int,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(s - mean_g) / (std_g + eps)`` (or ``s - mean_g`` without ``norm_by_std``) per sample of
    group ``gid`` (statistics weighted by ``weights``, :func:`group_stats`), 0 for a singleton
    group (:func:`grpo`'s and GiGPO's normalization)."""
    count, mean, std = group_stats(scores, gid, n_groups, weights)
    a = scores - mean
    if norm_by_std:
        a = a / (std + eps)
    return torch.where(count > 1, a, torch.zeros_like(a))


def sequence_scores(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``s_b = sum_t mask[b,t] * r[b,t]`` ``[B]``."""
    return masked_sum(_float(token_rewards), mask, dim=-1)


def _broadcast(per_seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = as_bool(mask)
    return torch.where(m, per_seq.unsqueeze(-1).expand(m.shape), _zero(per_seq))


# ----------------------------------------------------------------------------- estimators
@torch.no_grad()
def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation over the mask tokens only (PPO with a critic).

    Let ``t_1 < t_2 < ... < t_K`` be the positions of sequence ``b`` with ``mask = 1``
    (``V(t_{K+1}) = 0``: the last one is terminal). For ``k = K .. 1``::

        delta_k = r[t_k] + gamma * V[t_{k+1}] - V[t_k]
        A[t_k]  = delta_k + gamma * lam * A[t_{k+1}]        (A[t_{K+1}] = 0)
        R[t_k]  = A[t_k] + V[t_k]                            (the critic's target)

    i.e. the usual recursion with the mask-0 tokens deleted: there the running GAE and the "next
    value" carry across untouched and A = R = 0. With ``whiten`` the advantages are then
    whitened with mean / unbiased std over all mask tokens of the batch (returns are not).
    """
    _check(token_rewards, mask, values)
    r, v = _float(token_rewards), _float(values).to(_float(token_rewards).dtype)
    m = as_bool(mask)
    B, T = r.shape
    zero = _zero(r)
    r, v = torch.where(m, r, zero), torch.where(m, v, zero)
    next_value = torch.zeros(B, dtype=r.dtype, device=r.device)
    running = torch.zeros(B, dtype=r.dtype, device=r.device)
    adv = torch.zeros_like(r)
    for t in reversed(range(T)):
        mt = m[:, t]
        delta = r[:, t] + gamma * next_value - v[:, t]
        running = torch.where(mt, delta + gamma * lam * running, running)
        next_value = torch.where(mt, v[:, t], next_value)
        adv[:, t] = torch.where(mt, running, zero)
    returns = torch.where(m, adv + v, zero)
    if whiten:
        adv = masked_whiten(adv, m)
    return adv, returns


@torch.no_grad()
def reinforce_pp(
    token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go over the mask tokens, then global whitening.

    With ``t_1 < ... < t_K`` the mask positions of a sequence::

        G[t_k] = r[t_k] + gamma * G[t_{k+1}]        (G[t_{K+1}] = 0)
        A      = (G - mean_{mask}(G)) / sqrt(var_{mask}(G) + 1e-8)

    mean and unbiased variance over every mask token of the batch. Mask-0 tokens are skipped
    (the running return carries across them). Returns ``(A, G)``.
    """
    _check(token_rewards, mask)
    r = _float(token_rewards)
    m = as_bool(mask)
    B, T = r.shape
    zero = _zero(r)
    r = torch.where(m, r, zero)
    running = torch.zeros(B, dtype=r.dtype, device=r.device)
    returns = torch.zeros_like(r)
    for t in reversed(range(T)):
        mt = m[:, t]
        running = torch.where(mt, r[:, t] + gamma * running, running)
        returns[:, t] = torch.where(mt, running, zero)
    return masked_whiten(returns, m), returns


@torch.no_grad()
def reinforce_pp_baseline(
    token_rewards: torch.Tensor, mask: torch.Tensor, index: torch.Tensor | Sequence[Hashable]
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline::

        a_b   = s_b - mean_{g(b)}(s)                 (0 for a singleton group)
        A_bt  = mask_bt * a_b, then whitened with mean / unbiased std over all mask tokens

    (so a sequence weighs in the whitening statistics by its number of mask tokens, as in verl).
    Returns ``(A, A)``.
    """
    _check(token_rewards, mask)
    s = sequence_scores(token_rewards, mask)
    gid, G = group_ids(index, s.shape[0], s.device)
    count, mean, _ = group_stats(s, gid, G)
    a = torch.where(count > 1, s - mean, torch.zeros_like(s))
    adv = masked_whiten(_broadcast(a, mask), mask)
    return adv, adv


@torch.no_grad()
def grpo(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    index: torch.Tensor | Sequence[Hashable],
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO group-normalized outcome advantage, broadcast onto the mask tokens::

        a_b  = (s_b - mean_g(s)) / (std_g(s) + eps)      norm_by_std=True  (GRPO)
        a_b  =  s_b - mean_g(s)                          norm_by_std=False (Dr. GRPO)
        A_bt = mask_bt * a_b

    ``std_g`` unbiased; a group whose scores are all equal gets 0; a singleton group gets 0.
    Returns ``(A, A)``.
    """
    _check(token_rewards, mask)
    s = sequence_scores(token_rewards, mask)
    gid, G = group_ids(index, s.shape[0], s.device)
    adv = _broadcast(group_normalized(s, gid, G, norm_by_std, eps), mask)
    return adv, adv


@torch.no_grad()
def rloo(
    token_rewards: torch.Tensor, mask: torch.Tensor, index: torch.Tensor | Sequence[Hashable]
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out: each score minus the mean of the *other* members of its group::

        a_b  = s_b - (sum_{j in g, j != b} s_j) / (n_g - 1) = n_g / (n_g - 1) * (s_b - mean_g(s))
        A_bt = mask_bt * a_b                          (0 for a singleton group)

    Returns ``(A, A)``.
    """
    _check(token_rewards, mask)
    s = sequence_scores(token_rewards, mask)
    gid, G = group_ids(index, s.shape[0], s.device)
    count, mean, _ = group_stats(s, gid, G)
    others = (mean * count - s) / (count - 1).clamp(min=1)
    a = torch.where(count > 1, s - others, torch.zeros_like(s))
    adv = _broadcast(a, mask)
    return adv, adv


EPISODE_STATS = ("episodes", "steps")


@torch.no_grad()
def gigpo_parts(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    index: torch.Tensor | Sequence[Hashable],
    steps: Steps,
    gamma: float = 1.0,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    episode_stats: str = "episodes",
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO's two advantages: the episode one ``a_b`` ``[B]`` and the step one ``a_bj`` ``[B, J]``
    (0 where row ``b`` has no turn ``j``); :func:`gigpo` states the math."""
    _check(token_rewards, mask)
    if episode_stats not in EPISODE_STATS:
        raise ValueError(f"episode_stats must be one of {EPISODE_STATS}, got {episode_stats!r}")
    s = sequence_scores(token_rewards, mask)
    gid, G = group_ids(index, s.shape[0], s.device)
    turn, group = steps.turn, steps.group
    if turn.shape != token_rewards.shape or group.shape[0] != s.shape[0]:
        raise ValueError(
            f"steps {tuple(turn.shape)} / {tuple(group.shape)} do not fit token_rewards {tuple(token_rewards.shape)}"
        )
    valid = group >= 0
    weights = valid.sum(dim=1).clamp(min=1) if episode_stats == "steps" else None
    a_ep = group_normalized(s, gid, G, norm_by_std, eps, weights)
    B, J = group.shape
    r = torch.where(as_bool(mask), _float(token_rewards), _zero(_float(token_rewards)))
    step_r = torch.zeros(B, J + 1, dtype=r.dtype, device=r.device)  # column J collects the tokens of no turn
    step_r.scatter_add_(1, torch.where(turn >= 0, turn, torch.full_like(turn, J)), r)
    step_r[:, 0] += step_r[:, J]  # a reward before the first turn (the prompt never holds one) counts for it
    ret = torch.zeros(B, J, dtype=r.dtype, device=r.device)
    running = torch.zeros(B, dtype=r.dtype, device=r.device)
    for j in reversed(range(J)):
        running = torch.where(valid[:, j], step_r[:, j] + gamma * running, running)
        ret[:, j] = torch.where(valid[:, j], running, _zero(r))
    a_step = torch.zeros_like(ret)
    if bool(valid.any()):
        a_step[valid] = group_normalized(ret[valid], group[valid], int(group.max()) + 1, norm_by_std, eps)
    return a_ep, a_step


@torch.no_grad()
def gigpo(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    index: torch.Tensor | Sequence[Hashable],
    steps: Steps,
    gamma: float = 1.0,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    step_weight: float = 1.0,
    episode_stats: str = "episodes",
    diagnostics: dict[str, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO (Group-in-Group Policy Optimization, arXiv 2505.10978): the episode-level group
    advantage plus a step-level one from the turns of the group's episodes that start from the
    same state (``steps``, :func:`agentr1.rl.steps.anchor_groups`)::

        a_b    = (s_b - mean_g(s)) / (std_g(s) + eps)            (s_b the episode score)
        r_bj   = sum of mask[b,t] * r[b,t] over the tokens t of turn j
        G_bj   = r_bj + gamma * G_b(j+1)                         (G after the last turn = 0)
        a_bj   = (G_bj - mean_S(G)) / (std_S(G) + eps)           over the step group S of (b, j)
        A_bt   = mask_bt * (a_b + step_weight * a_b,j(t))       (j(t) = the turn owning token t)

    ``episode_stats``: ``episodes`` takes ``mean_g`` / ``std_g`` over the group's episodes (one
    value each: GRPO's); ``steps`` over its step rows, each episode's score counted once per turn
    it has (verl-agent's default ``compute_mean_std_cross_steps``: a longer episode weighs more).
    ``norm_by_std: false`` drops both divisions (verl-agent's ``mode: mean_norm``; ``true`` is
    ``mean_std_norm``); ``std`` is unbiased; a group or step group of one gets 0 (verl-agent passes
    a lone episode's raw score through; a lone step gets 0 there too). With no shared state beyond
    the prompt every step group after the first turn is a singleton, so ``A = (1 + step_weight) *
    a_b`` on the first turn's tokens and ``a_b`` on the others (GRPO with ``gamma = 1`` under
    ``episodes``). Returns ``(A, A)``; a ``diagnostics`` dict gets the step statistics of the two
    parts (:func:`agentr1.rl.stats.step_stats`: computed once, here, for the update and the logs).
    """
    a_ep, a_step = gigpo_parts(token_rewards, mask, index, steps, gamma, norm_by_std, eps, episode_stats)
    if diagnostics is not None:
        diagnostics.update(step_stats(steps, a_ep, a_step))
    turn = steps.turn
    per_tok = torch.gather(a_step, 1, turn.clamp(min=0)) * (turn >= 0)
    adv = _broadcast(a_ep, mask) + torch.where(as_bool(mask), step_weight * per_tok, _zero(per_tok))
    return adv, adv


__all__ = [
    "SHARED_OPTIONS",
    "WHITEN_EPS",
    "compute_advantage",
    "gae",
    "EPISODE_STATS",
    "gigpo",
    "gigpo_parts",
    "group_ids",
    "group_normalized",
    "group_stats",
    "grpo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "sequence_scores",
]
