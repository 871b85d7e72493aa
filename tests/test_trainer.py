"""The RL trainer on a tiny policy and a two-turn toy env: learning (GRPO and PPO), determinism,
reward placement, the mask switches, old log-probs, critic warm-up, collapse guard, lr schedule,
named runs."""

from __future__ import annotations

import math

import pytest
import torch

import _rl_tiny as R
from agentr1.config import Config, ConfigError, config_from_dict, load_config
from agentr1.env.rewards import score_episode
from agentr1.errors import StageError
from agentr1.lm.schedule import lr_at
from agentr1.rl import collapse, sampling, weight_sync
from agentr1.rl import trainer as trainer_mod
from agentr1.rl.sampling import Episodes
from agentr1.rl.stats import deterministic_metrics
from agentr1.rl.trainer import Trainer
from agentr1.tracking.logger import InMemoryLogger

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok():
    return R.tiny_tokenizer()


def make(tok, seed=0, **kw):
    rcfg = kw.pop("rollout", {})
    wcfg = kw.pop("reward", {})
    logger = InMemoryLogger()
    tr = Trainer(
        R.tiny_policy(tok),
        tok,
        R.train_cfg(**kw),
        R.rollout_cfg(**rcfg),
        R.reward_cfg(**wcfg),
        episodes=Episodes(R.ToyEnv(), R.QUESTIONS, R.QUESTIONS),
        logger=logger,
        seed=seed,
    )
    return tr, logger


def rewards(history):
    return [h["rollout/reward"] for h in history if "rollout/reward" in h]


# ----------------------------------------------------------------------------- learning
@pytest.mark.parametrize("estimator,steps", [("grpo", 12), ("gae", 16)])
def test_reward_rises_on_toy_task(tok, estimator, steps):
    """Seeded: 12 steps of GRPO / 16 of PPO (GAE + a critic that starts at V = 0) lift the
    reward from ~0.2 to ~1 (measured: GRPO 0.23 -> 1.0, PPO 0.21 -> 1.0)."""
    tr, _ = make(tok, steps=steps, lr=0.03, estimator=estimator, critic={"lr": 0.01})
    r = rewards(tr.train())
    first, last = sum(r[:3]) / 3, sum(r[-3:]) / 3
    assert first < 0.6, r
    assert last >= 0.8 and last >= first + 0.3, r


def test_same_numbers_twice(tok):
    a, _ = make(tok, steps=2, estimator="gae")
    b, _ = make(tok, steps=2, estimator="gae")
    ha, hb = a.train(), b.train()
    assert deterministic_metrics(ha) == deterministic_metrics(hb)
    for (k, x), (_, y) in zip(a.policy.state_dict().items(), b.policy.state_dict().items()):
        assert torch.equal(x, y), k


def test_metrics_logged_with_namespaces(tok):
    tr, logger = make(tok, steps=2, dev={"every": 2, "examples": 4})
    tr.train()
    names = set(logger.history)
    for key in (
        "rollout/reward",
        "rollout/em",
        "rollout/format_rate",
        "rollout/tool_calls",
        "rollout/turns",
        "rollout/response_length",
        "train/kl_loss",
        "train/kl_ref",
        "train/entropy",
        "train/clipfrac",
        "train/grad_norm",
        "train/lr",
        "time/rollout_s",
        "time/update_s",
        "dev/em",
    ):
        assert key in names, key
    assert [s for s, _ in logger.history["dev/em"]] == [0, 2]  # before training and at step 2
    assert logger.finite()


def test_group_signal_counts_groups_whose_rewards_differ():
    from types import SimpleNamespace as NS

    from agentr1.rl.sampling import group_signal

    scores = [NS(reward=r, em=e) for r, e in [(1, 1), (0, 0), (0, 0), (0, 0), (1, 1), (1, 1), (0.5, 0), (0.5, 0)]]
    assert group_signal(scores, 2) == ([True, False, False, False], [True, False, True, False])


def test_dynamic_sampling_refills_the_batch_with_informative_groups(tok):
    """filter_groups: a batch of groups whose rewards differ wherever refill rounds can find
    them; the first round's rollout metrics are unchanged; the batch size never changes."""
    plain, _ = make(tok, batch_questions=4, group_size=4)
    trajs, scores, metrics = plain.collect_batch(1)
    informative, _ = sampling.group_signal(scores, 4)
    assert metrics["rollout/informative_groups"] == sum(informative) / 4 and "rollout/filter_rounds" not in metrics
    assert not all(informative)  # the tiny policy leaves some groups without signal
    dyn, _ = make(tok, batch_questions=4, group_size=4, filter_groups={"enabled": True, "max_rounds": 8})
    trajs2, scores2, metrics2 = dyn.collect_batch(1)
    assert len(trajs2) == len(scores2) == 16
    assert {k: v for k, v in metrics2.items() if k in metrics} == metrics  # the first round is the same rollout
    assert metrics2["rollout/filter_rounds"] >= 1
    kept, _ = sampling.group_signal(scores2, 4)
    assert metrics2["rollout/batch_informative_groups"] == sum(kept) / 4 > metrics["rollout/informative_groups"]
    assert kept == sorted(kept, reverse=True)  # informative groups first, dropped ones only to top up
    for i in range(0, 16, 4):  # groups stay whole: one question per group
        assert len({t.qid for t in trajs2[i : i + 4]}) == 1
    with pytest.raises(ConfigError, match="group_size >= 2"):
        config_from_dict({"train": {"group_size": 1, "estimator": "reinforce_pp", "filter_groups": {"enabled": True}}})


@pytest.mark.parametrize(
    "enabled, on",
    [("grouped", {"grpo", "gigpo", "rloo", "reinforce_pp_baseline"}), (True, "all"), (False, set())],
)
def test_dynamic_sampling_grouped_resolves_by_the_estimators_baseline(enabled, on):
    """``filter_groups.enabled: grouped`` (the default) filters where the estimator declares a
    group baseline, the estimators under which an all-equal group has advantage 0."""
    from agentr1.registry import ESTIMATORS

    names = set(ESTIMATORS.names())
    assert {"gae", "reinforce_pp"} <= names  # the two estimators without a group baseline
    for name in names:
        cfg = config_from_dict({"train": {"estimator": name, "filter_groups": {"enabled": enabled}}})
        assert cfg.train.filters_groups == (on == "all" or name in on), name
    with pytest.raises(ConfigError, match="filter_groups"):
        config_from_dict({"train": {"filter_groups": {"enabled": "sometimes"}}})
    # a group_size of 1 is fine for a critic when `grouped` leaves the filter off there
    assert not config_from_dict({"train": {"group_size": 1, "estimator": "gae"}}).train.filters_groups


# ----------------------------------------------------------------------------- batch building
@pytest.fixture(scope="module")
def rolled(tok):
    tr, _ = make(tok, reward={"process": {"enabled": True, "successful_search": 0.25}})
    trajs = tr.collect(1)
    scores = [score_episode(t, tr.reward_cfg) for t in trajs]
    return tr, trajs, scores


def test_rewards_on_last_action_token_and_call_closing_token(rolled):
    tr, trajs, scores = rolled
    batch = tr.prepare(trajs, scores)
    rw = batch["token_rewards"]
    for b, (t, s) in enumerate(zip(trajs, scores)):
        start = int(batch["response_start"][b])
        # the ToyEnv's call ends with turn 0's text: the token holding its last character
        tok_close = t.token_index_for_char(0, len(t.turn_texts[0]) - 1)
        assert t.turn_spans[0][0] <= tok_close < t.turn_spans[0][1]
        close = start + tok_close
        last = start + t.turn_spans[-1][1] - 1
        assert s.process == ((tok_close, 0.25),)
        expected = torch.zeros(rw.shape[1])
        expected[close] += 0.25
        expected[last] += s.reward
        assert torch.allclose(rw[b], expected), b


def test_recomputed_old_logprobs_match_sampling_logprobs(rolled):
    tr, trajs, scores = rolled
    batch = tr.prepare(trajs, scores)
    am = batch["action_mask"].bool()
    assert torch.allclose(batch["old_logp"][am], batch["logprobs"][am], atol=1e-4)
    assert torch.equal(batch["old_logp"][~batch["loss_mask"].bool()], torch.zeros((~batch["loss_mask"].bool()).sum()))


def test_loss_mask_off_trains_on_observation_tokens(tok, rolled):
    _, trajs, scores = rolled
    tr, _ = make(tok, loss_mask=False)
    batch = tr.prepare(trajs, scores)
    obs = batch["response_mask"].bool() & ~batch["action_mask"].bool()
    assert obs.any()
    assert torch.equal(batch["loss_mask"], batch["response_mask"].bool())
    assert (batch["old_logp"][obs] < 0).all()  # recomputed for observation tokens too
    with pytest.raises(ValueError, match="old_logprobs"):  # TrainConfig's check, before any trainer exists
        make(tok, loss_mask=False, old_logprobs="rollout")


def test_advantage_mask_switch_changes_reinforce_pp_advantages(tok, rolled):
    """RF++ whitening over action tokens vs all response tokens gives different action advantages."""
    _, trajs, scores = rolled
    on, _ = make(tok, estimator="reinforce_pp")
    off, _ = make(tok, estimator="reinforce_pp", advantage_mask=False)
    a_on, a_off = on.prepare(trajs, scores), off.prepare(trajs, scores)
    am = a_on["action_mask"].bool()
    assert torch.equal(a_on["adv_mask"], am)
    assert (a_on["advantages"][~am] == 0).all()
    assert not torch.allclose(a_on["advantages"][am], a_off["advantages"][am])


# ----------------------------------------------------------------------------- critic
def test_critic_warmup_updates_only_the_critic(tok):
    tr, _ = make(tok, steps=1, estimator="gae", critic={"warmup_steps": 1})
    pol0 = R.params_of(tr.policy)
    crit0 = R.params_of(tr.critic)
    h = tr.train()
    assert h[-1]["train/policy_updated"] == 0.0
    assert all(torch.equal(pol0[k], v) for k, v in tr.policy.state_dict().items())
    assert any(not torch.equal(crit0[k], v) for k, v in tr.critic.state_dict().items())


# ----------------------------------------------------------------------------- collapse guard
def _nan_at(monkeypatch, bad_step: int):
    """Make the advantages NaN during step ``bad_step`` (its first attempt only)."""
    real = trainer_mod.compute_advantage
    state = {"step": 0, "fired": False}

    def fake(*a, **kw):
        adv, ret = real(*a, **kw)
        if state["step"] == bad_step and not state["fired"]:
            state["fired"] = True
            return adv * float("nan"), ret
        return adv, ret

    orig_step = Trainer.train_step

    def tracked(self, step):
        state["step"] = step
        return orig_step(self, step)

    monkeypatch.setattr(trainer_mod, "compute_advantage", fake)
    monkeypatch.setattr(Trainer, "train_step", tracked)
    return state


def test_nan_rolls_back_and_lowers_lr(tok, monkeypatch):
    state = _nan_at(monkeypatch, 3)
    tr, _ = make(tok, steps=4, collapse={"action": "rollback", "lr_factor": 0.5})
    h = tr.train()
    assert state["fired"]
    assert tr.events == [{"step": 3, "reason": tr.events[0]["reason"], "action": "rollback"}]
    assert "non-finite" in tr.events[0]["reason"]
    assert tr.lr_scale == 0.5 and tr.rollbacks == 1
    assert [x["step"] for x in h] == [1, 2, 3, 4]
    assert h[2]["train/lr"] == pytest.approx(0.005) and h[1]["train/lr"] == pytest.approx(0.01)
    assert all(math.isfinite(v) for x in h for v in x.values())
    assert all(torch.isfinite(v).all() for v in tr.policy.state_dict().values())


def test_nan_skip_keeps_the_weights(tok, monkeypatch):
    _nan_at(monkeypatch, 2)
    tr, _ = make(tok, steps=3, collapse={"action": "skip"})
    before = {}
    orig_update = Trainer.update

    def spy(self, batch, step):
        before.setdefault(step, R.params_of(self.policy))
        return orig_update(self, batch, step)

    monkeypatch.setattr(Trainer, "update", spy)
    h = tr.train()
    assert h[1]["step"] == 2 and h[1]["train/skipped"] == 1.0
    assert all(torch.equal(before[2][k], v) for k, v in before[3].items())  # step 2 changed nothing
    assert tr.events[0]["action"] == "skip"


def test_nan_stop_fails_with_a_clear_message(tok, monkeypatch):
    _nan_at(monkeypatch, 1)
    tr, _ = make(tok, steps=2, collapse={"action": "stop"})
    with pytest.raises(StageError, match="collapsed at step 1: non-finite loss"):
        tr.train()


def test_reward_drop_detection(tok):
    tr, _ = make(tok, collapse={"reward_drop": 0.3, "window": 3})
    tr.guard_rewards = [0.8, 0.8]
    c = tr.tcfg.collapse
    assert collapse.reward_drop(0.1, tr.guard_rewards, c) is None  # not enough history yet
    tr.guard_rewards = [0.7, 0.8, 0.9]
    assert collapse.reward_drop(0.6, tr.guard_rewards, c) is None
    assert "fell more than 0.3" in collapse.reward_drop(0.45, tr.guard_rewards, c)


def test_too_many_rollbacks_stop(tok, monkeypatch):
    real = trainer_mod.compute_advantage
    monkeypatch.setattr(
        trainer_mod, "compute_advantage", lambda *a, **kw: tuple(x * float("nan") for x in real(*a, **kw))
    )
    tr, _ = make(tok, steps=2, collapse={"action": "rollback", "max_rollbacks": 1})
    with pytest.raises(StageError, match="already rolled back 1"):
        tr.train()


# ----------------------------------------------------------------------------- schedule, config
def test_lr_schedule_is_applied_per_optimizer_step(tok):
    """The logged lr of a step is the mean over its optimizer steps of the schedule; after a
    roll-back and a reload, the optimizer holds the schedule's lr at the saved step count."""
    tr, _ = make(tok, steps=3, estimator="gae", lr_schedule="cosine", warmup_steps=3, critic={"lr": 0.02})
    t = tr.tcfg
    n = t.mini_batches * t.ppo_epochs  # optimizer steps per training step
    total = t.steps * n
    history = tr.train()
    for h in history:
        done = (h["step"] - 1) * n
        assert h["train/lr"] == pytest.approx(sum(lr_at(done + i, t.lr, 3, total, "cosine") for i in range(n)) / n)
    assert tr.opt_steps == tr.critic_opt_steps == total
    assert {g["lr"] for g in tr.opt.param_groups} == {lr_at(total, t.lr, 3, total, "cosine")}
    assert {g["lr"] for g in tr.critic_opt.param_groups} == {lr_at(total, 0.02, 3, total, "cosine")}
    tr.lr_scale, tr.opt_steps = 0.5, 1
    tr._build_schedulers()
    assert tr.opt.param_groups[0]["lr"] == lr_at(1, t.lr * 0.5, 3, total, "cosine")


def test_named_runs_merge_into_train(repo_root):
    cfg = load_config(repo_root / "params.yaml")  # the named runs live there only (Config().runs is empty)
    assert set(cfg.runs) == {
        "ppo",
        "grpo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "rloo",
        "ppo_no_adv_mask",
        "ppo_no_adv_no_loss_mask",
        "grpo_no_loss_mask",
    }  # + gigpo, grpo_reference: profiles/extended.yaml
    assert cfg.seeds == [0, 1, 2] and len(cfg.replicas()) == 24  # every run x every seed: train@<run>-<seed>
    assert cfg.train_for("grpo-2").seed == 2 and cfg.train_for("grpo").seed is None  # None = the top-level seed
    t = cfg.train_for("ppo_no_adv_no_loss_mask")
    assert (t.estimator, t.advantage_mask, t.loss_mask, t.lr) == ("gae", False, False, cfg.train.lr)
    assert cfg.train_for("grpo").estimator == "grpo"
    with pytest.raises(ConfigError, match="unknown run 'nope'"):
        cfg.train_for("nope")
    with pytest.raises(ConfigError, match=r"runs\.bad\.kl\.coef"):
        config_from_dict({"runs": {"bad": {"kl": {"coef": -1}}}})
    nested = config_from_dict({"runs": {"x": {"kl": {"mode": "reward"}}}}).train_for("x")
    assert nested.kl.mode == "reward" and nested.kl.coef == Config().train.kl.coef


def test_batch_must_split_over_mini_batches(tok):
    with pytest.raises(ValueError, match="mini_batches 4 does not divide the batch of 6 episodes"):
        make(tok, batch_questions=3, group_size=2, mini_batches=4)  # refused when the config is built


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_pp_baseline"])
def test_a_group_estimator_with_groups_of_one_is_refused(tok, estimator):
    with pytest.raises(ValueError, match="group_size 1 gives every episode advantage 0"):
        make(tok, estimator=estimator, group_size=1)


@pytest.mark.parametrize("key", ["lr", "entropy_coef"])
def test_infinite_or_nan_settings_are_refused(key):
    from agentr1.config import config_from_dict

    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match=f"train.{key}: Input should be a finite number"):
            config_from_dict({"train": {key: bad}})


def test_prompt_filling_the_context_is_a_clear_error(tok):
    tr, _ = make(tok, rollout={"max_total_tokens": 16})
    trajs = tr.collect(1)
    with pytest.raises(StageError, match="max_total_tokens"):
        tr.prepare(trajs, [score_episode(t, tr.reward_cfg) for t in trajs])


# ----------------------------------------------------------------------------- vLLM weight sync
class FakeInferenceEngine:
    """Stands in for VLLMBackend: its own copy of the model (as a vLLM engine holds), filled only
    through load_weights, generating with the HF backend code."""

    def __init__(self, tok, model_path):
        from agentr1.rollout.hf import HFBackend

        self.model_path = model_path
        self.model = R.tiny_policy(tok, seed=123)  # different weights until the first sync
        self.backend = HFBackend(self.model, tok)
        self.synced: list[dict[str, torch.Tensor]] = []

    def load_weights(self, named_tensors):
        named = {n: t.detach().clone() for n, t in named_tensors}
        self.synced.append(named)
        self.model.load_state_dict(named, strict=False)

    def generate(self, *args, **kwargs):
        return self.backend.generate(*args, **kwargs)


def test_vllm_backend_gets_the_policy_weights_before_every_rollout(tok, monkeypatch):
    built = []

    def fake_make_backend(rollout_cfg, model=None, tokenizer=None, model_path=None):
        assert rollout_cfg.backend == "vllm" and model is None
        built.append(FakeInferenceEngine(tok, model_path))
        return built[-1]

    tr_hf, _ = make(tok, steps=2, dev={"every": 1, "examples": 4})
    hf_history = tr_hf.train()
    monkeypatch.setattr(weight_sync, "make_backend", fake_make_backend)
    logger = InMemoryLogger()
    tr = Trainer(
        R.tiny_policy(tok),
        tok,
        R.train_cfg(steps=2, dev={"every": 1, "examples": 4}),
        R.rollout_cfg(backend="vllm"),
        R.reward_cfg(),
        episodes=Episodes(R.ToyEnv(), R.QUESTIONS, R.QUESTIONS),
        logger=logger,
        seed=0,
        model_path="ckpt/sft",
    )
    sync_points = []
    orig = tr.weight_sync.synced
    tr.weight_sync.synced = lambda cfg, policy: (sync_points.append(R.params_of(tr.policy)), orig(cfg, policy))[1]
    history = tr.train()
    [engine] = built  # built once, from the start checkpoint
    assert engine.model_path == "ckpt/sft"
    # 2 training rollouts + dev rollouts at steps 0, 1, 2; each after loading the weights of that moment
    assert len(engine.synced) == len(sync_points) == 5
    for synced, policy in zip(engine.synced, sync_points):
        assert synced.keys() <= policy.keys()
        assert all(torch.equal(t, policy[n]) for n, t in synced.items())
    assert not all(torch.equal(engine.synced[0][n], engine.synced[-1][n]) for n in engine.synced[0])
    # the engine saw the same weights as the trainer, so the run equals the hf-backend run
    assert rewards(history) == rewards(hf_history)
    assert [h.get("dev/em") for h in history] == [h.get("dev/em") for h in hf_history]


def test_vllm_backend_needs_the_start_checkpoint(tok):
    with pytest.raises(StageError, match="model_path"):
        Trainer(
            R.tiny_policy(tok),
            tok,
            R.train_cfg(),
            R.rollout_cfg(backend="vllm"),
            R.reward_cfg(),
            episodes=Episodes(R.ToyEnv(), R.QUESTIONS),
        )


def test_rollouts_are_traced_every_n_steps(tok):
    tr, logger = make(tok, steps=4, trace_every=2)
    tr.train()
    assert logger.trajectories == [(2, "train", 16), (4, "train", 16)]  # the whole step's batch is handed over
    tr_off, logger_off = make(tok, steps=2, trace_every=0)
    tr_off.train()
    assert logger_off.trajectories == []
