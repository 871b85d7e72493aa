"""Policy losses (registered by name), the critic's value loss, KL to a reference, entropy, and
loss aggregation — all masked (conventions in :mod:`agentr1.rl.masks`).

``mask`` here is the *loss mask*: ``action_mask`` with the loss mask on (Agent-R1: only tokens the
policy sampled are trained), ``response_mask`` with it off (the ablation that also trains on
observation tokens); :func:`agentr1.rl.masks.select_masks` picks it. Every function first
replaces its inputs at mask-0 positions by neutral values (``torch.where``, not multiplication),
so ``nan``/``inf``/huge log-probs there change neither the loss nor its gradient.

Each loss returns ``(loss, stats)``: ``loss`` a 0-dim tensor with grad, ``stats`` a dict of
detached 0-dim tensors (``{k: float(v)}`` for logging).

Aggregation (:func:`agg_loss`) of a per-token loss ``l`` with mask ``m``; "sequences" are those
with at least one mask token, ``S`` their number::

    token-mean               sum_bt m l / sum_bt m
    seq-mean-token-sum       1/S sum_b  sum_t m l
    seq-mean-token-mean      1/S sum_b (sum_t m l / sum_t m)
    seq-mean-token-sum-norm  1/S sum_b  sum_t m l / norm_const    (Dr. GRPO; a fixed constant,
                                                                   e.g. the max response length)

Micro-batching / data parallelism: pass ``denom`` = the global count (mask tokens for
token-mean, sequences for the seq-mean modes) to every micro-batch's call; the micro-batch losses
then *sum* to exactly the global-batch loss.

KL estimators (per token, ``log_r = logp - ref_logp``, Schulman's k1/k2/k3; by name in
:data:`agentr1.registry.KL_ESTIMATORS`, as the policy losses are in ``POLICY_LOSSES``)::

    k1 (alias "kl")          log_r
    k2 (alias "mse")         0.5 * log_r^2
    k3 (alias "low_var_kl")  exp(-log_r) + log_r - 1, with -log_r clamped to [-20, 20] and the
                             result to [-10, 10] (verl's low_var_kl)
    abs                      |log_r|

One module of some 420 lines on purpose: the policy losses, the value loss and the KL terms share
the masking convention above and :func:`agg_loss`, and the registry names them from here; split,
each part would import those back for a few dozen lines of its own.
"""

from __future__ import annotations

from typing import Any

import torch

from agentr1.registry import KL_ESTIMATORS, POLICY_LOSSES
from agentr1.rl.masks import as_bool, masked_mean, masked_sum

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
LOG_RATIO_CLAMP = 20.0
K3_CLAMP = 10.0

Stats = dict[str, torch.Tensor]

# Knobs a trainer may pass to any policy loss; forwarded only to the losses that take them.
SHARED_OPTIONS = frozenset({"clip_low", "clip_high", "dual_clip", "agg_mode", "denom", "norm_const", "weights"})


def _masked(x: torch.Tensor, m: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    return torch.where(m, x, torch.full((), fill, dtype=x.dtype, device=x.device))


def _check(*tensors: torch.Tensor) -> None:
    shape = tensors[0].shape
    for t in tensors[1:]:
        if t.shape != shape:
            raise ValueError(f"shape mismatch: {tuple(t.shape)} vs {tuple(shape)}")


# ----------------------------------------------------------------------------- aggregation
def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    denom: float | torch.Tensor | None = None,
    norm_const: float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss ``[B, T]`` over ``mask`` into a scalar (formulas in the module
    docstring). ``denom`` overrides the local count (tokens or sequences) for micro-batching. An
    empty mask gives 0 (still connected to the graph)."""
    _check(loss_mat, mask)
    m = as_bool(mask)
    lm = _masked(loss_mat, m)
    if mode == "token-mean":
        n = m.sum().clamp(min=1) if denom is None else denom
        return lm.sum() / n
    seq_tokens = m.sum(-1)
    has = seq_tokens > 0
    n_seq = has.sum().clamp(min=1) if denom is None else denom
    seq_sum = lm.sum(-1)
    if mode == "seq-mean-token-sum":
        return seq_sum.sum() / n_seq
    if mode == "seq-mean-token-mean":
        return (seq_sum / seq_tokens.clamp(min=1)).sum() / n_seq
    if mode == "seq-mean-token-sum-norm":
        if norm_const is None or norm_const <= 0:
            raise ValueError("seq-mean-token-sum-norm needs a positive norm_const (e.g. the max response length)")
        return seq_sum.sum() / (n_seq * norm_const)
    raise ValueError(f"unknown loss aggregation {mode!r}; known: {AGG_MODES}")


# ----------------------------------------------------------------------------- policy losses
def compute_policy_loss(
    name: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    **options: Any,
) -> tuple[torch.Tensor, Stats]:
    """Run policy loss ``name`` of :data:`~agentr1.registry.POLICY_LOSSES` (signature
    ``fn(logp, old_logp, advantages, mask, *, agg_mode, denom, norm_const, ...) -> (loss,
    stats)``); options in :data:`SHARED_OPTIONS` go only to losses that take them (so one config
    serves every loss), any other unknown option raises ``TypeError``
    (:meth:`~agentr1.registry.Registry.call`)."""
    return POLICY_LOSSES.call(name, logp, old_logp, advantages, mask, shared=SHARED_OPTIONS, **options)


def _kl_stats(logp: torch.Tensor, old_logp: torch.Tensor, m: torch.Tensor) -> Stats:
    """approx_kl = mean_mask(old_logp - logp) (k1 of the behaviour policy vs the current one) and
    its k3 version, both detached."""
    with torch.no_grad():
        log_r = _masked(logp - old_logp, m).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return {
            "approx_kl": masked_mean(-log_r, m),
            "approx_kl_k3": masked_mean(torch.exp(log_r) - 1 - log_r, m),
        }


def _clip_range(clip_low: float, clip_high: float | None, dual_clip: float | None) -> float:
    """``clip_high`` of the clip range ``[1 - clip_low, 1 + clip_high]`` (``clip_low`` when
    ``None``), after checking ``0 <= clip_low < 1``, ``clip_high >= 0`` and ``dual_clip > 1``."""
    if clip_high is None:
        clip_high = clip_low
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    return clip_high


def _dual_clip(
    l: torch.Tensor, adv: torch.Tensor, m: torch.Tensor, dual_clip: float | None, stats: Stats
) -> torch.Tensor:
    """The dual clip of :func:`ppo_clip`::

        l = min(l, -A * c)    where A < 0    (c = ``dual_clip``; ``l`` unchanged when None)

    Sets ``stats["clipfrac_lower"]`` (share of mask tokens where it binds; 0 when None)."""
    if dual_clip is not None:
        l3 = -adv * dual_clip
        neg = adv < 0
        with torch.no_grad():
            stats["clipfrac_lower"] = masked_mean(((l > l3) & neg).to(l.dtype), m)
        l = torch.where(neg, torch.minimum(l, l3), l)
    else:
        stats["clipfrac_lower"] = torch.zeros((), dtype=l.dtype, device=l.device)
    return l


def ppo_clip(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clip: float | None = None,
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
    norm_const: float | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Stats]:
    """PPO clipped surrogate with an asymmetric clip range (DAPO "clip-higher") and dual clip::

        rho = exp(clamp(logp - old_logp, -20, 20))
        l   = max(-A * rho, -A * clip(rho, 1 - clip_low, 1 + clip_high))
        l   = min(l, -A * c)             where A < 0, if dual_clip = c (> 1; Ye et al. 2020)
        loss = agg(w * l, mask)          (w = ``weights``, detached; 1 when None)

    ``weights``: per-token importance weights of an off-policy correction (:func:`behaviour_weights`:
    the decoupled objective, ``old_logp`` then being the proximal policy's).

    ``clip_high`` defaults to ``clip_low``. Stats: ``clipfrac`` (share of mask tokens where the
    clipped term is the active one), ``clipfrac_lower`` (share where the dual clip binds),
    ``approx_kl`` / ``approx_kl_k3`` (old vs current policy), ``ratio_mean``, ``ratio_max``.
    """
    _check(logp, old_logp, advantages, mask)
    clip_high = _clip_range(clip_low, clip_high, dual_clip)
    m = as_bool(mask)
    adv = _masked(advantages.detach(), m)
    log_r = _masked(logp - old_logp.detach(), m).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_r)
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    l = torch.maximum(l1, l2)
    stats: Stats = {}
    with torch.no_grad():
        stats["clipfrac"] = masked_mean((l2 > l1).to(l.dtype), m)
    l = _dual_clip(l, adv, m, dual_clip, stats)
    if weights is not None:
        l = l * _masked(weights.detach(), m)
    loss = agg_loss(l, m, agg_mode, denom=denom, norm_const=norm_const)
    stats.update(_kl_stats(logp, old_logp, m))
    with torch.no_grad():
        stats["ratio_mean"] = masked_mean(ratio, m)
        stats["ratio_max"] = torch.where(m, ratio, torch.zeros_like(ratio)).max()
    return loss, stats


def reinforce(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
    norm_const: float | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Stats]:
    """Vanilla policy gradient (no ratio, no clipping)::

        l = -A * logp,   loss = agg(w * l, mask)    (grad: -w * A * grad logp; w = ``weights``, 1 when None)

    ``old_logp`` is used only for the ``approx_kl`` stats (may be ``None``)."""
    _check(logp, advantages, mask)
    m = as_bool(mask)
    l = -_masked(advantages.detach(), m) * _masked(logp, m)
    if weights is not None:
        l = l * _masked(weights.detach(), m)
    loss = agg_loss(l, m, agg_mode, denom=denom, norm_const=norm_const)
    stats: Stats = _kl_stats(logp, old_logp, m) if old_logp is not None else {}
    return loss, stats


@torch.no_grad()
def behaviour_weights(
    prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, Stats]:
    """Importance weights of the decoupled PPO objective (AReaL, arXiv 2505.24298; verl's
    truncated importance sampling of a rollout engine's samples), per mask token::

        w_t = min(pi_prox(a_t) / pi_behav(a_t), cap) = min(exp(clamp(prox - behav, -20, 20)), cap)

    ``behaviour_logp``: the log-probs the sampling policy gave the tokens (recorded at sampling
    time: a rollout engine whose numerics differ from the trainer's, or, asynchronously, older
    weights); ``prox_logp``: the proximal policy's (the trainer's recomputed ``old_logp``), against
    which the PPO ratio is clipped. 0 off the mask. Stats: the weights' mean and max and the share
    of mask tokens the cap binds."""
    m = as_bool(mask)
    raw = torch.exp(_masked(prox_logp - behaviour_logp, m).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    w = _masked(raw.clamp(max=cap), m)
    stats: Stats = {
        "behaviour_weight_mean": masked_mean(w, m),
        "behaviour_weight_max": w.max(),
        "behaviour_weight_capped": masked_mean((raw > cap).to(w.dtype), m),
    }
    return w, stats


# ----------------------------------------------------------------------------- value loss
def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_range: float | None = 0.2,
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
    norm_const: float | None = None,
) -> tuple[torch.Tensor, Stats]:
    """Clipped critic loss (PPO)::

        v_clip = old_V + clip(V - old_V, -eps, eps)
        l      = max((V - R)^2, (v_clip - R)^2)         (just (V - R)^2 when clip_range is None)
        loss   = 0.5 * agg(l, mask)

    ``mask`` is the advantage mask (the tokens that have a return). Stats: ``vf_clipfrac``,
    ``vpred_mean``, ``vf_explained_var = 1 - var(R - V) / var(R)`` over the mask."""
    _check(values, old_values, returns, mask)
    m = as_bool(mask)
    v, vo, R = _masked(values, m), _masked(old_values.detach(), m), _masked(returns.detach(), m)
    l1 = (v - R) ** 2
    stats: Stats = {}
    if clip_range is None:
        l = l1
        stats["vf_clipfrac"] = torch.zeros((), dtype=l.dtype, device=l.device)
    else:
        v_clip = vo + (v - vo).clamp(-clip_range, clip_range)
        l2 = (v_clip - R) ** 2
        l = torch.maximum(l1, l2)
        with torch.no_grad():
            stats["vf_clipfrac"] = masked_mean((l2 > l1).to(l.dtype), m)
    loss = 0.5 * agg_loss(l, m, agg_mode, denom=denom, norm_const=norm_const)
    with torch.no_grad():
        stats["vpred_mean"] = masked_mean(v, m)
        err = R - v
        var_r = masked_mean((R - masked_mean(R, m)) ** 2, m)
        var_e = masked_mean((err - masked_mean(err, m)) ** 2, m)
        stats["vf_explained_var"] = 1 - var_e / var_r.clamp(min=1e-8)
    return loss, stats


# ----------------------------------------------------------------------------- KL
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    kl = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(kl) - kl - 1).clamp(-K3_CLAMP, K3_CLAMP)


def kl_abs(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return (logp - ref_logp).abs()


def kl_estimate(
    logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3", mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate ``[B, T]`` (formulas in the module docstring); 0 where
    ``mask`` (if given) is 0."""
    fn = KL_ESTIMATORS.get(estimator)
    _check(logp, ref_logp)
    if mask is None:
        return fn(logp, ref_logp)
    m = as_bool(mask)
    return _masked(fn(_masked(logp, m), _masked(ref_logp, m)), m)


def apply_kl_penalty(
    token_rewards: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
    estimator: str = "k1",
) -> tuple[torch.Tensor, Stats]:
    """KL as a reward penalty (before the advantage estimator)::

        r'_t = r_t - coef * m_t * kl_t        kl_t = estimator(logp_t, ref_logp_t), detached

    ``logp`` = the behaviour (rollout/old) log-probs, ``mask`` = the loss mask (the tokens whose
    log-probs are policy decisions). Stats: ``kl`` = mean over sequences of the per-sequence
    masked-mean KL (sequences with no mask token are skipped), ``kl_coef``."""
    _check(token_rewards, logp, ref_logp, mask)
    m = as_bool(mask)
    with torch.no_grad():
        kl = kl_estimate(logp.detach(), ref_logp.detach(), estimator, m)
        rewards = token_rewards - coef * kl.to(token_rewards.dtype)
        has = m.any(-1)
        seq_kl = masked_sum(kl, m, dim=-1) / m.sum(-1).clamp(min=1)
        stats = {
            "kl": masked_mean(seq_kl, has),
            "kl_coef": torch.tensor(float(coef)),
        }
    return rewards, stats


def kl_loss(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    estimator: str = "k3",
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
    norm_const: float | None = None,
) -> tuple[torch.Tensor, Stats]:
    """KL as a loss term (GRPO style): ``agg(estimator(logp, ref_logp), mask)``; the trainer adds
    ``kl_coef * loss``. Gradients flow into ``logp`` only. Stats: ``kl_loss``."""
    _check(logp, ref_logp, mask)
    m = as_bool(mask)
    kl = kl_estimate(logp, ref_logp.detach(), estimator, m)
    loss = agg_loss(kl, m, agg_mode, denom=denom, norm_const=norm_const)
    return loss, {"kl_loss": loss.detach()}


# ----------------------------------------------------------------------------- entropy
def entropy_bonus(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
    *,
    agg_mode: str = "token-mean",
    denom: float | torch.Tensor | None = None,
    norm_const: float | None = None,
) -> tuple[torch.Tensor, Stats]:
    """The term to *add* to the loss for an entropy bonus: ``-coef * agg(H, mask)``.
    Stats: ``entropy`` (the aggregated entropy, detached)."""
    _check(entropy, mask)
    m = as_bool(mask)
    h = agg_loss(entropy, m, agg_mode, denom=denom, norm_const=norm_const)
    return -coef * h, {"entropy": h.detach()}


__all__ = [
    "AGG_MODES",
    "SHARED_OPTIONS",
    "agg_loss",
    "apply_kl_penalty",
    "behaviour_weights",
    "compute_policy_loss",
    "entropy_bonus",
    "kl_abs",
    "kl_estimate",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_loss",
    "ppo_clip",
    "reinforce",
    "value_loss",
]
