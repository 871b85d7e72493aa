"""Stage ``train@<run>`` on a tiny world (real BM25 index, ToolEnv, a tiny "cold start"
checkpoint): outputs, --resume, and nothing written when training fails."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest
import torch

import tiny_world as tw
from agentr1 import stages
from agentr1.config import config_from_dict
from agentr1.errors import StageError
from agentr1.models import load_checkpoint
from agentr1.rl.trainer import Trainer

torch.set_num_threads(1)


def _cfg(tmp_path, **train):
    processed, index, _ = tw.train_inputs(tmp_path)
    return config_from_dict(
        {
            "data": {"processed_dir": str(processed)},
            "retrieval": {"index_dir": str(index)},
            "env": {"max_turns": 2, "search": {"topk": 2, "passage_max_chars": 120}},
            "rollout": {"max_turn_tokens": 6, "max_total_tokens": 1024, "batch_size": 8},
            "sft": {"out_dir": str(tmp_path / "sft")},
            "tracking": {"enabled": False},
            "runs": tw.RUNS,
            "train": {
                "steps": 2,
                "batch_questions": 2,
                "group_size": 2,
                "micro_batch_size": 2,
                "out_dir": str(tmp_path / "runs"),
                "dev": {"every": 2, "examples": 2},
                "checkpoint": {"every": 1},
                **train,
            },
        }
    )


@pytest.fixture(autouse=True)
def validated(monkeypatch):
    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)


def test_train_stage_writes_checkpoint_curve_and_metrics(tmp_path):
    cfg = _cfg(tmp_path)
    metrics = stages.run("train", cfg, SimpleNamespace(run="ppo", resume=False))
    out = tmp_path / "runs" / "ppo"
    model, _ = load_checkpoint(out / "checkpoint")
    assert sum(p.numel() for p in model.parameters()) > 0
    written = json.loads((out / "metrics.json").read_text())
    assert written == json.loads(json.dumps(metrics))
    assert written["estimator"] == "gae" and written["steps"] == 2 and written["run"] == "ppo"
    assert written["dev_em_start"] is not None and "time_s" not in written
    times = json.loads((out / "timing.json").read_text())  # wall times live apart from every DVC output
    assert times["total"] > 0 and times["per_step"] > 0 and len(times["steps"]["step_s"]) == 2
    rows = list(csv.DictReader((out / "curve.csv").open()))
    assert [int(r["step"]) for r in rows] == [0, 1, 2] and not any(k.endswith("_s") for k in rows[0])
    assert rows[0]["reward"] == "" and rows[0]["dev_em"] != "" and rows[2]["dev_em"] != ""
    assert (out / "state" / "manifest.json").is_file()


def test_train_stage_resume_continues_the_state(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    straight = stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))
    curve = (tmp_path / "runs" / "grpo" / "curve.csv").read_text()

    orig = Trainer.train_step

    def killed(self, step):
        if step == 2:
            raise KeyboardInterrupt("killed")
        return orig(self, step)

    monkeypatch.setattr(Trainer, "train_step", killed)
    with pytest.raises(KeyboardInterrupt):
        stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))
    monkeypatch.setattr(Trainer, "train_step", orig)
    resumed = stages.run("train", cfg, SimpleNamespace(run="grpo", resume=True))
    assert resumed["reward_last3"] == straight["reward_last3"] and resumed["dev_em_final"] == straight["dev_em_final"]
    strip = lambda text: [r[:14] for r in csv.reader(text.splitlines())]  # noqa: E731 - drop time columns
    assert strip((tmp_path / "runs" / "grpo" / "curve.csv").read_text()) == strip(curve)


def test_failed_training_writes_no_output(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)

    def boom(self, until=None):
        raise RuntimeError("diverged")

    monkeypatch.setattr(Trainer, "train", boom)
    with pytest.raises(RuntimeError, match="diverged"):
        stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))
    out = tmp_path / "runs" / "grpo"
    assert not (out / "checkpoint").exists() and not (out / "metrics.json").exists()


def test_missing_cold_start_is_a_stage_error(tmp_path):
    cfg = _cfg(tmp_path)
    cfg.sft.out_dir = str(tmp_path / "nothing")
    with pytest.raises(StageError, match="agentr1 sft"):
        stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))


# --- issue 48 items 1-3: a run that could never finish is refused at its start, and a refusal keeps the state


class _Killed(Exception):
    """A kill at a step (an Exception, so that a run that goes on by mistake fails only its test)."""


def _state_files(run_dir):
    return {
        p.relative_to(run_dir).as_posix(): p.read_bytes() for p in sorted((run_dir / "state").rglob("*")) if p.is_file()
    }


def test_a_fresh_world_that_cannot_be_generated_is_refused_before_step_1(tmp_path, monkeypatch):
    # world 10 of seed 0 cannot supply 120 questions from 3 clusters (worlds 0-9 can): the old trainer
    # met it at step 11, after 10 steps of work, and --resume met it again; now nothing trains
    cfg = _cfg(tmp_path, steps=12, questions="fresh", fresh={"families": 3, "questions": 120, "every": 1})
    trained = []

    def step_(self, step):
        trained.append(step)
        raise AssertionError("the run reached training before the refusal")

    monkeypatch.setattr(Trainer, "train_step", step_)
    with pytest.raises(
        StageError,
        match=r"train\.fresh: world 10 .*step 11.*train\.fresh\.families=3.*"
        r"train\.fresh\.questions=120",
    ) as err:
        stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))
    assert "Nothing was trained" in str(err.value) and trained == []
    assert not (tmp_path / "runs" / "grpo" / "state").exists()
    cfg.train.steps = 10  # worlds 0-9 only: accepted
    monkeypatch.setattr(Trainer, "train", lambda self, until=None: [])
    monkeypatch.setattr("agentr1.stages.train.save_checkpoint", lambda *a, **k: None)
    stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))


@pytest.mark.parametrize(
    "bad",
    [
        {"old_logprobs": "rollout", "loss_mask": False},  # the train section's check (config/train.py)
        {"questions": "fresh", "fresh": {"families": 3, "questions": 120, "every": 1}, "steps": 12},  # world 10
    ],
)
def test_a_refused_config_keeps_the_state_of_an_interrupted_run(tmp_path, monkeypatch, bad):
    cfg = _cfg(tmp_path, steps=4)
    orig = Trainer.train_step

    def killed(self, step):
        if step == 3:
            raise _Killed(step)
        return orig(self, step)

    monkeypatch.setattr(Trainer, "train_step", killed)
    with pytest.raises(_Killed):
        stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))
    run_dir = tmp_path / "runs" / "grpo"
    before = _state_files(run_dir)
    assert before and json.loads((run_dir / "state" / "manifest.json").read_text())
    broken = cfg.model_copy(update={"runs": {**cfg.runs, "grpo": {**cfg.runs["grpo"], **bad}}})
    with pytest.raises((StageError, ValueError)):  # ValueError: the run's train section refuses itself
        stages.run("train", broken, SimpleNamespace(run="grpo", resume=False))
    assert _state_files(run_dir) == before  # the refusal deleted nothing: fix the config and --resume
    monkeypatch.setattr(Trainer, "train_step", orig)
    resumed = stages.run("train", cfg, SimpleNamespace(run="grpo", resume=True))
    assert resumed["steps"] == 4


def test_a_huge_fresh_world_names_its_own_param():
    from agentr1.config import SyntheticConfig
    from agentr1.data.fresh import make_world

    with pytest.raises(ValueError) as err:
        make_world(SyntheticConfig(), 0, 100_000, 96, 0, param="train.fresh")
    msg = str(err.value)
    assert msg.startswith("train.fresh.families=100000: one fresh world") and "lower train.fresh.families" in msg
    assert "pretrain" not in msg and "summed over all splits" not in msg
