"""Kill-and-resume: a run stopped after step k and resumed from its checkpoint ends with exactly
the metrics and parameters of the uninterrupted run. Corrupt or missing checkpoint files fail
with a StageError naming the file; a failed save leaves the previous state intact. The stage's
--resume: refuses changed params (naming them), recovers a save killed between its two renames,
fails loudly when there is nothing to resume, and killed writes' temporaries are swept."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

import _rl_tiny as R
import tiny_world as tw
from agentr1 import stages
from agentr1.config import config_from_dict
from agentr1.data.schema import Dataset, write_dataset
from agentr1.errors import StageError
from agentr1.io import atomic_dir
from agentr1.rl import checkpoint as ckpt
from agentr1.rl.sampling import Episodes
from agentr1.rl.stats import deterministic_metrics
from agentr1.rl.trainer import Trainer

torch.set_num_threads(1)

STEPS = 4


@pytest.fixture(scope="module")
def tok():
    return R.tiny_tokenizer()


def make(tok, state_dir, **kw):
    cfg = R.train_cfg(
        steps=STEPS, estimator="gae", lr=0.02, checkpoint={"every": 2}, dev={"every": 2, "examples": 4}, **kw
    )
    return Trainer(
        R.tiny_policy(tok),
        tok,
        cfg,
        R.rollout_cfg(),
        R.reward_cfg(),
        episodes=Episodes(R.ToyEnv(), R.QUESTIONS, R.QUESTIONS),
        state_dir=state_dir,
    )


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


# ----------------------------------------------------------------------------- the stage's --resume
def stage_cfg(tmp_path, **train):
    """A tiny world (real BM25 index, ToolEnv, a tiny cold start), as in test_train_stage."""
    processed, index, sft = tmp_path / "processed", tmp_path / "index", tmp_path / "sft"
    if not processed.exists():
        tw.train_inputs(tmp_path)
    base = {
        "steps": 2,
        "batch_questions": 2,
        "group_size": 2,
        "micro_batch_size": 2,
        "out_dir": str(tmp_path / "runs"),
        "dev": {"every": 2, "examples": 2},
        "checkpoint": {"every": 1},
    }
    for k, v in train.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return config_from_dict(
        {
            "data": {"processed_dir": str(processed)},
            "retrieval": {"index_dir": str(index)},
            "env": {"max_turns": 2, "search": {"topk": 2, "passage_max_chars": 120}},
            "rollout": {"max_turn_tokens": 6, "max_total_tokens": 1024, "batch_size": 8},
            "sft": {"out_dir": str(sft)},
            "tracking": {"enabled": False},
            "runs": tw.RUNS,
            "train": base,
        }
    )


@pytest.fixture
def stage(monkeypatch):
    """run(cfg, resume) -> (metrics, the steps actually trained in that call)."""
    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    orig = Trainer.train_step

    def run(cfg, resume=False, run_name="grpo"):
        trained = []

        def counted(self, step):
            trained.append(step)
            return orig(self, step)

        monkeypatch.setattr(Trainer, "train_step", counted)
        try:
            return stages.run("train", cfg, SimpleNamespace(run=run_name, resume=resume)), trained
        finally:
            monkeypatch.setattr(Trainer, "train_step", orig)

    return run


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_resume_refuses_changed_training_params(tmp_path, stage):
    stage(stage_cfg(tmp_path))
    changed = stage_cfg(tmp_path, lr=2e-4, group_size=4, kl={"coef": 0.01})
    with pytest.raises(StageError) as exc:
        stage(changed, resume=True)
    msg = str(exc.value)
    for line in ("train.lr: 0.0001 -> 0.0002", "train.group_size: 2 -> 4", "train.kl.coef: 0.001 -> 0.01"):
        assert line in msg, msg
    assert "without --resume" in msg and "train.steps:" not in msg and "train.dev" not in msg
    # env / reward / rollout settings that shape the episodes count too
    env_changed = stage_cfg(tmp_path)
    env_changed.env.max_turns = 3
    env_changed.reward.format_score = 0.1
    with pytest.raises(StageError, match=r"env\.max_turns: 2 -> 3(.|\n)*reward\.format_score: 0\.0 -> 0\.1"):
        stage(env_changed, resume=True)


def test_resume_allows_logging_keys_and_more_steps(tmp_path, stage):
    stage(stage_cfg(tmp_path))
    more = stage_cfg(
        tmp_path, steps=3, trace_every=0, checkpoint={"every": 3}, dev={"every": 3, "examples": 1}, num_threads=1
    )
    metrics, trained = stage(more, resume=True)
    assert trained == [3] and metrics["steps"] == 3
    # fewer steps than the state already has, or a cosine schedule (its lr depends on train.steps), are refused
    with pytest.raises(StageError, match=r"step 3.*train\.steps \(2\)"):
        stage(stage_cfg(tmp_path), resume=True)
    with pytest.raises(StageError, match=r"train\.lr_schedule: constant -> cosine"):
        stage(stage_cfg(tmp_path, steps=4, lr_schedule="cosine"), resume=True)


def test_resume_recovers_the_state_from_a_kill_mid_swap(tmp_path, stage):
    cfg = stage_cfg(tmp_path)
    straight, _ = stage(cfg)
    run_dir = tmp_path / "runs" / "grpo"
    pid = dead_pid()
    # save_state killed between its two renames: the state moved aside, the new one still a temp
    (run_dir / "state").rename(run_dir / f".state.old-{pid}")
    (run_dir / f".state.tmp-{pid}-abc123").mkdir()
    (run_dir / f".state.tmp-{pid}-abc123" / "policy.pt").write_bytes(b"half")
    metrics, trained = stage(cfg, resume=True)
    assert trained == []  # resumed at step 2 of 2: nothing left to train
    assert metrics["reward_last3"] == straight["reward_last3"]
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".state")) == []
    assert ckpt.load_state(run_dir / "state")[1]["step"] == 2


def test_backup_copy_is_used_only_when_it_verifies(tmp_path):
    state = tmp_path / "state"
    ckpt.save_state(state, {"a": {"x": torch.ones(3)}}, {"step": 1})
    old = tmp_path / f".state.old-{dead_pid()}"
    state.rename(old)
    data = bytearray((old / "a.pt").read_bytes())
    data[-1] ^= 0xFF
    (old / "a.pt").write_bytes(bytes(data))
    with pytest.raises(StageError, match=r"a\.pt is corrupt"):
        ckpt.prepare_resume(state)
    assert not state.exists() and old.exists()  # nothing moved, nothing deleted


def test_resume_with_nothing_to_resume_fails_loudly(tmp_path, stage, caplog):
    cfg = stage_cfg(tmp_path)
    with pytest.raises(StageError, match=r"nothing to resume(.|\n)*without --resume"):
        stage(cfg, resume=True)
    state = tmp_path / "runs" / "grpo" / "state"
    state.mkdir(parents=True)
    (state / "policy.pt").write_bytes(b"x")  # a state without its manifest
    with pytest.raises(StageError, match=r"manifest\.json is missing"):
        stage(cfg, resume=True)
    # without --resume an old state is discarded, and said so loudly
    stage(cfg)
    with caplog.at_level(logging.WARNING, logger="agentr1.stages.train"):
        stage(cfg)
    assert any(r.levelno == logging.WARNING and "discarding" in r.getMessage() for r in caplog.records)


def test_cli_resume_with_nothing_to_resume_exits_non_zero(tmp_path, monkeypatch, capsys):
    import yaml

    from agentr1 import cli

    cfg = stage_cfg(tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(cfg.model_dump(mode="json", by_alias=True)))
    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    rc = cli.main(["--params", str(params), "train", "--run", "grpo", "--resume"])
    assert rc != 0 and "nothing to resume" in capsys.readouterr().err


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    pid, live = dead_pid(), os.getppid()
    stale = [models / f".init.tmp-{pid}-x1", models / f".init.old-{pid}", models / ".init.tmp-legacy_1"]
    keep = [models / f".init.tmp-{os.getpid()}-x2", models / f".init.tmp-{live}-x3", models / ".sft.tmp-other_1"]
    for p in stale + keep:
        p.mkdir()
        (p / "model.safetensors").write_bytes(b"x")
    hour_ago = time.time() - 7200
    for p in (models / ".init.tmp-legacy_1", models / ".init.tmp-legacy_1" / "model.safetensors"):
        os.utime(p, (hour_ago, hour_ago))
    with atomic_dir(models / "init") as tmp:
        (tmp / "config.json").write_text("{}")
    assert (models / "init" / "config.json").is_file()
    assert [p.name for p in stale if p.exists()] == []
    assert [p.name for p in keep if not p.exists()] == []  # this process's, a live process's, a fresh legacy one
    # the state's own temporaries go the same way when it is saved
    run = tmp_path / "run"
    run.mkdir()
    (run / f".state.tmp-{pid}-y").mkdir()
    (run / f".curve.csv.tmp-{pid}-z").write_text("half")
    ckpt.save_state(run / "state", {"a": {"x": torch.ones(1)}}, {"step": 1})
    assert sorted(p.name for p in run.iterdir()) == [f".curve.csv.tmp-{pid}-z", "state"]


def test_train_stage_sweeps_stale_temporaries_of_its_run(tmp_path, stage):
    cfg = stage_cfg(tmp_path, steps=1)
    run_dir = tmp_path / "runs" / "grpo"
    run_dir.mkdir(parents=True)
    pid = dead_pid()
    for name in (f".checkpoint.tmp-{pid}-a", f".state.tmp-{pid}-b", f".metrics.json.tmp-{pid}-c"):
        (run_dir / name).mkdir()
    stage(cfg)
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == []


# ------------------------------------------------------------------ --resume and the files the run reads
def test_resume_refuses_an_index_or_dataset_changed_since_the_save(tmp_path, stage):
    from agentr1.config import BM25Config
    from agentr1.io import tree_digest
    from agentr1.retrieval.bm25 import BM25Retriever

    cfg = stage_cfg(tmp_path)
    straight, _ = stage(cfg)
    index, processed = tmp_path / "index", tmp_path / "processed"
    built = tree_digest(index)
    # params.yaml's retrieval.bm25 edited and the index rebuilt with it between the kill and the resume
    rebuilt = stage_cfg(tmp_path)
    rebuilt.retrieval.bm25 = BM25Config(k1=0.5, b=0.3)
    BM25Retriever.build(tw.corpus(), rebuilt.retrieval.bm25).save(index)
    with pytest.raises(StageError) as exc:
        stage(rebuilt, resume=True)
    msg = str(exc.value)
    assert (
        f"the retrieval index: saved {index} (sha256 {built[:16]}), now {index} (sha256 {tree_digest(index)[:16]})"
        in msg
    )
    assert "processed dataset" not in msg and "rerun `agentr1 index`" in msg and "without --resume" in msg
    # the fix it names: the original index again, and the resume goes on
    tw.retriever().save(index)
    assert tree_digest(index) == built
    metrics, trained = stage(cfg, resume=True)
    assert trained == [] and metrics["reward_last3"] == straight["reward_last3"]
    # the dataset counts too (a corpus passage edited)
    corpus = tw.corpus()
    corpus[0] = {**corpus[0], "text": corpus[0]["text"] + " Edited."}
    write_dataset(
        Dataset(questions={"train": tw.questions("train"), "dev": tw.questions("dev")[:2]}, corpus=corpus), processed
    )
    with pytest.raises(StageError, match=rf"the processed dataset: saved {processed} \(sha256 [0-9a-f]{{16}}\), now"):
        stage(cfg, resume=True)


def test_a_state_saved_without_input_digests_resumes_with_a_warning(tmp_path, stage, caplog):
    cfg = stage_cfg(tmp_path)
    stage(cfg)
    state = tmp_path / "runs" / "grpo" / "state"
    tensors, meta = ckpt.load_state(state)
    assert {"inputs.index", "inputs.dataset"} <= set(meta["params"])
    meta["params"] = {k: v for k, v in meta["params"].items() if not k.startswith("inputs.")}  # an older version's
    ckpt.save_state(state, tensors, meta)
    with caplog.at_level(logging.WARNING, logger="agentr1.rl.state"):
        _, trained = stage(cfg, resume=True)
    assert trained == []
    assert any(
        "without the digests of the retrieval index and the processed dataset" in r.getMessage() for r in caplog.records
    )
