"""The off-policy correction (``train.off_policy.correction: decoupled``): importance weights from
the sampling (behaviour) policy to the proximal one, by hand, and the trainer's loss and gradients
with a behaviour policy equal to the proximal one, and a stale one."""

from __future__ import annotations

import math

import pytest
import torch

import _rl_tiny as R
from agentr1.rl.losses import behaviour_weights, ppo_clip
from agentr1.rl.sampling import Episodes
from agentr1.rl.stats import StepStats
from agentr1.rl.trainer import Trainer

torch.set_num_threads(1)


def test_behaviour_weights_are_the_probability_ratio_capped():
    prox = torch.log(torch.tensor([[0.5, 0.2, 0.3, 0.9]]))
    behav = torch.log(torch.tensor([[0.25, 0.4, 0.3, 0.1]]))
    mask = torch.tensor([[1, 1, 1, 0]])
    w, st = behaviour_weights(prox, behav, mask, cap=1.5)
    assert w.tolist()[0] == pytest.approx([1.5, 0.5, 1.0, 0.0])  # 2.0 capped, 0.5, 1, off the mask
    assert float(st["behaviour_weight_capped"]) == pytest.approx(1 / 3)
    assert float(st["behaviour_weight_mean"]) == pytest.approx(1.0)


def test_weighted_ppo_clip_is_the_weighted_token_mean():
    torch.manual_seed(0)
    logp, old = torch.randn(2, 5) * 0.1 - 1, torch.randn(2, 5) * 0.1 - 1
    adv, mask = torch.randn(2, 5), torch.tensor([[1, 1, 0, 1, 1], [0, 1, 1, 1, 0]])
    w = torch.rand(2, 5) + 0.5
    loss, _ = ppo_clip(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, weights=w)
    rho = torch.exp(logp - old)
    l = torch.maximum(-adv * rho, -adv * rho.clamp(0.8, 1.28))
    m = mask.bool()
    assert float(loss) == pytest.approx(float((w * l)[m].sum() / m.sum()), rel=1e-6)
    plain, _ = ppo_clip(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, weights=torch.ones(2, 5))
    assert float(plain) == float(ppo_clip(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)[0])


@pytest.fixture(scope="module")
def tok():
    return R.tiny_tokenizer()


def _trainer(tok, **kw) -> Trainer:
    return Trainer(
        R.tiny_policy(tok),
        tok,
        R.train_cfg(mini_batches=1, micro_batch_size=32, **kw),
        R.rollout_cfg(),
        R.reward_cfg(),
        episodes=Episodes(R.ToyEnv(), R.QUESTIONS, R.QUESTIONS),
        seed=5,
    )


def _grads(tr: Trainer, batch: dict) -> tuple[list[torch.Tensor], dict]:
    tr.actor.zero_grad(set_to_none=True)
    acc = StepStats()
    tr._accumulate(batch, list(range(batch["input_ids"].shape[0])), True, acc)
    return [p.grad.clone() for p in tr.actor.parameters() if p.grad is not None], acc.result(tr.dist, 1)


def test_decoupled_loss_equals_the_plain_one_when_behaviour_is_proximal_and_weighs_stale_tokens(tok):
    """The behaviour log-probs set to the proximal (recomputed) ones: every weight is exactly 1 and
    the loss and gradients are the uncorrected trainer's, bit for bit. A stale behaviour policy
    (its log-probs 0.3 lower on the first action token of each episode) weighs those tokens
    exp(0.3) and leaves the others at 1."""
    plain, dec = _trainer(tok), _trainer(tok, off_policy={"correction": "decoupled", "weight_cap": 2.0})
    dec.actor.load_state_dict(plain.actor.state_dict())
    trajs, scores, _ = plain.collect_batch(1)
    base = plain.prepare(trajs, scores)
    batch = dict(base)
    batch["logprobs"] = base["old_logp"].clone()  # the behaviour policy = the proximal one
    fixed = dec.prepare(trajs, scores)  # its own weights from the sampling-time log-probs (float noise apart)
    assert abs(fixed["stats"]["train/behaviour_weight_mean"] - 1) < 1e-4
    w, _ = behaviour_weights(batch["old_logp"], batch["logprobs"], batch["loss_mask"], 2.0)
    assert bool((w[batch["loss_mask"].bool()] == 1).all())
    g_plain, st_plain = _grads(plain, base)
    g_dec, st_dec = _grads(dec, {**batch, "behaviour_weight": w})
    assert all(torch.equal(a, b) for a, b in zip(g_plain, g_dec)) and st_plain["pg_loss"] == st_dec["pg_loss"]

    first = base["loss_mask"].bool() & ~torch.nn.functional.pad(base["loss_mask"].bool(), (1, 0))[:, :-1]
    stale = torch.where(first, base["old_logp"] - 0.3, base["old_logp"])
    w, st = behaviour_weights(base["old_logp"], stale, base["loss_mask"], 2.0)
    assert torch.allclose(w[first], torch.full_like(w[first], math.exp(0.3)))
    assert bool((w[base["loss_mask"].bool() & ~first] == 1).all()) and float(st["behaviour_weight_capped"]) == 0
    g_stale, _ = _grads(dec, {**batch, "behaviour_weight": w})
    assert not all(torch.allclose(a, b) for a, b in zip(g_plain, g_stale))
    w_cap, st = behaviour_weights(base["old_logp"], stale, base["loss_mask"], 1.2)  # exp(0.3) = 1.35 > 1.2
    assert torch.allclose(w_cap[first], torch.full_like(w_cap[first], 1.2)) and float(st["behaviour_weight_capped"]) > 0


def test_decoupled_correction_trains_and_is_refused_where_it_cannot_hold(tok):
    tr = _trainer(tok, steps=2, off_policy={"correction": "decoupled"})
    hist = [h for h in tr.train() if "rollout/reward" in h]
    assert len(hist) == 2 and abs(hist[0]["train/behaviour_weight_mean"] - 1) < 1e-4
    for kw in ({"old_logprobs": "rollout"}, {"loss_mask": False}):
        with pytest.raises(ValueError, match="off_policy.correction: decoupled"):  # the train section's own check
            _trainer(tok, off_policy={"correction": "decoupled"}, **kw)
    with pytest.raises(ValueError, match="weight_cap"):  # pydantic's ValidationError
        R.train_cfg(off_policy={"correction": "decoupled", "weight_cap": 0.5})


def test_a_correction_is_refused_for_a_policy_loss_that_takes_no_weights():
    """The launch check (agentr1.config.checks.check_run) reads the registered loss's signature."""
    from agentr1.config.checks import check_run
    from agentr1.errors import StageError
    from agentr1.registry import POLICY_LOSSES

    def unweighted(logp, old_logp, advantages, mask, **kw):
        return ppo_clip(logp, old_logp, advantages, mask)

    POLICY_LOSSES.register("unweighted_test")(unweighted)
    try:
        check_run(R.train_cfg(policy_loss="unweighted_test"), R.rollout_cfg())  # no correction: fine
        with pytest.raises(StageError, match="policy loss 'unweighted_test' takes no `weights`"):
            check_run(
                R.train_cfg(policy_loss="unweighted_test", off_policy={"correction": "decoupled"}), R.rollout_cfg()
            )
        check_run(R.train_cfg(off_policy={"correction": "decoupled"}), R.rollout_cfg())  # ppo_clip takes them
    finally:
        POLICY_LOSSES.remove("unweighted_test")
