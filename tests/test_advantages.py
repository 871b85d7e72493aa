"""Advantage estimators, masks and the token-level reward tensor, on hand-computed tensors, plus
the observation-insertion invariance property (invariant 4 of ARCHITECTURE.md)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from agentr1.registry import ESTIMATORS
from agentr1.rl.advantages import (
    compute_advantage,
    gae,
    grpo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
)
from agentr1.rl.masks import (
    build_token_rewards,
    last_index,
    masked_var,
    masked_whiten,
    response_mask_from,
    select_masks,
)

ATOL = 1e-5


def close(a, b, atol=ATOL):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=atol, rtol=0
    )


def whiten_ref(xs):
    """Independent reference: (x - mean) / sqrt(unbiased var + 1e-8) via the statistics module."""
    mu, var = statistics.mean(xs), statistics.variance(xs)
    return [(x - mu) / math.sqrt(var + 1e-8) for x in xs]


def t(x, dtype=torch.float32):
    return torch.tensor(x, dtype=dtype)


# ============================================================================ GAE
# Row 0: tokens [act, OBS, act, act]; the observation carries reward 5 and value 9, both ignored.
# Row 1: [act, act, pad, pad] (pad values 7 ignored). gamma = 0.9, lam = 0.8 -> gamma*lam = 0.72.
R_GAE = [[0.0, 5.0, 0.0, 1.0], [0.0, 2.0, 0.0, 0.0]]
V_GAE = [[0.5, 9.0, 0.2, 0.4], [1.0, 1.0, 7.0, 7.0]]
M_GAE = [[1, 0, 1, 1], [1, 1, 0, 0]]
# Row 0 over action tokens t0, t2, t3:
#   t3: delta = 1 + 0.9*0 - 0.4 = 0.6                         A = 0.6            R = 1.0
#   t2: delta = 0 + 0.9*0.4 - 0.2 = 0.16                      A = 0.16 + 0.72*0.6 = 0.592     R = 0.792
#   t0: delta = 0 + 0.9*0.2 - 0.5 = -0.32 (next value skips the obs)
#                                                             A = -0.32 + 0.72*0.592 = 0.10624 R = 0.60624
# Row 1: t1: delta = 2 - 1 = 1, A = 1, R = 2;  t0: delta = 0.9*1 - 1 = -0.1, A = -0.1 + 0.72 = 0.62, R = 1.62
GAE_ADV = [[0.10624, 0.0, 0.592, 0.6], [0.62, 1.0, 0.0, 0.0]]
GAE_RET = [[0.60624, 0.0, 0.792, 1.0], [1.62, 2.0, 0.0, 0.0]]


def test_gae_masked_skips_observations():
    adv, ret = gae(t(R_GAE), t(V_GAE), t(M_GAE), gamma=0.9, lam=0.8, whiten=False)
    close(adv, GAE_ADV)
    close(ret, GAE_RET)


def test_gae_unmasked_recurses_through_observation():
    # Mask off (response mask = all four tokens of row 0; obs reward 0, value 9):
    #   t3: 0.6, t2: 0.592 as before
    #   t1: delta = 0 + 0.9*0.2 - 9 = -8.82,  A = -8.82 + 0.72*0.592 = -8.39376,  R = 0.60624
    #   t0: delta = 0 + 0.9*9 - 0.5 = 7.6,    A = 7.6 + 0.72*(-8.39376) = 1.5564928, R = 2.0564928
    r = t([[0.0, 0.0, 0.0, 1.0]])
    v = t([[0.5, 9.0, 0.2, 0.4]])
    adv, ret = gae(r, v, t([[1, 1, 1, 1]]), gamma=0.9, lam=0.8, whiten=False)
    close(adv, [[1.5564928, -8.39376, 0.592, 0.6]])
    close(ret, [[2.0564928, 0.60624, 0.792, 1.0]])


def test_gae_whitening_uses_mask_tokens_only():
    adv, ret = gae(t(R_GAE), t(V_GAE), t(M_GAE), gamma=0.9, lam=0.8, whiten=True)
    w = whiten_ref([0.10624, 0.592, 0.6, 0.62, 1.0])
    close(adv, [[w[0], 0.0, w[1], w[2]], [w[3], w[4], 0.0, 0.0]])
    close(ret, GAE_RET)  # returns are never whitened


def test_gae_gamma_lam_one_is_return_minus_value():
    # gamma = lam = 1: A_t = (sum of rewards from t on) - V_t over the mask tokens.
    r = t([[0.0, 0.0, 0.3, 0.0, 1.0]])
    v = t([[0.1, 4.0, 0.2, -3.0, 0.5]])
    m = t([[1, 0, 1, 0, 1]])
    adv, ret = gae(r, v, m, gamma=1.0, lam=1.0, whiten=False)
    close(adv, [[1.3 - 0.1, 0.0, 1.3 - 0.2, 0.0, 1.0 - 0.5]])
    close(ret, [[1.3, 0.0, 1.3, 0.0, 1.0]])


def test_gae_ignores_nan_outside_mask():
    r, v = t(R_GAE), t(V_GAE)
    r[0, 1], v[0, 1], v[1, 3] = float("nan"), float("inf"), float("nan")
    adv, ret = gae(r, v, t(M_GAE), gamma=0.9, lam=0.8, whiten=False)
    close(adv, GAE_ADV)
    close(ret, GAE_RET)


# ============================================================================ REINFORCE++
# Row 0: [act r=0.5 (a process reward), OBS, act, act r=1, pad], row 1: [act, act r=-1, pad x3].
R_RPP = [[0.5, 0.0, 0.0, 1.0, 0.0], [0.0, -1.0, 0.0, 0.0, 0.0]]
A_RPP = [[1, 0, 1, 1, 0], [1, 1, 0, 0, 0]]
RESP_RPP = [[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]


def test_reinforce_pp_masked():
    # gamma = 0.5. Row 0 over t0, t2, t3: G3 = 1; G2 = 0 + 0.5*1 = 0.5; G0 = 0.5 + 0.5*0.5 = 0.75
    # (the observation is not a step: no extra discount). Row 1: G1 = -1, G0 = -0.5.
    adv, ret = reinforce_pp(t(R_RPP), t(A_RPP), gamma=0.5)
    close(ret, [[0.75, 0, 0.5, 1.0, 0], [-0.5, -1.0, 0, 0, 0]])
    w = whiten_ref([0.75, 0.5, 1.0, -0.5, -1.0])
    close(adv, [[w[0], 0, w[1], w[2], 0], [w[3], w[4], 0, 0, 0]])


def test_reinforce_pp_unmasked():
    # Mask off: the observation is a step. G3 = 1; G2 = 0.5; G1 = 0 + 0.5*0.5 = 0.25;
    # G0 = 0.5 + 0.5*0.25 = 0.625. Whitening now also counts the observation's 0.25.
    adv, ret = reinforce_pp(t(R_RPP), t(RESP_RPP), gamma=0.5)
    close(ret, [[0.625, 0.25, 0.5, 1.0, 0], [-0.5, -1.0, 0, 0, 0]])
    w = whiten_ref([0.625, 0.25, 0.5, 1.0, -0.5, -1.0])
    close(adv, [[w[0], w[1], w[2], w[3], 0], [w[4], w[5], 0, 0, 0]])


def test_reinforce_pp_gamma_one_is_reward_to_go():
    adv, ret = reinforce_pp(t(R_RPP), t(A_RPP), gamma=1.0)
    close(ret, [[1.5, 0, 1.0, 1.0, 0], [-1.0, -1.0, 0, 0, 0]])


# ============================================================================ outcome estimators
# Six sequences, T = 3, groups q1 = {0, 1, 2}, q2 = {3, 4}, q3 = {5} (singleton).
OUTCOME = [0.8, 0.0, 1.0, 1.0, 0.0, 3.0]
ACTION = [[1, 1, 0], [1, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 1], [1, 0, 0]]
INDEX = ["q1", "q1", "q1", "q2", "q2", "q3"]
# Row 0 also has a process reward 0.2 on token 0 -> scores s = [1.0, 0, 1, 1, 0, 3].
PROCESS = [(0, 0, 0.2)]


def outcome_batch():
    am = t(ACTION, torch.long)
    return build_token_rewards(t(OUTCOME), am, PROCESS), am


def broadcast(per_seq, mask):
    return [[a if m else 0.0 for m in row] for a, row in zip(per_seq, mask)]


def test_grpo_mixed_and_singleton_groups():
    r, am = outcome_batch()
    # q1: mean 2/3, unbiased var ((1/3)^2 + (2/3)^2 + (1/3)^2) / 2 = 1/3, std = 0.577350
    #     a = (1/3)/0.57735 = 0.577350, (-2/3)/0.57735 = -1.154701, 0.577350
    # q2: mean 0.5, var (0.25 + 0.25)/1 = 0.5, std 0.707107 -> a = +-0.707107
    # q3: singleton -> 0
    a = [0.577350, -1.154701, 0.577350, 0.707107, -0.707107, 0.0]
    adv, ret = grpo(r, am, INDEX)
    close(adv, broadcast(a, ACTION))
    close(ret, adv)


def test_dr_grpo_no_std():
    r, am = outcome_batch()
    adv, _ = grpo(r, am, INDEX, norm_by_std=False)
    # s - group mean: q1: 1 - 2/3, 0 - 2/3, 1 - 2/3; q2: +-0.5; q3 singleton 0
    close(adv, broadcast([1 / 3, -2 / 3, 1 / 3, 0.5, -0.5, 0.0], ACTION))


def test_grpo_tensor_index_equals_hashable_index():
    r, am = outcome_batch()
    a1, _ = grpo(r, am, INDEX)
    a2, _ = grpo(r, am, torch.tensor([7, 7, 7, 3, 3, 11]))
    close(a1, a2)


def test_grpo_all_equal_group_is_zero_not_nan():
    r = t([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    m = t([[1, 0], [1, 1], [1, 1]])
    adv, _ = grpo(r, m, [0, 0, 0])
    close(adv, torch.zeros(3, 2))


def test_rloo():
    r, am = outcome_batch()
    # q1: 1 - (0+1)/2 = 0.5;  0 - (1+1)/2 = -1;  1 - (1+0)/2 = 0.5
    # q2: 1 - 0 = 1;  0 - 1 = -1;   q3: singleton -> 0
    adv, ret = rloo(r, am, INDEX)
    close(adv, broadcast([0.5, -1.0, 0.5, 1.0, -1.0, 0.0], ACTION))
    close(ret, adv)


def test_reinforce_pp_baseline():
    r, am = outcome_batch()
    # group baseline: [1/3, -2/3, 1/3, 0.5, -0.5, 0]; broadcast onto the action tokens (counts
    # 2, 1, 2, 3, 2, 1), then whitened over those 11 tokens
    a = [1 / 3, -2 / 3, 1 / 3, 0.5, -0.5, 0.0]
    flat = [a[b] for b, row in enumerate(ACTION) for m in row if m]
    w = iter(whiten_ref(flat))
    expected = [[next(w) if m else 0.0 for m in row] for row in ACTION]
    adv, ret = reinforce_pp_baseline(r, am, INDEX)
    close(adv, expected)
    close(ret, adv)


def test_outcome_estimators_without_mask_broadcast_to_all_response_tokens():
    r, am = outcome_batch()
    resp = torch.ones_like(am)  # every token a response token (the ablation)
    adv, _ = grpo(r, resp, INDEX)
    a = [0.577350, -1.154701, 0.577350, 0.707107, -0.707107, 0.0]
    close(adv, [[x] * 3 for x in a])
    adv, _ = rloo(r, resp, INDEX)
    close(adv, [[x] * 3 for x in [0.5, -1.0, 0.5, 1.0, -1.0, 0.0]])


def test_singleton_batch_gives_zero_for_every_group_estimator():
    r = t([[0.0, 1.0], [2.0, 0.0]])
    m = t([[1, 1], [1, 0]])
    for name in ("grpo", "rloo", "reinforce_pp_baseline"):
        adv, _ = ESTIMATORS.get(name)(r, m, index=["a", "b"])
        close(adv, torch.zeros(2, 2))


# ============================================================================ registry / dispatch
def test_registry_and_dispatch():
    assert ESTIMATORS.names() == ["gae", "gigpo", "grpo", "reinforce_pp", "reinforce_pp_baseline", "rloo"]
    assert ESTIMATORS.get("gae") is gae and ESTIMATORS.get("grpo") is grpo
    assert ESTIMATORS.names(needs_values=True) == ["gae"]  # the trainer builds a critic for these
    assert ESTIMATORS.names(grouped=True) == ["gigpo", "grpo", "reinforce_pp_baseline", "rloo"]  # these need index
    assert ESTIMATORS.names(stepwise=True) == ["gigpo"]  # and this one the turns' step groups
    with pytest.raises(KeyError, match="unknown advantage estimator 'nope'; available: gae, gigpo, grpo"):
        ESTIMATORS.get("nope")
    # one config serves every estimator: unused shared knobs are dropped
    cfg = dict(values=t(V_GAE), index=[0, 1], gamma=0.9, lam=0.8, whiten=False, norm_by_std=True)
    adv, ret = compute_advantage("gae", t(R_GAE), t(M_GAE), **cfg)
    close(adv, GAE_ADV)
    close(ret, GAE_RET)
    adv, _ = compute_advantage("reinforce_pp", t(R_RPP), t(A_RPP), **{**cfg, "values": None, "gamma": 0.5})
    close(adv, reinforce_pp(t(R_RPP), t(A_RPP), gamma=0.5)[0])
    with pytest.raises(ValueError, match="needs 'values'"):
        compute_advantage("gae", t(R_GAE), t(M_GAE), gamma=0.9)
    with pytest.raises(ValueError, match="needs 'index'"):
        compute_advantage("grpo", t(R_GAE), t(M_GAE), index=None)
    with pytest.raises(TypeError, match="takes no option 'gama'"):
        compute_advantage("reinforce_pp", t(R_RPP), t(A_RPP), gama=0.9)
    with pytest.raises(ValueError, match="selects no token"):
        reinforce_pp(t(R_RPP), torch.zeros(2, 5))


# ============================================================================ masks & rewards
def test_build_token_rewards_placement():
    am = t([[1, 1, 0, 0, 1, 1, 0, 0], [0, 1, 1, 0, 0, 0, 0, 0]], torch.long)
    # row 0: outcome 1.0 on its last action token (5, not the padding after it); process rewards
    # -0.1 on the tool-call closing token 1 and +0.2 twice on token 5 (they add up)
    r = build_token_rewards(t([1.0, 0.5]), am, [(0, 1, -0.1), (0, 5, 0.2), (0, 5, 0.2), (1, 1, 0.3)])
    close(r, [[0, -0.1, 0, 0, 0, 1.4, 0, 0], [0, 0.3, 0.5, 0, 0, 0, 0, 0]])
    assert last_index(am).tolist() == [5, 2]
    # same via explicit last-action indices, and via a dense process tensor
    dense = torch.zeros(2, 8)
    dense[0, 1], dense[0, 5], dense[1, 1] = -0.1, 0.4, 0.3
    close(build_token_rewards(t([1.0, 0.5]), torch.tensor([5, 2]), dense, seq_len=8), r)
    close(build_token_rewards(t([1.0, 0.5]), am, dense), r)


def test_build_token_rewards_rejects_bad_placement():
    am = t([[1, 0, 1], [0, 0, 0]], torch.long)
    with pytest.raises(ValueError, match="no valid last action"):
        build_token_rewards(t([1.0, 0.0]), am)
    am = t([[1, 0, 1], [1, 0, 0]], torch.long)
    with pytest.raises(ValueError, match="not on an action token"):
        build_token_rewards(t([1.0, 0.0]), am, [(0, 1, 0.5)])
    dense = torch.zeros(2, 3)
    dense[1, 2] = 1.0
    with pytest.raises(ValueError, match="outside the action mask"):
        build_token_rewards(t([1.0, 0.0]), am, dense)
    with pytest.raises(ValueError, match="seq_len"):
        build_token_rewards(t([1.0, 0.0]), torch.tensor([2, 0]))


def test_select_masks():
    am = t([[1, 0, 1, 0]], torch.long)
    rm = t([[1, 1, 1, 0]], torch.long)
    lm, advm = select_masks(am, rm, loss_mask=True, advantage_mask=False)
    assert lm.tolist() == [[True, False, True, False]]
    assert advm.tolist() == [[True, True, True, False]]
    lm, advm = select_masks(am, rm, loss_mask=False, advantage_mask=True)
    assert lm.tolist() == [[True, True, True, False]] and advm.tolist() == [[True, False, True, False]]
    with pytest.raises(ValueError, match="subset"):
        select_masks(t([[0, 0, 0, 1]]), rm, True, True)


def test_response_mask_from_collate_layout():
    # prompt lengths 2 and 1, total lengths 5 and 3 (right padding after)
    attn = t([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], torch.long)
    rm = response_mask_from(attn, torch.tensor([2, 1]))
    assert rm.tolist() == [[False, False, True, True, True], [False, True, True, False, False]]


def test_masked_whiten_and_var():
    x = t([[1.0, 100.0, 3.0], [5.0, float("nan"), 0.0]])
    m = t([[1, 0, 1], [1, 0, 0]])
    close(masked_var(x, m), statistics.variance([1.0, 3.0, 5.0]))  # unbiased: 8/2 = 4
    w = whiten_ref([1.0, 3.0, 5.0])
    close(masked_whiten(x, m), [[w[0], 0, w[1]], [w[2], 0, 0]])
    close(masked_whiten(t([[2.0, 9.0]]), t([[1, 0]])), [[0.0, 0.0]])  # one token whitens to 0


# ============================================================================ observation insertion
GROUP_INDEX = [0, 0, 0, 1, 1, 2]


def random_batch(rng: random.Random, n_rows: int = 6):
    """Compact episodes: a list per row of action tokens (reward, value). Each row gets process
    rewards on random action tokens and an outcome on its last one."""
    rows = []
    for _ in range(n_rows):
        n = rng.randint(1, 6)
        toks = [{"act": True, "r": 0.0, "v": rng.uniform(-1, 1)} for _ in range(n)]
        for tok in toks:
            if rng.random() < 0.3:
                tok["r"] += rng.choice([-0.1, 0.1, 0.2])
        toks[-1]["r"] += rng.choice([0.0, 1.0, rng.uniform(-1, 2)])
        rows.append(toks)
    return rows


def insert_observations(rng: random.Random, rows):
    """Insert 1-3 runs of observation tokens (reward 0, arbitrary value) at random positions of
    each row: before the first action, between actions, or after the last."""
    out = []
    for toks in rows:
        toks = list(toks)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randint(0, len(toks))
            run = [{"act": False, "r": 0.0, "v": rng.uniform(-50, 50)} for _ in range(rng.randint(1, 4))]
            toks[pos:pos] = run
        out.append(toks)
    return out


def to_tensors(rows, extra_pad: int = 0):
    T = max(len(r) for r in rows) + extra_pad
    B = len(rows)
    r, v = torch.zeros(B, T), torch.full((B, T), 123.0)  # padding values are garbage on purpose
    am, rm = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.long)
    for b, toks in enumerate(rows):
        for i, tok in enumerate(toks):
            r[b, i], v[b, i], am[b, i], rm[b, i] = tok["r"], tok["v"], int(tok["act"]), 1
    return r, v, am, rm


def run_estimator(name, r, v, mask):
    kw = {"gae": dict(values=v, gamma=0.95, lam=0.9), "reinforce_pp": dict(gamma=0.9)}.get(name, {"index": GROUP_INDEX})
    return compute_advantage(name, r, mask, **kw)


def action_values(x, am):
    return [x[b][am[b].bool()] for b in range(x.shape[0])]


# gigpo is left out: an observation inserted inside a turn splits it into two turns, a different step
# structure by design (its anchor states and step groups: tests/test_gigpo.py)
@pytest.mark.parametrize("name", ESTIMATORS.names(stepwise=False))
def test_observation_insertion_invariance_with_advantage_mask(name):
    rng = random.Random(1234)
    for trial in range(40):
        rows = random_batch(rng)
        r0, v0, am0, _ = to_tensors(rows)
        adv0, ret0 = run_estimator(name, r0, v0, am0)
        r1, v1, am1, _ = to_tensors(insert_observations(rng, rows), extra_pad=rng.randint(0, 3))
        adv1, ret1 = run_estimator(name, r1, v1, am1)
        for a, b in zip(action_values(adv0, am0), action_values(adv1, am1)):
            close(a, b)
        for a, b in zip(action_values(ret0, am0), action_values(ret1, am1)):
            close(a, b)
        assert bool((adv1[am1 == 0] == 0).all()) and bool((ret1[am1 == 0] == 0).all()), trial


@pytest.mark.parametrize("name", ["gae", "reinforce_pp"])
def test_observation_insertion_changes_recursive_estimators_without_mask(name):
    rng = random.Random(99)
    for _ in range(20):
        rows = random_batch(rng)
        r0, v0, am0, _ = to_tensors(rows)
        adv0, _ = run_estimator(name, r0, v0, am0)
        r1, v1, am1, rm1 = to_tensors(insert_observations(rng, rows))
        adv1, _ = run_estimator(name, r1, v1, rm1)  # advantage mask off: recurse over response tokens
        diffs = [float((a - b).abs().max()) for a, b in zip(action_values(adv0, am0), action_values(adv1, am1))]
        assert max(diffs) > 1e-3


@pytest.mark.parametrize("name", ["reinforce_pp_baseline", "grpo", "rloo"])
def test_outcome_estimators_without_mask_cover_inserted_tokens(name):
    rng = random.Random(7)
    for _ in range(20):
        rows = random_batch(rng)
        r1, v1, am1, rm1 = to_tensors(insert_observations(rng, rows))
        adv_on, _ = run_estimator(name, r1, v1, am1)
        adv_off, _ = run_estimator(name, r1, v1, rm1)
        obs = (rm1 == 1) & (am1 == 0)
        assert bool((adv_on[obs] == 0).all())
        for b in range(r1.shape[0]):
            row = adv_off[b][rm1[b].bool()]
            close(row, torch.full_like(row, float(row[0])))  # one value over every response token
            if name != "reinforce_pp_baseline":  # no whitening: the same per-sequence value as with the mask
                close(row[0], adv_on[b][am1[b].bool()][0])
        assert bool((adv_off[obs] != 0).any())
