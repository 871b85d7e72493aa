"""The synthetic world: determinism, split hygiene, answerability through the supporting chain."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from agentr1.config import SPLITS, SyntheticConfig
from agentr1.data.names import CITY_KINDS, COMPANY_KINDS, COUNTRY_PREFIXES, FILM_NOUNS, INVENTORY
from agentr1.data.questions import PATH_TEMPLATES
from agentr1.data.synthetic import allocate, generate, generate_world, to_dataset, type_counts
from agentr1.data.world import fresh_world

SMALL = {
    "families": {"train": 30, "dev": 6, "test": 6, "ood": 6},
    "questions": {"train": 150, "dev": 30, "test": 30, "ood": 30},
}
NON_COMPARISON = ("bridge", "compositional", "inference", "chain")


def small_cfg(**changes) -> SyntheticConfig:
    return SyntheticConfig.model_validate({**SMALL, **changes})


@pytest.fixture(scope="module")
def cfg() -> SyntheticConfig:
    return small_cfg()


@pytest.fixture(scope="module")
def generated(cfg):
    return generate(cfg, 7)


@pytest.fixture(scope="module")
def ds(cfg, generated):
    return to_dataset(*generated, cfg, 7)


@pytest.fixture(scope="module")
def passages(ds):
    return {p["id"]: p for p in ds.corpus}


def _mentions(name: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


# ------------------------------------------------------------------------------ determinism
def test_same_seed_same_rows_other_seed_differs(cfg, ds):
    again = generate_world(cfg, 7)
    assert again.questions == ds.questions and again.corpus == ds.corpus
    other = generate_world(cfg, 8)
    assert other.questions["train"] != ds.questions["train"]
    assert [p["title"] for p in other.corpus] != [p["title"] for p in ds.corpus]


def test_independent_of_hash_seed(cfg, ds):
    code = (
        "import json,sys; from agentr1.config import SyntheticConfig;"
        "from agentr1.data.synthetic import generate_world;"
        "d = generate_world(SyntheticConfig.model_validate(json.loads(sys.argv[1])), 7);"
        "print(json.dumps([d.questions, d.corpus], sort_keys=True))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(SMALL)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout
    assert json.loads(out) == json.loads(json.dumps([ds.questions, ds.corpus], sort_keys=True))


# ------------------------------------------------------------------------------------ counts
def test_allocate_sums_and_follows_weights():
    assert allocate(10, [0.3, 0.25, 0.25, 0.2]) == [3, 3, 2, 2]
    assert allocate(4000, [0.3, 0.25, 0.25, 0.2]) == [1200, 1000, 1000, 800]
    for total in range(0, 40):
        assert sum(allocate(total, [0.5, 0.3, 0.2])) == total


def test_counts_types_and_hops(cfg, ds):
    for split in SPLITS:
        rows = ds.questions[split]
        assert len(rows) == getattr(cfg.questions, split)
        assert all(r["split"] == split and r["source"] == "synthetic" for r in rows)
        assert [r["id"] for r in rows] == [f"syn-{split}-{i:05d}" for i in range(len(rows))]
        types = Counter(r["type"] for r in rows)
        if split == "ood":
            assert set(types) == {"chain"}
            hops = Counter(r["hops"] for r in rows)
            assert set(hops) == {3, 4} and abs(hops[3] - hops[4]) <= 1
        else:
            expected = {t: n for t, n in type_counts(cfg, split).items() if n}
            if "train_chain" in expected:  # the train split's own 3-hop chains carry type chain
                expected["chain"] = expected.pop("train_chain")
            assert types == expected
            assert all(r["hops"] == (3 if r["type"] == "chain" else 2) for r in rows)
            comparisons = [r for r in rows if r["type"] == "comparison"]
            yes_no = [r for r in comparisons if r["answers"] in (["yes"], ["no"])]
            assert len(yes_no) == round(len(comparisons) * cfg.yes_no_fraction)
        assert all(r["hops"] == len(r["supporting_ids"]) for r in rows)


def test_train_chains_are_three_hops_of_templates_ood_never_asks(cfg, generated):
    from agentr1.data.questions import TRAIN_CHAIN_TEMPLATES

    _, questions = generated
    chains = [q for q in questions["train"] if q.type == "chain"]
    assert len(chains) == round(cfg.train_chains * cfg.questions.train) > 0
    own = {t.key for t in TRAIN_CHAIN_TEMPLATES}
    assert {q.template for q in chains} <= own and all(q.hops == 3 for q in chains)
    assert not own & {q.template for q in questions["ood"]}
    ood_paths = {t.path for t in PATH_TEMPLATES if t.qtype == "chain"}
    assert not ood_paths & {t.path for t in TRAIN_CHAIN_TEMPLATES}
    assert not any(q.type == "chain" for split in ("dev", "test") for q in questions[split])
    assert type_counts(small_cfg(train_chains=0.0), "train").get("train_chain") is None


def test_ood_hops_follow_params():
    ds = generate_world(small_cfg(ood_hops=[4]), 3)
    assert {r["hops"] for r in ds.questions["ood"]} == {4}


def test_yes_no_answers_are_balanced(ds):
    for split in ("train", "dev", "test"):
        answers = Counter(r["answers"][0] for r in ds.questions[split] if r["answers"][0] in ("yes", "no"))
        assert answers["yes"] > 0 and abs(answers["yes"] - answers["no"]) <= 1, split


def test_no_pair_is_compared_twice(generated):
    _, questions = generated
    seen = Counter(
        (q.template, frozenset(e.pid for e in q.supporting))
        for qs in questions.values()
        for q in qs
        if q.type == "comparison"
    )
    assert max(seen.values()) == 1


def test_too_small_world_names_the_param():
    with pytest.raises(ValueError, match=r"data\.synthetic\.families\.dev"):
        generate_world(
            small_cfg(
                families={"train": 30, "dev": 1, "test": 6, "ood": 6},
                questions={"train": 150, "dev": 400, "test": 30, "ood": 30},
            ),
            0,
        )


def test_every_template_is_used_on_default_mix(generated):
    _, questions = generated
    used = {q.template for qs in questions.values() for q in qs}
    assert {t.key for t in PATH_TEMPLATES} <= used


# ------------------------------------------------------------------------------ split hygiene
def test_splits_are_entity_disjoint(generated, ds, passages):
    world, _ = generated
    for e in world.entities:
        for rel, idx in e.rels.items():
            assert world.entities[idx].split == e.split, (e.name, rel)
    titles = [p["title"] for p in ds.corpus]
    assert len(set(titles)) == len(titles) == len(world.entities)
    train_text = "\n".join(r["question"] for r in ds.questions["train"])
    for split in ("dev", "test", "ood"):
        for r in ds.questions[split]:
            names = [passages[pid]["title"] for pid in r["supporting_ids"]]
            names += [a for a in r["answers"] if a not in ("yes", "no") and not a.isdigit()]
            for name in names:
                assert not _mentions(name, train_text), (split, name)


def test_no_shared_question_or_template_answer_pair(generated):
    _, questions = generated
    texts = [q.question for qs in questions.values() for q in qs]
    assert len(set(texts)) == len(texts)
    owner: dict[tuple[str, str], str] = {}
    for split, qs in questions.items():
        for q in qs:
            if q.answers[0] in ("yes", "no"):
                continue
            key = (q.template, q.answers[0].lower())
            assert owner.setdefault(key, split) == split, key


def test_passage_ids_do_not_leak_split(generated, ds):
    world, _ = generated
    ids = [p["id"] for p in ds.corpus]
    assert ids == [f"p{i:06d}" for i in range(len(ids))]
    first = [e.split for e in sorted(world.entities, key=lambda e: e.pid)[:60]]
    assert len(set(first)) >= 2  # the split order of creation is shuffled away


# ------------------------------------------------------------------------------ answerability
def test_supporting_chain_is_ordered_and_states_the_answer(ds, passages):
    for split in SPLITS:
        for r in ds.questions[split]:
            sup = [passages[pid] for pid in r["supporting_ids"]]  # KeyError = missing passage
            if r["type"] == "comparison":
                assert len(sup) == 2
                assert all(_mentions(p["title"], r["question"]) for p in sup)
                assert r["answers"] in (["yes"], ["no"]) or r["answers"][0] in [p["title"] for p in sup]
                continue
            assert _mentions(sup[0]["title"], r["question"]), r
            for prev, nxt in zip(sup, sup[1:]):
                assert _mentions(nxt["title"], prev["text"]), (r["question"], prev["title"], nxt["title"])
            assert _mentions(r["answers"][0], sup[-1]["text"]), r
            for later in sup[1:]:
                assert not _mentions(later["title"], r["question"]), r


def test_answer_never_in_question(ds):
    for split in SPLITS:
        for r in ds.questions[split]:
            if r["type"] in NON_COMPARISON:
                low = r["question"].lower()
                assert r["answers"] and all(a and a.lower() not in low for a in r["answers"]), r


def test_comparison_answers_are_correct(generated):
    world, questions = generated
    for qs in questions.values():
        for q in qs:
            if q.type != "comparison":
                continue
            a, b = q.supporting
            if q.answers[0] in ("yes", "no"):
                rel = next(r for r in ("directed_by", "born_in", "headquartered_in", "located_in") if r in a.rels)
                assert (a.rels[rel] == b.rels[rel]) == (q.answers[0] == "yes")
                continue
            attr = next(k for k in ("release_year", "birth_year", "founded_year") if k in a.attrs)
            older = a if a.attrs[attr] < b.attrs[attr] else b
            younger = b if older is a else a
            wants_min = any(w in q.question for w in ("first", "earlier"))
            assert q.answers == [(older if wants_min else younger).name], q.question


def test_passages_state_only_outgoing_facts(generated, ds):
    """A passage names no entity except the targets of its own relations (unique chains)."""
    world, _ = generated
    names = sorted((e.name for e in world.entities), key=len, reverse=True)
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(n) for n in names) + r")(?!\w)")
    by_pid = world.by_pid()
    for p in ds.corpus:
        ent = by_pid[p["id"]]
        allowed = {ent.name} | {world.entities[i].name for i in ent.rels.values()}
        assert set(pattern.findall(p["text"])) <= allowed | {a.split(" of ")[-1] for a in ent.aliases}, p
        assert p["text"].startswith(ent.name)


def test_distractor_sentence_count():
    plain = generate_world(small_cfg(distractor_sentences=0), 5).corpus
    noisy = generate_world(small_cfg(distractor_sentences=3), 5).corpus
    for a, b in zip(plain, noisy):
        assert a["title"] == b["title"]
        assert b["text"].count(".") == a["text"].count(".") + 3


def test_country_aliases(ds):
    chains = [r for r in ds.questions["ood"] if "country" in r["question"]]
    assert chains
    for r in chains:
        name, alias = r["answers"]
        assert re.fullmatch(rf"(Republic|Kingdom|Federation|Commonwealth) of {name}", alias)


def test_names_come_from_the_fixed_inventory(generated):
    world, _ = generated
    words = {w for pool in INVENTORY.values() for w in pool} | set(
        CITY_KINDS + COMPANY_KINDS + FILM_NOUNS + COUNTRY_PREFIXES
    )
    pools = list(INVENTORY.values())
    assert sum(map(len, pools)) == len({w for p in pools for w in p})  # pools are disjoint
    for e in world.entities:
        parts = e.name.split()
        assert len(parts) == 2 and all(p in words for p in parts), e.name


def test_held_out_names_are_new_combinations_of_train_parts(generated):
    """Every word of a dev/test/ood entity's name (countries included) occurs in train names; the
    full names are new."""
    world, _ = generated
    train = [e for e in world.entities if e.split == "train"]
    uses = Counter(p for e in train for p in e.name.split())
    train_names = {e.name for e in train}
    for e in world.entities:
        if e.split != "train":
            assert e.name not in train_names
            assert all(uses[p] >= 1 for p in e.name.split()), e.name


def test_held_out_parts_are_well_used_in_a_realistic_world():
    world, _ = generate(small_cfg(families={"train": 400, "dev": 6, "test": 6, "ood": 6}), 1)
    uses = Counter(p for e in world.entities if e.split == "train" for p in e.name.split())
    held_out = [p for e in world.entities if e.split != "train" for p in e.name.split()]
    assert held_out and all(uses[p] >= 1 for p in held_out)
    assert sum(uses[p] >= 3 for p in held_out) / len(held_out) > 0.9


def test_fresh_world_avoids_taken_names():
    world, _ = generate(small_cfg(), 3)
    taken = {e.name for e in world.entities}
    fresh = fresh_world(40, "stream-0", taken=taken)
    assert {e.split for e in fresh.entities} == {"pretrain"}
    assert not taken & {e.name for e in fresh.entities}
    assert [e.name for e in fresh.entities] == [e.name for e in fresh_world(40, "stream-0", taken=taken).entities]
    assert [e.name for e in fresh.entities] != [e.name for e in fresh_world(40, "stream-1", taken=taken).entities]
