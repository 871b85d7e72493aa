"""One-hop reading drills and the sft stage's pretraining texts on a small synthetic world."""

from __future__ import annotations

import pytest

from agentr1.config import EnvConfig, config_from_dict
from agentr1.data.drills import ONE_HOP, one_hop_questions, regenerate
from agentr1.data.synthetic import generate, to_dataset
from agentr1.env import ToolEnv
from agentr1.errors import StageError
from agentr1.retrieval.bm25 import BM25Retriever
from agentr1.config import BM25Config
from agentr1.stages.sft import pretrain_texts
from agentr1.rollout.oracle import corpus_titles, unique_questions

SMALL = {"families": {"train": 12, "dev": 3, "test": 3, "ood": 4},
         "questions": {"train": 40, "dev": 10, "test": 10, "ood": 10}}


@pytest.fixture(scope="module")
def small():
    cfg = config_from_dict({"data": {"synthetic": SMALL}, "env": {"search": {"topk": 1}},
                            "sft": {"pretrain": {"steps": 1}}})
    world, questions = generate(cfg.data.synthetic, cfg.seed)
    ds = to_dataset(world, questions, cfg.data.synthetic, cfg.seed)
    env = ToolEnv.from_config(EnvConfig(search={"topk": 1}), BM25Retriever.build(ds.corpus, BM25Config()))
    return cfg, world, ds, env


def test_one_drill_per_train_entity_and_stated_fact(small):
    _, world, ds, _ = small
    drills = one_hop_questions(world, "train")
    train = {e.pid for e in world.entities if e.split == "train"}
    assert drills and all(d["supporting_ids"][0] in train for d in drills)  # no dev/test/ood entity
    assert len({d["id"] for d in drills}) == len(drills)
    by_pid = {p["id"]: p for p in ds.corpus}
    for d in drills:
        passage = by_pid[d["supporting_ids"][0]]
        assert passage["title"] in d["question"]
        assert d["answers"][0] in passage["text"]  # the fact is read off the entity's own passage
    kinds = {e.kind for e in world.entities if e.split == "train" and e.kind in ONE_HOP}
    assert kinds == {"person", "city", "film", "company"}
    father = next(d for d in drills if d["id"].endswith("-father"))
    assert father["question"].startswith("Who is the father of ")


def test_regenerate_refuses_a_dataset_from_other_params(small):
    cfg, world, ds, _ = small
    assert [e.pid for e in regenerate(cfg.data.synthetic, cfg.seed, ds.corpus).entities] == [e.pid for e in world.entities]
    with pytest.raises(ValueError, match="agentr1 prepare"):
        regenerate(cfg.data.synthetic, cfg.seed + 1, ds.corpus)


def test_pretraining_texts_are_transcripts_without_the_system_prompt(small):
    cfg, world, ds, env = small
    titles = corpus_titles(ds.corpus)
    texts, links = pretrain_texts(ds, env, cfg, titles)
    n_train, n_drills = len(unique_questions(ds.split("train"))), len(one_hop_questions(world, "train"))
    assert links is None and len(texts) == n_train + n_drills
    assert not any(env.system_prompt() in t for t in texts)
    assert all(t.startswith("Question: ") and "<answer>" in t and "<information>" in t for t in texts)
    drill = texts[n_train]  # the first drill: one search of its entity, its passage, the fact
    d = one_hop_questions(world, "train")[0]
    assert drill.count("<search>") == 1 and f"<answer> {d['answers'][0]}</answer>" in drill
    no_drills = cfg.model_copy(deep=True)
    no_drills.sft.pretrain.drills = False
    assert len(pretrain_texts(ds, env, no_drills, titles)[0]) == n_train
    mixed = cfg.model_copy(deep=True)
    mixed.sft.pretrain.texts = "mix"
    assert len(pretrain_texts(ds, env, mixed, titles)[0]) == len(ds.corpus) + n_train + n_drills


def test_drills_on_a_dataset_from_other_params_fail_the_stage(small):
    cfg, _, ds, env = small
    other = cfg.model_copy(deep=True)
    other.seed = cfg.seed + 1
    with pytest.raises(StageError, match="agentr1 prepare"):
        pretrain_texts(ds, env, other, corpus_titles(ds.corpus))


def test_chains_need_corpus_texts():
    with pytest.raises(ValueError, match="chain 4 links corpus passages"):
        config_from_dict({"sft": {"pretrain": {"chain": 4, "texts": "episodes"}}})
    assert config_from_dict({"sft": {"pretrain": {"chain": 4, "texts": "corpus"}}}).sft.pretrain.chain == 4
