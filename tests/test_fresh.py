"""Fresh worlds (``train.questions: fresh``): questions over entities no dataset split holds,
generated like the train split's, answerable through their own passages, the same for the same
(seed, index), and served to the trainer one world per ``train.fresh.every`` steps."""

from __future__ import annotations

import re
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

import tiny_world as tw
from agentr1 import stages
from agentr1.config import BM25Config, EnvConfig, FreshWorldsConfig, RetrievalConfig, SyntheticConfig, TrainConfig
from agentr1.data.fresh import SPLIT, make_world
from agentr1.data.synthetic import generate, to_dataset, type_counts
from agentr1.errors import StageError
from agentr1.rl.sources import FreshWorlds

torch.set_num_threads(1)

SMALL = SyntheticConfig.model_validate(
    {
        "families": {"train": 30, "dev": 6, "test": 6, "ood": 6},
        "questions": {"train": 150, "dev": 30, "test": 30, "ood": 30},
    }
)


@pytest.fixture(scope="module")
def dataset():
    return to_dataset(*generate(SMALL, 7), SMALL, 7)


@pytest.fixture(scope="module")
def world(dataset):
    return make_world(SMALL, 3, 12, 40, 7, {p["title"] for p in dataset.corpus})


def _mentions(name: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def test_same_arguments_same_world_other_index_differs(world, dataset):
    taken = {p["title"] for p in dataset.corpus}
    assert make_world(SMALL, 3, 12, 40, 7, taken) == world
    other = make_world(SMALL, 4, 12, 40, 7, taken)
    assert {p["title"] for p in other.corpus} != {p["title"] for p in world.corpus}
    assert make_world(SMALL, 3, 12, 40, 8, taken) != world  # the run's seed matters too


def test_entities_are_new_and_ids_never_collide(world, dataset):
    assert not {p["title"] for p in world.corpus} & {p["title"] for p in dataset.corpus}
    assert not {p["id"] for p in world.corpus} & {p["id"] for p in dataset.corpus}
    assert all(p["id"].startswith("fresh3-") for p in world.corpus)
    assert len({q["id"] for q in world.questions}) == len(world.questions)
    assert {q["split"] for q in world.questions} == {SPLIT}


def test_questions_follow_the_train_mix(world):
    want = {("chain" if k == "train_chain" else k): n for k, n in type_counts(SMALL, "train", 40).items() if n}
    assert Counter(q["type"] for q in world.questions) == want
    assert len({q["question"] for q in world.questions}) == len(world.questions)


def test_every_question_is_answered_by_its_own_passages(world):
    passages = {p["id"]: p for p in world.corpus}
    for q in world.questions:
        sup = [passages[pid] for pid in q["supporting_ids"]]  # KeyError = a passage the world lacks
        if q["type"] == "comparison":
            assert all(_mentions(p["title"], q["question"]) for p in sup)
            continue
        for prev, nxt in zip(sup, sup[1:]):
            assert _mentions(nxt["title"], prev["text"])
        assert _mentions(q["answers"][0], sup[-1]["text"])


def test_too_small_a_world_names_the_params():
    with pytest.raises(ValueError, match=r"train\.fresh\.families=2 .* train\.fresh\.questions=400"):
        make_world(SMALL, 0, 2, 400, 0)
    with pytest.raises(ValueError, match=r"sft\.fresh\.families=2 .* sft\.fresh\.questions=400"):
        make_world(SMALL, 0, 2, 400, 0, param="sft.fresh")


def test_too_large_a_world_names_its_own_param_not_pretrainings():
    """Issue 48 item 3: more clusters than the name inventory holds blamed pretrain.world_families."""
    with pytest.raises(ValueError, match=r"lower train\.fresh\.families") as exc:
        make_world(SMALL, 0, 5000, 96, 0)
    assert "pretrain" not in str(exc.value)


def test_config_refuses_a_world_smaller_than_a_step():
    with pytest.raises(ValueError, match=r"train\.fresh\.questions \(4\) < train\.batch_questions \(8\)"):
        TrainConfig.model_validate({"questions": "fresh", "batch_questions": 8, "fresh": {"questions": 4}})


def _source(dataset, **fresh) -> FreshWorlds:
    cfg = FreshWorldsConfig.model_validate({"families": 12, "questions": 40, "every": 3, **fresh})
    return FreshWorlds(SMALL, cfg, RetrievalConfig(bm25=BM25Config()), EnvConfig(max_turns=3), dataset.corpus, seed=7)


@pytest.mark.parametrize("with_corpus", [True, False])
def test_source_serves_one_world_per_every_steps_and_searches_it(dataset, with_corpus):
    src = _source(dataset, with_corpus=with_corpus)
    env1, q1 = src.at(1)
    assert src.at(3) == (env1, q1)  # steps 1..3: world 0, built once
    env4, q4 = src.at(4)
    assert env4 is not env1 and q4 != q1
    assert q1 == make_world(SMALL, 0, 12, 40, 7, {p["title"] for p in dataset.corpus}).questions
    q = next(q for q in q1 if q["type"] != "comparison")
    first = next(p for p in make_world(SMALL, 0, 12, 40, 7, src.taken).corpus if p["id"] == q["supporting_ids"][0])
    res = env1.step(f"<search>{first['title']}</search>", 0, q["supporting_ids"])
    assert res.outcomes[0].found_support and first["title"] in res.observation
    hits = env1.tools["search"].retriever.search([dataset.corpus[0]["title"]], 1)[0]
    assert bool(hits and hits[0].id == dataset.corpus[0]["id"]) is with_corpus


def _stage_cfg(tmp_path, train: dict, data: dict):
    import shutil

    cfg = tw.stage_config(
        tmp_path,
        {"train": tw.questions("train"), "dev": tw.questions("dev")[:2]},
        env={"max_turns": 2, "search": {"topk": 1, "passage_max_chars": 120}},
        rollout={"max_turn_tokens": 6, "max_total_tokens": 1024, "batch_size": 8},
        train={
            "steps": 2,
            "batch_questions": 2,
            "group_size": 2,
            "micro_batch_size": 2,
            "out_dir": str(tmp_path / "runs"),
            "dev": {"every": 0},
            "checkpoint": {"every": 0},
            "questions": "fresh",
            **train,
        },
        data={"processed_dir": str(tmp_path / "processed"), **data},
    )
    shutil.copytree(cfg.pretrain.out_dir, cfg.sft.out_dir)  # the untrained tiny policy as the cold start
    return cfg


def test_train_stage_trains_on_fresh_worlds_only(tmp_path, monkeypatch):
    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    seen: list[tuple[int, str]] = []  # (refill round, question id)
    from agentr1.rl.trainer import Trainer

    real = Trainer.sample_questions

    def spy(self, step, round_=0):
        out = real(self, step, round_)
        seen.extend((round_, q["id"]) for q in out)
        return out

    monkeypatch.setattr(Trainer, "sample_questions", spy)
    cfg = _stage_cfg(tmp_path, {"fresh": {"families": 4, "questions": 8, "every": 1}}, {})
    metrics = stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))
    assert metrics["steps"] == 2
    assert len([q for r, q in seen if r == 0]) == 4  # 2 questions per step; dynamic sampling may refill
    assert {q.split("-")[0] for _, q in seen} == {"fresh0", "fresh1"}  # refills too: this step's world only


def test_fresh_questions_need_the_synthetic_world(tmp_path, monkeypatch):
    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    real = {"source": "real", "real": {"sources": [{"dataset": "hotpotqa", "path": "unused.json"}]}}
    cfg = _stage_cfg(tmp_path, {}, real)
    with pytest.raises(StageError, match="train.questions: fresh .* data.source is 'real'"):
        stages.run("train", cfg, SimpleNamespace(run="grpo", resume=False))


def _sft_cfg(tmp_path, **sft):
    return tw.stage_config(
        tmp_path,
        {"train": tw.questions("train"), "dev": tw.questions("dev")[:4]},
        rollout={"max_turn_tokens": 24, "max_total_tokens": 1024, "batch_size": 4},
        tracking={"enabled": False},
        sft={"steps": 2, "batch_size": 4, "warmup_steps": 1, "train_examples": 3, **sft},
    )


def test_sft_demonstrates_on_fresh_worlds_besides_the_train_split(tmp_path, monkeypatch):
    from agentr1.stages import sft as sft_stage

    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    cfg = _sft_cfg(tmp_path, fresh={"worlds": 2, "families": 4, "questions": 6})
    captured = {}
    real = sft_stage.train_sft

    def spy(model, trajectories, *args, **kwargs):
        captured["trajs"] = list(trajectories)
        return real(model, trajectories, *args, **kwargs)

    monkeypatch.setattr(sft_stage, "train_sft", spy)
    metrics = stages.run("sft", cfg, None)
    assert metrics["train"]["examples"] == 3 + 12 and metrics["train"]["fresh_examples"] == 12
    ids = [t.qid for t in captured["trajs"]]
    assert ids[:3] == [q["id"] for q in tw.questions("train")[:3]]
    assert {i.split("-")[0] for i in ids[3:]} == {"fresh0", "fresh1"}
    taken = {p["title"] for p in tw.corpus()}
    world0 = make_world(cfg.data.synthetic, 0, 4, 6, f"{cfg.seed}/sft", taken)
    assert ids[3:9] == [q["id"] for q in world0.questions]
    assert world0.questions != make_world(cfg.data.synthetic, 0, 4, 6, cfg.seed, taken).questions  # not RL's stream
    first = next(t for t in captured["trajs"][3:] if t.outcomes and t.outcomes[0])
    assert first.outcomes[0][0].found_support  # the oracle's searches find the world's own passages


def test_sft_on_fresh_worlds_only_and_nothing_to_demonstrate(tmp_path, monkeypatch):
    from agentr1.config import SFTConfig

    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    metrics = stages.run(
        "sft", _sft_cfg(tmp_path, train_examples=0, fresh={"worlds": 1, "families": 4, "questions": 5}), None
    )
    assert metrics["train"]["examples"] == metrics["train"]["fresh_examples"] == 5
    with pytest.raises(ValueError, match="no demonstration to train on"):
        SFTConfig.model_validate({"train_examples": 0})


def test_reference_cold_start_stage_run_and_evaluation(tmp_path, monkeypatch):
    """sft_reference trains the same SFT with params sft_reference (its own folders), a run with
    cold_start: reference trains from it, and --policy cold_start_reference evaluates it."""
    from agentr1.config import ConfigError
    from agentr1.eval.policies import resolve_policy
    from agentr1.models import load_checkpoint

    monkeypatch.setattr("agentr1.data.validation.require_validated", lambda cfg: None)
    ref = {
        "oracle_noise": 0.0,
        "out_dir": str(tmp_path / "models" / "sft_ref"),
        "report_dir": str(tmp_path / "sft_ref"),
    }
    cfg = tw.stage_config(
        tmp_path,
        {"train": tw.questions("train"), "dev": tw.questions("dev")[:4]},
        rollout={"max_turn_tokens": 24, "max_total_tokens": 1024, "batch_size": 4},
        tracking={"enabled": False},
        sft_reference=ref,
        runs={**tw.RUNS, "grpo_reference": {"estimator": "grpo", "cold_start": "reference"}},
        sft={
            "steps": 2,
            "batch_size": 4,
            "warmup_steps": 1,
            "train_examples": 4,
            "oracle_noise": {"early_answer": 1.0},
        },
        train={
            "steps": 1,
            "batch_questions": 2,
            "group_size": 2,
            "micro_batch_size": 2,
            "out_dir": str(tmp_path / "runs"),
            "dev": {"every": 0},
            "checkpoint": {"every": 0},
            "questions": "dataset",
        },
    )
    main = stages.run("sft", cfg, None)
    reference = stages.run("sft_reference", cfg, None)
    assert main["oracle"]["kinds"] == {"clean": 2, "early_answer": 2}  # the 2 two-hop questions answer early
    assert reference["oracle"]["kinds"] == {"clean": 4} and reference["oracle"]["em"] == 1.0
    assert (tmp_path / "sft_ref" / "metrics.json").is_file() and load_checkpoint(ref["out_dir"])[0] is not None
    assert resolve_policy(cfg, "cold_start_reference").checkpoint == tmp_path / "models" / "sft_ref"
    from agentr1.stages import train as train_stage

    seen, load = [], train_stage.load_checkpoint
    monkeypatch.setattr(
        train_stage, "load_checkpoint", lambda path, *a, **k: (seen.append(str(path)), load(path, *a, **k))[1]
    )
    stages.run("train", cfg, SimpleNamespace(run="grpo_reference", resume=False))
    assert seen == [ref["out_dir"]]
    from agentr1.config import config_from_dict

    with pytest.raises(ConfigError, match="sft_reference.out_dir is sft.out_dir"):
        config_from_dict(
            {
                **cfg.model_dump(by_alias=True),
                "sft_reference": {"out_dir": cfg.sft.out_dir, "report_dir": ref["report_dir"]},
            }
        )
