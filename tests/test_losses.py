"""Policy / value / KL / entropy losses and aggregation on hand-computed tensors, plus the
observation-insertion invariance of the loss under the loss mask (invariant 3)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from agentr1.models.forward import entropy_from_logits
from agentr1.registry import KL_ESTIMATORS, POLICY_LOSSES
from agentr1.rl.losses import (
    AGG_MODES,
    agg_loss,
    apply_kl_penalty,
    compute_policy_loss,
    entropy_bonus,
    kl_estimate,
    kl_loss,
    ppo_clip,
    reinforce,
    value_loss,
)

ATOL = 1e-5
LN2 = math.log(2.0)


def close(a, b, atol=ATOL):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=atol, rtol=0
    )


def t(x, dtype=torch.float32):
    return torch.tensor(x, dtype=dtype)


# ============================================================================ aggregation
LOSS = [[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, 6.0, 7.0], [9.0, 9.0, 9.0, 9.0]]
MASK = [[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]  # row 2 has no mask token


def test_agg_modes_hand_computed():
    l, m = t(LOSS), t(MASK)
    close(agg_loss(l, m, "token-mean"), (1 + 2 + 4 + 5 + 6) / 5)  # 18/5 = 3.6
    close(agg_loss(l, m, "seq-mean-token-sum"), (3 + 15) / 2)  # empty row 2 not counted -> 9
    close(agg_loss(l, m, "seq-mean-token-mean"), (1.5 + 5.0) / 2)  # 3.25
    close(agg_loss(l, m, "seq-mean-token-sum-norm", norm_const=4), (3 + 15) / (2 * 4))  # 2.25
    with pytest.raises(ValueError, match="norm_const"):
        agg_loss(l, m, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        agg_loss(l, m, "sum")


def test_agg_ignores_nan_and_inf_outside_mask_including_gradient():
    l = t(LOSS).requires_grad_()
    for mode in AGG_MODES[:3]:
        bad = torch.where(t(MASK) == 0, torch.full_like(l, float("nan")), l)
        bad[1, 3] = float("inf")
        out = agg_loss(bad, t(MASK), mode)
        assert torch.isfinite(out)
        (g,) = torch.autograd.grad(out, l)
        assert torch.isfinite(g).all() and bool((g[t(MASK) == 0] == 0).all())


def test_agg_empty_mask_is_zero():
    for mode in AGG_MODES[:3]:
        close(agg_loss(t(LOSS), torch.zeros(3, 4), mode), 0.0)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_agg_denom_makes_micro_batches_sum_to_global(mode):
    l, m = t(LOSS), t(MASK)
    full = agg_loss(l, m, mode, norm_const=4)
    n = m.sum() if mode == "token-mean" else (m.sum(-1) > 0).sum()
    parts = [agg_loss(l[i : i + 1], m[i : i + 1], mode, denom=n, norm_const=4) for i in range(3)]
    close(sum(parts), full)


# ============================================================================ PPO
# ratio = exp(logp - old_logp) with old_logp = 0, so logp = log(ratio).
# Row 0: tokens a, b, c (+2 pad);  row 1: d, OBS, e, f, g.
#   a: A=+1,  rho=1.5   l1=-1.5  l2=-1.2 (clip 1.2)  -> -1.2   clipped
#   b: A=+1,  rho=0.5   l1=-0.5  l2=-0.8             -> -0.5
#   c: A=-1,  rho=0.5   l1= 0.5  l2= 0.8 (clip 0.8)  ->  0.8   clipped
#   d: A=-1,  rho=4.0   l1= 4.0  l2= 1.2             ->  4.0;  dual clip c=3: min(4, 3) = 3
#   e: A=-2,  rho=1.1   l1= 2.2  l2= 2.2             ->  2.2
#   f: A=+1,  rho=1.25  l1=-1.25 l2=-1.2             -> -1.2   clipped
#   g: A=+.5, rho=1.0                                -> -0.5
# The observation has logp 50 (ratio e^50) and advantage 7: must not matter.
RATIO = [[1.5, 0.5, 0.5, 1.0, 1.0], [4.0, 1.0, 1.1, 1.25, 1.0]]
ADV = [[1.0, 1.0, -1.0, 0.0, 0.0], [-1.0, 7.0, -2.0, 1.0, 0.5]]
PMASK = [[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]]


def ppo_inputs():
    logp = torch.log(t(RATIO))
    logp[1, 1] = 50.0
    return logp, torch.zeros(2, 5), t(ADV), t(PMASK)


def test_ppo_symmetric_clip_with_dual_clip():
    logp, old, adv, m = ppo_inputs()
    # per-token losses: row 0 [-1.2, -0.5, 0.8] (sum -0.9, mean -0.3);
    #                   row 1 [3, 2.2, -1.2, -0.5] (sum 3.5, mean 0.875)
    expected = {
        "token-mean": 2.6 / 7,
        "seq-mean-token-sum": (-0.9 + 3.5) / 2,
        "seq-mean-token-mean": (-0.3 + 0.875) / 2,
    }
    for mode, value in expected.items():
        loss, stats = ppo_clip(logp, old, adv, m, clip_low=0.2, dual_clip=3.0, agg_mode=mode)
        close(loss, value)
    close(stats["clipfrac"], 3 / 7)  # a, c, f
    close(stats["clipfrac_lower"], 1 / 7)  # d
    logs = [math.log(x) for x in (1.5, 0.5, 0.5, 4.0, 1.1, 1.25, 1.0)]
    close(stats["approx_kl"], -sum(logs) / 7)  # mean(old - new)
    close(stats["approx_kl_k3"], sum(math.exp(x) - 1 - x for x in logs) / 7)
    close(stats["ratio_max"], 4.0)
    close(stats["ratio_mean"], (1.5 + 0.5 + 0.5 + 4.0 + 1.1 + 1.25 + 1.0) / 7)


def test_ppo_without_dual_clip():
    logp, old, adv, m = ppo_inputs()
    loss, stats = ppo_clip(logp, old, adv, m, clip_low=0.2)
    close(loss, (-0.9 + 4.0 + 2.2 - 1.2 - 0.5) / 7)  # d contributes 4 instead of 3 -> 3.6/7
    close(stats["clipfrac_lower"], 0.0)


def test_ppo_asymmetric_clip():
    logp, old, adv, m = ppo_inputs()
    # clip range [0.8, 1.28]:  a: max(-1.5, -1.28) = -1.28 (clipped);  f: rho 1.25 < 1.28 -> -1.25
    # (unclipped);  c: 0.8 (clipped at the low side as before);  d: l2 = 1.28 < 4 -> 4 -> dual 3
    # row 0: -1.28 - 0.5 + 0.8 = -0.98;  row 1: 3 + 2.2 - 1.25 - 0.5 = 3.45
    loss, stats = ppo_clip(logp, old, adv, m, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    close(loss, (-0.98 + 3.45) / 7)
    close(stats["clipfrac"], 2 / 7)  # a, c


def test_ppo_gradient():
    logp, old, adv, m = ppo_inputs()
    logp.requires_grad_()
    loss, _ = ppo_clip(logp, old, adv, m, clip_low=0.2, dual_clip=3.0)
    (g,) = torch.autograd.grad(loss, logp)
    # d l / d logp = -A * rho on active unclipped tokens, 0 on clipped ones (a, c, f) and on d
    # (dual clip: a constant); /7 for token-mean. b: -0.5/7, e: 2*1.1/7, g: -0.5/7.
    expected = torch.zeros(2, 5)
    expected[0, 1], expected[1, 2], expected[1, 4] = -0.5 / 7, 2.2 / 7, -0.5 / 7
    close(g, expected)


def test_ppo_rejects_bad_clip():
    logp, old, adv, m = ppo_inputs()
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip(logp, old, adv, m, dual_clip=1.0)
    with pytest.raises(ValueError, match="clip_low"):
        ppo_clip(logp, old, adv, m, clip_low=1.0)


def test_reinforce_loss():
    # l = -A * logp:  [-(1)(-1), -(-0.5)(-2), masked] = [1, -1];  row 1: [-(2)(-0.5)] = [1]
    logp = t([[-1.0, -2.0, float("nan")], [-0.5, -9.0, 0.0]]).requires_grad_()
    adv = t([[1.0, -0.5, 3.0], [2.0, 4.0, 0.0]])
    m = t([[1, 1, 0], [1, 0, 0]])
    loss, stats = reinforce(logp, None, adv, m)
    close(loss, (1 - 1 + 1) / 3)
    assert stats == {}
    (g,) = torch.autograd.grad(loss, logp)
    close(g, [[-1 / 3, 0.5 / 3, 0.0], [-2 / 3, 0.0, 0.0]])  # -A / N on mask tokens
    loss2, _ = reinforce(logp, None, adv, m, agg_mode="seq-mean-token-sum")
    close(loss2, (0 + 1) / 2)


def test_policy_loss_registry_and_dispatch():
    assert POLICY_LOSSES.names() == ["ppo_clip", "reinforce"]
    assert POLICY_LOSSES.get("ppo_clip") is ppo_clip
    with pytest.raises(KeyError, match="unknown policy loss 'nope'; available: ppo_clip, reinforce"):
        compute_policy_loss("nope", *ppo_inputs())
    logp, old, adv, m = ppo_inputs()
    cfg = dict(clip_low=0.2, clip_high=0.28, dual_clip=3.0, agg_mode="token-mean")
    loss, _ = compute_policy_loss("ppo_clip", logp, old, adv, m, **cfg)
    close(loss, (-0.98 + 3.45) / 7)
    loss, _ = compute_policy_loss("reinforce", logp, old, adv, m, **cfg)  # clip knobs dropped
    close(loss, reinforce(logp, old, adv, m)[0])
    with pytest.raises(TypeError, match="takes no option 'clip_lo'"):
        compute_policy_loss("ppo_clip", logp, old, adv, m, clip_lo=0.2)


# ============================================================================ value loss
def test_value_loss_clipped_and_unclipped():
    # t0: V=1.0, old=0.5, R=1.2: v_clip = 0.7; (1.0-1.2)^2 = 0.04, (0.7-1.2)^2 = 0.25 -> 0.25 (clipped)
    # t1: V=0.6, old=0.5, R=0.0: v_clip = 0.6; 0.36, 0.36 -> 0.36
    # t2: V=0.0, old=0.5, R=1.0: v_clip = 0.3; 1.00, 0.49 -> 1.00
    # t3: masked (garbage)
    v = t([[1.0, 0.6, 0.0, 1e6]])
    vo = t([[0.5, 0.5, 0.5, float("nan")]])
    R = t([[1.2, 0.0, 1.0, -1e6]])
    m = t([[1, 1, 1, 0]])
    loss, stats = value_loss(v, vo, R, m, clip_range=0.2)
    close(loss, 0.5 * (0.25 + 0.36 + 1.0) / 3)
    close(stats["vf_clipfrac"], 1 / 3)
    close(stats["vpred_mean"], 1.6 / 3)
    loss, _ = value_loss(v, vo, R, m, clip_range=None)
    close(loss, 0.5 * (0.04 + 0.36 + 1.0) / 3)
    # explained variance of a perfect critic is 1
    _, stats = value_loss(R.clone(), R.clone(), R, m)
    close(stats["vf_explained_var"], 1.0)


# ============================================================================ KL
def test_kl_estimators_hand_computed():
    # token 0: pi = 0.5, ref = 0.25 -> log_r = ln 2
    #   k1 = ln2 = 0.693147;  k2 = 0.5 ln2^2 = 0.240227;  k3 = e^{-ln2} + ln2 - 1 = 0.5 + 0.693147 - 1 = 0.193147
    # token 1: pi = 0.25, ref = 0.5 -> log_r = -ln 2
    #   k1 = -0.693147;  k2 = 0.240227;  k3 = 2 - 0.693147 - 1 = 0.306853
    # token 2: logp = 0, ref = -30 -> k3 with -log_r clamped to -20: e^-20 + 20 - 1 = 19 -> clamp 10
    logp = torch.log(t([[0.5, 0.25, 1.0]]))
    ref = t([[math.log(0.25), math.log(0.5), -30.0]])
    close(kl_estimate(logp, ref, "k1"), [[LN2, -LN2, 30.0]])
    close(kl_estimate(logp, ref, "k2"), [[0.5 * LN2**2, 0.5 * LN2**2, 450.0]])
    close(kl_estimate(logp, ref, "k3"), [[0.5 + LN2 - 1, 2 - LN2 - 1, 10.0]])
    close(kl_estimate(logp, ref, "abs"), [[LN2, LN2, 30.0]])
    for alias, name in (("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")):
        close(kl_estimate(logp, ref, alias), kl_estimate(logp, ref, name))
    assert KL_ESTIMATORS.names() == ["abs", "k1", "k2", "k3", "kl", "low_var_kl", "mse"]
    assert KL_ESTIMATORS.spec("low_var_kl").meta["alias_of"] == "k3"
    with pytest.raises(KeyError, match="unknown KL"):
        kl_estimate(logp, ref, "k4")


def test_apply_kl_penalty():
    # rewards [0, 0, 1 | pad], k1 = [ln2, -ln2, 0.1, garbage], coef 0.1 on the mask tokens only
    rewards = t([[0.0, 0.0, 1.0, 0.0]])
    logp = t([[math.log(0.5), math.log(0.25), -1.0, 5.0]])
    ref = t([[math.log(0.25), math.log(0.5), -1.1, -5.0]])
    m = t([[1, 1, 1, 0]])
    new, stats = apply_kl_penalty(rewards, logp, ref, m, coef=0.1, estimator="k1")
    close(new, [[-0.1 * LN2, 0.1 * LN2, 1.0 - 0.01, 0.0]])
    close(stats["kl"], 0.1 / 3)  # (ln2 - ln2 + 0.1) / 3
    close(stats["kl_coef"], 0.1)
    new3, _ = apply_kl_penalty(rewards, logp, ref, m, coef=1.0, estimator="k3")
    assert new3[0, 3] == 0 and bool((new3[0, :3] <= rewards[0, :3]).all())  # k3 >= 0


def test_kl_loss_and_gradient():
    logp = torch.log(t([[0.5, 0.25, 0.3]])).requires_grad_()
    ref = t([[math.log(0.25), math.log(0.5), float("nan")]])
    m = t([[1, 1, 0]])
    loss, stats = kl_loss(logp, ref, m, estimator="k3")
    close(loss, ((0.5 + LN2 - 1) + (2 - LN2 - 1)) / 2)  # = 0.25
    close(stats["kl_loss"], 0.25)
    (g,) = torch.autograd.grad(loss, logp)
    # d k3 / d logp = 1 - exp(ref - logp):  token 0: 1 - 0.5 = 0.5;  token 1: 1 - 2 = -1;  /2
    close(g, [[0.25, -0.5, 0.0]])


# ============================================================================ entropy
def test_entropy_from_logits_and_bonus():
    # uniform over 2 -> ln2; uniform over 4 (any shift) -> ln4; p = (0.5, 0.25, 0.25, 0) -> 1.5 ln2
    logits = t([[[0.0, 0.0, -1e9, -1e9], [3.0, 3.0, 3.0, 3.0], [math.log(0.5), math.log(0.25), math.log(0.25), -1e9]]])
    h = entropy_from_logits(logits)
    close(h, [[LN2, 2 * LN2, 1.5 * LN2]])
    assert entropy_from_logits(logits.to(torch.bfloat16)).dtype == torch.float32
    m = t([[1, 0, 1]])
    term, stats = entropy_bonus(h, m, coef=0.01)
    close(stats["entropy"], (LN2 + 1.5 * LN2) / 2)
    close(term, -0.01 * (LN2 + 1.5 * LN2) / 2)


# ============================================================================ observation insertion
def random_rows(rng: random.Random, n_rows: int = 5):
    rows = []
    for _ in range(n_rows):
        rows.append(
            [
                {
                    "act": True,
                    "logp": rng.uniform(-3, -0.05),
                    "old": rng.uniform(-3, -0.05),
                    "ref": rng.uniform(-3, -0.05),
                    "adv": rng.uniform(-2, 2),
                    "v": rng.uniform(-1, 1),
                    "vo": rng.uniform(-1, 1),
                    "ret": rng.uniform(-1, 1),
                    "h": rng.uniform(0, 3),
                }
                for _ in range(rng.randint(1, 6))
            ]
        )
    return rows


def obs_token(rng: random.Random, garbage: bool):
    """Observation token: arbitrary values; with ``garbage`` also huge, inf and nan ones."""

    def val():
        if garbage and rng.random() < 0.4:
            return rng.choice([1e4, -1e4, float("inf"), float("-inf"), float("nan")])
        return rng.uniform(-5, 5)

    return {"act": False, **{k: val() for k in ("logp", "old", "ref", "adv", "v", "vo", "ret")}, "h": abs(val())}


def insert(rng, rows, garbage):
    out = []
    for toks in rows:
        toks = list(toks)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randint(0, len(toks))
            toks[pos:pos] = [obs_token(rng, garbage) for _ in range(rng.randint(1, 4))]
        out.append(toks)
    return out


def tensors(rows):
    T, B = max(len(r) for r in rows), len(rows)
    d = {k: torch.zeros(B, T) for k in ("logp", "old", "ref", "adv", "v", "vo", "ret", "h")}
    am, rm = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.long)
    for b, toks in enumerate(rows):
        for i, tok in enumerate(toks):
            for k in d:
                d[k][b, i] = tok[k]
            am[b, i], rm[b, i] = int(tok["act"]), 1
    d["logp"].requires_grad_()
    return d, am, rm


def all_losses(d, mask, mode):
    """Every loss the trainer can combine, with the given aggregation, as a dict of scalars."""
    kw = dict(agg_mode=mode, norm_const=8.0)
    return {
        "ppo": ppo_clip(d["logp"], d["old"], d["adv"], mask, clip_low=0.2, clip_high=0.28, dual_clip=3.0, **kw)[0],
        "reinforce": reinforce(d["logp"], d["old"], d["adv"], mask, **kw)[0],
        "kl_k1": kl_loss(d["logp"], d["ref"], mask, estimator="k1", **kw)[0],
        "kl_k2": kl_loss(d["logp"], d["ref"], mask, estimator="k2", **kw)[0],
        "kl_k3": kl_loss(d["logp"], d["ref"], mask, estimator="k3", **kw)[0],
        "entropy": entropy_bonus(d["h"], mask, 0.01, **kw)[0],
        "value": value_loss(d["v"], d["vo"], d["ret"], mask, clip_range=0.2, **kw)[0],
    }


@pytest.mark.parametrize("mode", AGG_MODES)
def test_observation_insertion_invariance_with_loss_mask(mode):
    rng = random.Random(2024)
    for _ in range(25):
        rows = random_rows(rng)
        d0, am0, _ = tensors(rows)
        d1, am1, _ = tensors(insert(rng, rows, garbage=True))
        l0, l1 = all_losses(d0, am0, mode), all_losses(d1, am1, mode)
        for k in l0:
            close(l1[k], l0[k])
        # the gradient wrt the action tokens' log-probs is unchanged too, and 0 on observations
        g0 = torch.autograd.grad(l0["ppo"] + l0["kl_k3"], d0["logp"])[0]
        g1 = torch.autograd.grad(l1["ppo"] + l1["kl_k3"], d1["logp"])[0]
        assert torch.isfinite(g1).all() and bool((g1[am1 == 0] == 0).all())
        for b in range(len(rows)):
            close(g1[b][am1[b].bool()], g0[b][am0[b].bool()])


@pytest.mark.parametrize("mode", AGG_MODES)
def test_observation_insertion_changes_loss_without_loss_mask(mode):
    rng = random.Random(77)
    for _ in range(10):
        rows = random_rows(rng)
        d0, am0, _ = tensors(rows)
        d1, _, rm1 = tensors(insert(rng, rows, garbage=False))
        l0, l1 = all_losses(d0, am0, mode), all_losses(d1, rm1, mode)  # loss mask off
        for k in l0:
            assert abs(float(l1[k].detach()) - float(l0[k].detach())) > 1e-6, k
