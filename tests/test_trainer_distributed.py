"""Two gloo ranks (torch.multiprocessing, DDP) vs one process on the same global batch.

* update: the same fixed trajectories (rolled out once, saved) -> one trainer step (2 mini-batches,
  gradient accumulation) -> the parameters equal the single-process ones within fp32 tolerance,
  and so do the logged losses. (The tolerance is absolute 1e-5 on a 2e-2 move: Adam divides
  each gradient entry by its own magnitude, so for entries whose gradient is ~0 the summation-order
  noise of splitting the batch over ranks is amplified; measured max difference 1.9e-6.)
* the whole loop: ``train()`` for 1 step on 2 ranks (each rolls out its share of the questions,
  the trajectories are all-gathered) keeps both ranks' parameters and metrics identical.
"""

from __future__ import annotations

import os
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp

import _rl_tiny as R
from agentr1.env.rewards import score_episode
from agentr1.models import load_checkpoint, save_checkpoint
from agentr1.rl.distributed import init_distributed, shutdown, unwrap
from agentr1.rl.sampling import Episodes
from agentr1.rl.stats import deterministic_metrics
from agentr1.rl.trainer import Trainer
from agentr1.rollout import load_trajectories, save_trajectories

WORLD = 2
SPAWN_TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _trainer(ckpt_dir, dist=None, **kw):
    model, tok = load_checkpoint(ckpt_dir)
    cfg = R.train_cfg(estimator="gae", lr=0.01, micro_batch_size=2, **kw)
    return Trainer(
        model, tok, cfg, R.rollout_cfg(), R.reward_cfg(), episodes=Episodes(R.ToyEnv(), R.QUESTIONS), dist=dist
    )


def _update_once(tr, trajs):
    scores = [score_episode(t, tr.reward_cfg) for t in trajs]
    batch = tr.prepare(trajs, scores)
    return tr.update(batch, step=1)


def _worker(rank, port, ckpt_dir, traj_path, out_dir):
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD)
    )
    torch.set_num_threads(1)
    ctx = init_distributed()
    try:
        tr = _trainer(ckpt_dir, ctx)
        metrics = _update_once(tr, load_trajectories(traj_path))
        torch.save(
            {"policy": R.params_of(tr.policy), "critic": R.params_of(unwrap(tr.critic)), "metrics": metrics},
            f"{out_dir}/update_rank{rank}.pt",
        )
        loop = _trainer(ckpt_dir, ctx, steps=1)
        hist = loop.train()
        torch.save(
            {"policy": R.params_of(loop.policy), "history": deterministic_metrics(hist)},
            f"{out_dir}/loop_rank{rank}.pt",
        )
    finally:
        shutdown(ctx)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("dist")
    tok = R.tiny_tokenizer()
    save_checkpoint(R.tiny_policy(tok), tok, d / "policy")
    tr = _trainer(d / "policy")
    trajs = tr.collect(1)
    save_trajectories(trajs, d / "trajs.jsonl")
    procs = mp.spawn(
        _worker, args=(_free_port(), str(d / "policy"), str(d / "trajs.jsonl"), str(d)), nprocs=WORLD, join=False
    )
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    while not procs.join(timeout=5):  # raises if a rank failed
        if time.monotonic() > deadline:
            for p in procs.processes:
                p.kill()
            pytest.fail(f"the {WORLD} ranks did not finish within {SPAWN_TIMEOUT_S} s")
    return d


def test_two_rank_update_equals_single_process(setup):
    single = _trainer(setup / "policy")
    m1 = _update_once(single, load_trajectories(setup / "trajs.jsonl"))
    start = R.params_of(load_checkpoint(setup / "policy")[0])
    moved = 0.0
    for rank in range(WORLD):
        got = torch.load(setup / f"update_rank{rank}.pt", weights_only=True)
        for k, v in single.policy.state_dict().items():
            torch.testing.assert_close(got["policy"][k], v, rtol=1e-4, atol=1e-5, msg=k)
            moved = max(moved, float((v - start[k]).abs().max()))
        for k, v in single.critic.state_dict().items():
            torch.testing.assert_close(got["critic"][k], v, rtol=1e-4, atol=1e-5, msg=k)
        for k in ("train/pg_loss", "train/vf_loss", "train/entropy", "train/kl_loss", "train/grad_norm"):
            assert got["metrics"][k] == pytest.approx(m1[k], rel=1e-4, abs=1e-6), k
    assert moved > 1e-3  # the step really changed the weights (two Adam steps of lr 0.01)


def test_two_rank_training_loop_keeps_ranks_in_sync(setup):
    r0 = torch.load(setup / "loop_rank0.pt", weights_only=True)
    r1 = torch.load(setup / "loop_rank1.pt", weights_only=True)
    assert r0["history"] == r1["history"] and len(r0["history"]) == 1
    for k, v in r0["policy"].items():
        assert torch.equal(v, r1["policy"][k]), k
