"""Step-level credit: GiGPO's advantages by hand, anchor states, step rows and the gradient
equivalence of step rows and trajectory rows (``agentr1.rl.steps``, ``agentr1.rl.advantages.gigpo``)."""

from __future__ import annotations

import math

import pytest
import torch

import _rl_tiny as R
from agentr1.rl.advantages import compute_advantage, gigpo, grpo
from agentr1.rl.sampling import Episodes
from agentr1.rl.stats import StepStats
from agentr1.rl.steps import anchor_groups, step_rows, turn_index
from agentr1.rl.trainer import Trainer

torch.set_num_threads(1)

PROMPT = [1, 2, 3]
OBS_A, OBS_B = [20, 21], [22, 23]


def episode_batch(episodes: list[list[tuple[list[int], list[int]]]], rewards: list[float]):
    """Right-padded ``input_ids``, ``action_mask`` and outcome ``token_rewards`` (on the last action
    token) of episodes given as lists of ``(action tokens, observation tokens)`` turns."""
    seqs, acts = [], []
    for turns in episodes:
        ids, act = list(PROMPT), [0] * len(PROMPT)
        for action, obs in turns:
            ids += action + obs
            act += [1] * len(action) + [0] * len(obs)
        seqs.append(ids)
        acts.append(act)
    L = max(map(len, seqs))
    input_ids = torch.zeros(len(seqs), L, dtype=torch.long)
    action = torch.zeros(len(seqs), L, dtype=torch.long)
    r = torch.zeros(len(seqs), L)
    for b, (ids, act) in enumerate(zip(seqs, acts)):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        action[b, : len(act)] = torch.tensor(act)
        r[b, max(i for i, a in enumerate(act) if a)] = rewards[b]
    return input_ids, action, r


def per_turn(adv: torch.Tensor, action: torch.Tensor) -> list[list[float]]:
    """The advantage of each turn of each row (asserting it is constant over the turn's tokens)."""
    turn = turn_index(action)
    out = []
    for b in range(adv.shape[0]):
        row = []
        for j in range(int(turn[b].max()) + 1):
            vals = adv[b][(turn[b] == j) & (action[b] == 1)]
            assert torch.allclose(vals, vals[0].expand_as(vals)), vals
            row.append(float(vals[0]))
        out.append(row)
    return out


# ----------------------------------------------------------------------------- hand cases
def test_gigpo_by_hand_first_turns_coincide_later_turns_differ():
    """A group of 4: every first turn searches the same query and gets the same passage; episodes 0
    and 1 search the same second query (same passage) and answer differently at turn 3 (right /
    wrong); episodes 2 and 3 answer at turn 2 (right / wrong). Rewards 1, 0, 1, 0.

    Episode advantages: mean 0.5, unbiased std sqrt(1/3), a = +-0.5 / sqrt(1/3) = +-0.8660.
    Step groups: turn 1 of all four (the prompt), turn 2 of all four (same first turn and
    observation), turn 3 of episodes 0 and 1 (same second turn and observation). With gamma 1 a
    step return is the episode's reward, so the first two groups repeat a_b, and the third gives
    (1 - 0.5) / sqrt(0.5) = +-0.7071. A = a_b + step_weight * a_bj."""
    q1, q2 = ([5, 6], OBS_A), ([7, 8], OBS_B)
    eps = [[q1, q2, ([30], [])], [q1, q2, ([31], [])], [q1, ([32], [])], [q1, ([33], [])]]
    ids, act, r = episode_batch(eps, [1.0, 0.0, 1.0, 0.0])
    steps = anchor_groups(ids, act, [0, 0, 0, 0])
    assert steps.group.tolist() == [[0, 1, 2], [0, 1, 2], [0, 1, -1], [0, 1, -1]]
    assert steps.sizes().tolist() == [[4, 4, 2], [4, 4, 2], [4, 4, 0], [4, 4, 0]]
    a = 0.5 / math.sqrt(1 / 3)
    s = 0.5 / math.sqrt(0.5)
    for w in (1.0, 0.5):
        adv, ret = gigpo(r, act, [0, 0, 0, 0], steps, step_weight=w, eps=0.0)
        want = [
            [a + w * a, a + w * a, a + w * s],
            [-a - w * a, -a - w * a, -a - w * s],
            [a + w * a, a + w * a],
            [-a - w * a, -a - w * a],
        ]
        got = per_turn(adv, act)
        for g_row, w_row in zip(got, want):
            assert g_row == pytest.approx(w_row, abs=1e-6)
        assert torch.equal(adv, ret)
        assert bool((adv[act == 0] == 0).all())  # the advantage mask holds: nothing on prompt / observations


def test_gigpo_discounted_step_returns_by_hand():
    """gamma 0.5, norm_by_std off (Dr. GRPO-style means only), two groups of 2 with different
    first turns: a first turn's step return is 0.5 * the reward earned at the next turn."""
    t_a, t_b = ([5], OBS_A), ([6], OBS_A)
    eps = [[t_a, ([9], [])], [t_a, ([10], [])], [t_b, ([9], [])], [t_a, ([9], [])]]
    ids, act, r = episode_batch(eps, [1.0, 0.0, 1.0, 1.0])
    index = [0, 0, 1, 1]
    steps = anchor_groups(ids, act, index)
    # group 0: both turns shared (turn 2 states equal); group 1: turn 1 shared, turn 2 states differ
    assert steps.sizes().tolist() == [[2, 2], [2, 2], [2, 1], [2, 1]]
    adv, _ = gigpo(r, act, index, steps, gamma=0.5, norm_by_std=False, step_weight=1.0)
    # episode a: group 0 -> +-0.5, group 1 -> 0; step turn 1: returns 0.5*R -> group 0 +-0.25, group 1 0;
    # step turn 2: group 0 returns R -> +-0.5; group 1 singletons -> 0
    assert sum(per_turn(adv, act), []) == pytest.approx([0.75, 1.0, -0.75, -1.0, 0.0, 0.0, 0.0, 0.0])


def test_gigpo_without_shared_states_is_grpo():
    """No state shared beyond the prompt: every later step group is a singleton (step advantage 0),
    so GiGPO is GRPO with the first turn weighted (1 + step_weight), and exactly GRPO at weight 0."""
    eps = [[([5 + b], OBS_A), ([9], [])] for b in range(4)] + [[([5 + b], OBS_B), ([9 + b], [])] for b in range(4)]
    ids, act, r = episode_batch(eps, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    index = [0] * 4 + [1] * 4
    steps = anchor_groups(ids, act, index)
    assert (steps.sizes()[:, 1] == 1).all() and (steps.sizes()[:, 0] == 4).all()
    base, _ = grpo(r, act, index)
    zero_w, _ = gigpo(r, act, index, steps, step_weight=0.0)
    assert torch.equal(zero_w, base)
    one_w, _ = gigpo(r, act, index, steps, step_weight=1.0)
    turn = turn_index(act)
    assert torch.allclose(one_w, torch.where(turn == 0, 2 * base, base))


def test_gigpo_needs_steps_and_similarity_groups_near_states():
    ids, act, r = episode_batch([[([5], OBS_A), ([9], [])]] * 2, [1.0, 0.0])
    with pytest.raises(ValueError, match="steps"):
        compute_advantage("gigpo", r, act, index=[0, 0])
    # two observations differing in one token of 20: separate step groups when exact, one at 0.9
    long_a, long_b = list(range(40, 60)), list(range(40, 59)) + [99]
    ids, act, r = episode_batch([[([5], long_a), ([9], [])], [([5], long_b), ([10], [])]], [1.0, 0.0])
    assert anchor_groups(ids, act, [0, 0]).sizes()[:, 1].tolist() == [1, 1]
    assert anchor_groups(ids, act, [0, 0], similarity=0.9).sizes()[:, 1].tolist() == [2, 2]
    assert anchor_groups(ids, act, [0, 1], similarity=0.9).sizes()[:, 1].tolist() == [1, 1]  # other question
    with pytest.raises(ValueError, match="similarity"):
        anchor_groups(ids, act, [0, 0], similarity=0.0)


# ----------------------------------------------------------------------------- step rows
def test_step_rows_cut_each_turn_with_its_context():
    eps = [[([5, 6], OBS_A), ([7], [])], [([8], [])]]
    ids, act, r = episode_batch(eps, [1.0, 0.0])
    batch = {
        "input_ids": ids,
        "attention_mask": (torch.arange(ids.shape[1]) < torch.tensor([[8], [4]])).long(),
        "action_mask": act,
        "loss_mask": act,
        "adv_mask": act,
        "advantages": r + 0.5,
        "extra": "kept",
    }
    rows = step_rows(batch, turn_index(act))
    assert rows["trajectory"].tolist() == [0, 0, 1] and rows["turn"].tolist() == [0, 1, 0]
    # row (0, 0): prompt + the first action, observation cut off (it belongs to turn 0 but is no action)
    assert rows["attention_mask"].sum(-1).tolist() == [7, 8, 4]
    assert rows["loss_mask"].tolist()[0] == [0, 0, 0, 1, 1, 0, 0, 0]
    assert rows["loss_mask"].tolist()[1] == [0, 0, 0, 0, 0, 0, 0, 1]
    assert torch.equal(rows["advantages"][1], batch["advantages"][0]) and rows["extra"] == "kept"
    assert torch.equal(rows["loss_mask"].sum(0), act.sum(0))  # every action token is trained exactly once


@pytest.fixture(scope="module")
def tok():
    return R.tiny_tokenizer()


def _grads(tr: Trainer, batch: dict) -> list[torch.Tensor]:
    tr.actor.zero_grad(set_to_none=True)
    tr._accumulate(batch, list(range(batch["input_ids"].shape[0])), True, StepStats())
    return [p.grad.clone() for p in tr.actor.parameters() if p.grad is not None]


@pytest.mark.parametrize("agg_mode,equal", [("token-mean", True), ("seq-mean-token-mean", False)])
def test_step_rows_give_the_trajectory_gradient_under_token_mean(tok, agg_mode, equal):
    """One mini-batch of a GiGPO step on the two-turn toy task: the policy-loss gradient (PPO clip +
    k3 KL) of the step rows equals the trajectory rows' under ``token-mean`` (same per-token terms,
    same denominator) and differs under ``seq-mean-token-mean`` (a turn weighs as an episode)."""
    tcfg = R.train_cfg(estimator="gigpo", agg_mode=agg_mode, mini_batches=1, micro_batch_size=32, lr=0.05)
    tr = Trainer(
        R.tiny_policy(tok),
        tok,
        tcfg,
        R.rollout_cfg(),
        R.reward_cfg(),
        episodes=Episodes(R.ToyEnv(), R.QUESTIONS, R.QUESTIONS),
        seed=3,
    )
    tr.train(until=1)  # move off the start so the policy and its reference differ
    trajs, scores, _ = tr.collect_batch(2)
    batch = tr.prepare(trajs, scores)
    assert "train/step_group_shared" in batch["stats"]
    rows = step_rows(batch, turn_index(batch["action_mask"]))
    assert rows["input_ids"].shape[0] == 2 * batch["input_ids"].shape[0]  # two turns per toy episode
    g_traj, g_step = _grads(tr, batch), _grads(tr, rows)
    close = all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(g_traj, g_step))
    assert close is equal


def test_trainer_with_step_rows_and_gigpo_learns_the_toy_task(tok):
    """GiGPO with step rows lifts the toy reward as GRPO does (seeded; measured 0.25 -> 1.0) and
    logs its step diagnostics."""
    tcfg = R.train_cfg(estimator="gigpo", sample_unit="step", steps=12, lr=0.03)
    tr = Trainer(
        R.tiny_policy(tok),
        tok,
        tcfg,
        R.rollout_cfg(),
        R.reward_cfg(),
        episodes=Episodes(R.ToyEnv(), R.QUESTIONS, R.QUESTIONS),
        seed=0,
    )
    hist = [h for h in tr.train() if "rollout/reward" in h]
    r = [h["rollout/reward"] for h in hist]
    assert sum(r[:3]) / 3 < 0.6 and sum(r[-3:]) / 3 >= 0.8, r
    h = hist[0]
    assert h["train/step_rows"] == 2 * 16 and h["train/step_group_shared"] >= 0.5
    assert 0.0 <= h["train/step_group_shared_later"] <= 1.0 and h["train/episode_adv_abs"] > 0


def test_step_rows_are_refused_over_several_ranks():
    from agentr1.config.checks import check_run
    from agentr1.errors import StageError

    check_run(R.train_cfg(sample_unit="step"), R.rollout_cfg(), world=1)
    with pytest.raises(StageError, match="sample_unit: step"):
        check_run(R.train_cfg(sample_unit="step"), R.rollout_cfg(), world=2)


def test_gae_must_run_on_trajectories_before_the_rows_are_cut():
    """Where the two representations must differ: GAE (a critic's values) on separate turn rows ends
    each turn's chain at the turn (the last token terminal, next value 0), so the first turn loses
    the bootstrap from the second turn's value and reward; on the whole trajectory it carries across
    the observation. The trainer therefore computes advantages on trajectories, then cuts the rows
    (the last turn's advantages agree either way)."""
    from agentr1.rl.advantages import gae

    ids, act, r = episode_batch([[([5, 6], OBS_A), ([7, 8], [])]], [1.0])
    values = torch.linspace(0.1, 0.8, ids.shape[1]).unsqueeze(0)
    traj_adv, _ = gae(r, values, act, gamma=0.9, lam=0.8, whiten=False)
    rows = step_rows(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "action_mask": act,
            "adv_mask": act,
            "token_rewards": r,
            "values": values,
        },
        turn_index(act),
    )
    row_adv, _ = gae(rows["token_rewards"], rows["values"], rows["adv_mask"], gamma=0.9, lam=0.8, whiten=False)
    first, last = rows["adv_mask"][0].bool(), rows["adv_mask"][1].bool()
    assert torch.allclose(row_adv[1][last], traj_adv[0][last])
    assert not torch.allclose(row_adv[0][first], traj_adv[0][first])


# ----------------------------------------------------------------------------- issue 48 items 4-7


def test_a_later_context_state_never_joins_a_group_of_its_own_episode():
    # episode 0's second state extends its first (the prompt): difflib ratio 2*3/(3+6) = 0.67 >= 0.6,
    # so a similarity test alone would put turn 2 into turn 1's group - a decision against its own past
    ids, act, r = episode_batch([[([5], OBS_A), ([9], [])], [([6], OBS_A), ([9], [])]], [1.0, 0.0])
    g = anchor_groups(ids, act, [0, 0], similarity=0.6).group
    assert g[0, 0] == g[1, 0]  # the prompt: both first turns
    assert g[0, 1] != g[0, 0] and g[1, 1] != g[1, 0]  # no turn joins its own episode's earlier group
    assert g[1, 1] == g[0, 1]  # ...but the other episode's similar second state (ratio 5/6 >= 0.6)
    # verl-agent's observation anchor keeps its rule: the same observation twice in one episode is one group
    ids, act, r = episode_batch([[([5], OBS_A), ([6], OBS_A), ([9], [])]], [1.0])
    g = anchor_groups(ids, act, [0], anchor="observation").group
    assert g[0, 1] == g[0, 2] != g[0, 0]


def test_the_similarity_rule_is_verl_agents_argument_order():
    # difflib's ratio is not symmetric: (new, rep) 0.308, (rep, new) 0.462
    rep, new = [31, 31, 30, 32, 30, 31], [33, 32, 30, 32, 34, 30, 33]  # no token of the prompt's
    import difflib

    assert difflib.SequenceMatcher(None, new, rep).ratio() < 0.4 < difflib.SequenceMatcher(None, rep, new).ratio()
    ids, act, r = episode_batch([[([5], rep), ([9], [])], [([5], new), ([9], [])]], [1.0, 0.0])
    g = anchor_groups(ids, act, [0, 0], similarity=0.4, anchor="observation").group
    assert (
        g[1, 1] != g[0, 1]
    )  # ratio(state, representative) = 0.308 < 0.4: apart, as verl-agent's are_similar(obs, rep)
    ids, act, r = episode_batch([[([5], new), ([9], [])], [([5], rep), ([9], [])]], [1.0, 0.0])
    g = anchor_groups(ids, act, [0, 0], similarity=0.4, anchor="observation").group
    assert g[1, 1] == g[0, 1]  # the other way round the ratio is 0.462: together


def _first_similar_groups(states, index, t):
    """The rule written plainly: each state joins the first earlier group (creation order) of its
    question whose first state has ``ratio(state, rep) >= t``, else opens one."""
    import difflib

    reps, out = [], []
    for q, st in zip(index, states):
        g = next(
            (g for g, (rq, rep) in enumerate(reps) if rq == q and difflib.SequenceMatcher(None, st, rep).ratio() >= t),
            None,
        )
        if g is None:
            g = len(reps)
            reps.append((q, st))
        out.append(g)
    return out


def test_the_similarity_bounds_change_no_grouping_without_a_cap_and_the_cap_bounds_it():
    import random

    rng = random.Random(0)
    for _ in range(40):  # observation anchors: one turn per episode after the prompt
        obs = [[rng.randint(30, 36) for _ in range(rng.randint(1, 12))] for _ in range(6)]
        index = [rng.randint(0, 1) for _ in range(6)]
        t = rng.choice([0.3, 0.5, 0.7, 0.9])
        ids, act, r = episode_batch([[([5], o), ([9], [])] for o in obs], [0.0] * 6)
        got = anchor_groups(ids, act, index, similarity=t, anchor="observation").group[:, 1].tolist()
        want = _first_similar_groups([tuple(o) for o in obs], index, t)
        pairs = {(x, y) for x, y in zip(got, want)}
        assert len(pairs) == len(set(got)) == len(set(want))  # the same partition (labels aside)
    # a cap: the third state is similar only to the second group's representative
    a, b = [40, 41, 42, 43, 44, 45], [50, 51, 52, 53, 54, 55]
    c = [50, 51, 52, 53, 54, 99]  # ratio to b 5/6, to a 0; a passes real_quick_ratio (equal lengths)
    ids, act, r = episode_batch([[([5], x), ([9], [])] for x in (a, b, c)], [0.0] * 3)
    g = anchor_groups(ids, act, [0, 0, 0], similarity=0.8, anchor="observation").group[:, 1].tolist()
    assert g[2] == g[1] != g[0]
    g = anchor_groups(ids, act, [0, 0, 0], similarity=0.8, anchor="observation", max_compare=1).group[:, 1].tolist()
    assert len(set(g)) == 3  # one real comparison (with a's group), then a group of its own
    # a window sees only the states' tails: two contexts that differ early but end alike
    head_a, head_b, tail = list(range(100, 140)), list(range(200, 240)), list(range(40, 60))
    ids, act, r = episode_batch([[([5], head_a + tail), ([9], [])], [([5], head_b + tail), ([9], [])]], [1.0, 0.0])
    assert anchor_groups(ids, act, [0, 0], similarity=0.9, window=None).sizes()[:, 1].tolist() == [1, 1]
    assert anchor_groups(ids, act, [0, 0], similarity=0.9, window=20).sizes()[:, 1].tolist() == [2, 2]
    for bad in ({"window": 0}, {"max_compare": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            anchor_groups(ids, act, [0, 0], similarity=0.9, **bad)


def _verl_agent_reference(episodes, index, step_rewards, w, gamma=1.0):
    """verl-agent's GiGPO on step rows, written out from its description (one row per step; the row
    score = its episode's score; anchor = the step's observation; mean_norm; episode statistics
    across the step rows; exact observation clusters; discounted step returns): per episode, the
    advantage of each step."""
    rows = [(e, j) for e, turns in enumerate(episodes) for j in range(len(turns))]
    score = {e: sum(step_rewards[e]) for e in range(len(episodes))}
    ret = {}
    for e, rs in enumerate(step_rewards):
        run = 0.0
        for j in reversed(range(len(rs))):
            run = rs[j] + gamma * run
            ret[e, j] = run
    obs = {(e, j): tuple(PROMPT) if j == 0 else tuple(episodes[e][j - 1][1]) for e, j in rows}
    ep_mean = {
        q: sum(score[e] for e, _ in rows if index[e] == q) / sum(1 for e, _ in rows if index[e] == q)
        for q in set(index)
    }
    clusters = {}
    for e, j in rows:
        clusters.setdefault((index[e], obs[e, j]), []).append((e, j))
    step_mean = {k: sum(ret[x] for x in v) / len(v) for k, v in clusters.items()}
    return [
        [
            (score[e] - ep_mean[index[e]]) + w * (ret[e, j] - step_mean[index[e], obs[e, j]])
            for j in range(len(episodes[e]))
        ]
        for e in range(len(episodes))
    ]


def test_verl_agent_settings_give_verl_agents_advantages():
    # 2 questions x 3 episodes of 1-3 turns; observations repeat across episodes (and within one)
    episodes = [
        [([5], OBS_A), ([7], OBS_B), ([9], [])],  # q0
        [([6], OBS_A), ([9], [])],  # q0: its second turn sees OBS_A like episode 0's
        [([5], [])],  # q0: answers at once
        [([5], OBS_B), ([8], OBS_B), ([9], [])],  # q1: OBS_B twice in one episode
        [([6], OBS_A), ([9], [])],  # q1
        [([7], OBS_B), ([8], OBS_A), ([9], [])],  # q1
    ]
    index = [0, 0, 0, 1, 1, 1]
    step_rewards = [[0.1, -0.05, 1.0], [0.1, 0.0], [0.0], [0.1, 0.1, 1.0], [-0.1, 0.0], [0.1, 0.1, 0.0]]
    ids, act, _ = episode_batch(episodes, [0.0] * 6)
    r = torch.zeros(ids.shape, dtype=torch.float32)
    turn = turn_index(act)
    for b, rs in enumerate(step_rewards):
        for j, v in enumerate(rs):  # each turn's reward on its last action token
            r[b, int(torch.nonzero((turn[b] == j) & (act[b] == 1)).max())] = v
    w = 0.7
    cfg = R.train_cfg(
        estimator="gigpo",
        gigpo={
            "step_advantage_w": w,
            "episode_stats": "steps",
            "mode": "mean_norm",
            "anchor": "observation",
            "enable_similarity": False,
        },
    )
    g = cfg.gigpo
    assert g.step_weight == w and g.similarity == 1.0 and g.norm_by_std(True) is False
    steps = anchor_groups(ids, act, index, g.similarity, g.anchor, g.window, g.max_compare)
    adv, _ = compute_advantage(
        "gigpo",
        r,
        act,
        index=index,
        steps=steps,
        norm_by_std=g.norm_by_std(cfg.norm_by_std),
        step_weight=g.step_weight,
        episode_stats=g.episode_stats,
    )
    want = _verl_agent_reference(episodes, index, step_rewards, w)
    got = per_turn(adv, act)
    assert [len(x) for x in got] == [len(x) for x in want]
    for gr, wr in zip(got, want):
        assert gr == pytest.approx(wr, abs=1e-6)
    # this project's defaults differ exactly where documented: context anchors, episode statistics
    adv2, _ = compute_advantage(
        "gigpo", r, act, index=index, steps=anchor_groups(ids, act, index), norm_by_std=False, step_weight=w
    )
    flat = lambda rows: [x for row in rows for x in row]  # noqa: E731
    assert max(abs(a - b) for a, b in zip(flat(per_turn(adv2, act)), flat(want))) > 0.05


def test_verl_agent_names_are_aliases_and_refused_twice():
    import pydantic

    cfg = R.train_cfg(
        estimator="gigpo", gigpo={"enable_similarity": True, "similarity_thresh": 0.9, "step_advantage_w": 2.0}
    )
    assert cfg.gigpo.similarity == 0.9 and cfg.gigpo.step_weight == 2.0
    assert "step_advantage_w" not in cfg.gigpo.model_dump()
    # params.yaml lists step_weight and similarity at their defaults: an alias merged over them wins
    from pathlib import Path

    from agentr1.config.load import apply_overrides, config_from_dict, read_params

    raw = apply_overrides(
        read_params(Path(__file__).resolve().parents[1] / "params.yaml"),
        {
            "train.gigpo.step_advantage_w": 0.5,
            "train.gigpo.enable_similarity": True,
            "train.gigpo.similarity_thresh": 0.9,
        },
    )
    merged = config_from_dict(raw).train.gigpo
    assert (merged.step_weight, merged.similarity) == (0.5, 0.9)
    for bad, msg in [
        ({"step_weight": 1.5, "step_advantage_w": 2.0}, "both given"),
        ({"similarity": 0.9, "similarity_thresh": 0.8, "enable_similarity": True}, "both given"),
        ({"enable_similarity": True, "similarity_thresh": 1.0}, r"similarity_thresh.*\(0, 1\)"),
        ({"enable_similarity": "yes"}, "enable_similarity"),
        ({"similarity_thresh": 0.8}, "only with enable_similarity: true"),
        ({"mode": "std_norm"}, "mode"),
        ({"anchor": "obs"}, "anchor"),
        ({"window": 0}, "window"),
        ({"max_compare": 0}, "max_compare"),
    ]:
        with pytest.raises((pydantic.ValidationError, ValueError), match=msg):
            R.train_cfg(estimator="gigpo", gigpo=bad)
