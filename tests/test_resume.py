"""Kill-and-resume: a run stopped after step k and resumed from its checkpoint ends with exactly
the metrics and parameters of the uninterrupted run. Corrupt or missing checkpoint files fail
with a StageError naming the file; a failed save leaves the previous state intact."""

from __future__ import annotations

import pytest
import torch

import _rl_tiny as R
from agentr1.errors import StageError
from agentr1.rl import checkpoint as ckpt
from agentr1.rl.trainer import Trainer, deterministic_metrics

torch.set_num_threads(1)

STEPS = 4


@pytest.fixture(scope="module")
def tok():
    return R.tiny_tokenizer()


def make(tok, state_dir, **kw):
    cfg = R.train_cfg(steps=STEPS, estimator="gae", lr=0.02, checkpoint={"every": 2},
                      dev={"every": 2, "examples": 4}, **kw)
    return Trainer(R.tiny_policy(tok), tok, cfg, R.rollout_cfg(), R.reward_cfg(), env=R.ToyEnv(),
                   train_questions=R.QUESTIONS, dev_questions=R.QUESTIONS, state_dir=state_dir)


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def straight(tok, tmp_path_factory):
    tr = make(tok, tmp_path_factory.mktemp("straight") / "state")
    return tr.train(), R.params_of(tr.policy), R.params_of(tr.critic)


def _kill_after(step):
    def hook(k, metrics):
        if k == step:
            raise Killed(f"killed after step {k}")
    return hook


def test_kill_and_resume_ends_identical(tok, tmp_path, straight):
    history, policy, critic = straight
    state = tmp_path / "state"
    first = make(tok, state)
    first.on_step = _kill_after(3)  # dies after step 3; the last checkpoint is step 2
    with pytest.raises(Killed):
        first.train()
    assert ckpt.load_state(state)[1]["step"] == 2

    resumed = make(tok, state)  # a new process: fresh objects, state from disk
    resumed.restore()
    assert resumed.step == 2
    h = resumed.train()
    assert [x["step"] for x in h] == [0, 1, 2, 3, 4]
    assert deterministic_metrics(h) == deterministic_metrics(history)
    for k, v in resumed.policy.state_dict().items():
        assert torch.equal(v, policy[k]), k
    for k, v in resumed.critic.state_dict().items():
        assert torch.equal(v, critic[k]), k
    # the optimizer state came back too (Adam moments drive every later step)
    assert resumed.opt_steps == STEPS * 2 and resumed.critic_opt_steps == STEPS * 2


def test_corrupt_or_missing_checkpoint_files_are_named(tok, tmp_path):
    state = tmp_path / "state"
    tr = make(tok, state)
    tr.train(until=2)
    blob = state / "policy.pt"
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(StageError, match=r"policy\.pt is corrupt"):
        make(tok, state).restore()
    (state / "optimizer.pt").unlink()
    with pytest.raises(StageError, match=r"optimizer\.pt is missing"):
        ckpt.load_state(state)
    (state / "manifest.json").write_text("{not json")
    with pytest.raises(StageError, match=r"manifest\.json is unreadable"):
        ckpt.load_state(state)
    (state / "manifest.json").unlink()
    with pytest.raises(StageError, match=r"manifest\.json is missing"):
        ckpt.load_state(state)


def test_failed_save_keeps_the_previous_state(tmp_path, monkeypatch):
    state = tmp_path / "state"
    ckpt.save_state(state, {"a": {"x": torch.ones(3)}}, {"step": 1})

    def boom(obj, f):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", boom)
    with pytest.raises(OSError):
        ckpt.save_state(state, {"a": {"x": torch.zeros(3)}}, {"step": 2})
    monkeypatch.undo()
    tensors, meta = ckpt.load_state(state)
    assert meta["step"] == 1 and torch.equal(tensors["a"]["x"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # no temporary leftovers
