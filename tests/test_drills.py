"""Reading drills: documents over fresh worlds whose answers are read off their own passages, no
dataset entity in pretraining, and the gate's drills over held-out entities as the dataset states
them."""

from __future__ import annotations

import random
from itertools import islice

import pytest

from agentr1.config import SyntheticConfig
from agentr1.data.drills import (
    ANSWER,
    KIND_RELATIONS,
    QUESTION,
    RELATIONS,
    build_doc,
    facts_of,
    gate_drills,
    passage_line,
    pretraining_docs,
    stream_docs,
)
from agentr1.data.world import build_world, corpus_rows, fresh_world

SMALL = SyntheticConfig(
    families={"train": 12, "dev": 3, "test": 3, "ood": 4}, questions={"train": 40, "dev": 10, "test": 10, "ood": 10}
)


@pytest.fixture(scope="module")
def world():
    w = build_world(SMALL, 0)
    return w, corpus_rows(w, SMALL.distractor_sentences, 0)


def test_every_relation_has_a_kind_and_phrasings_naming_the_entity():
    assert set(KIND_RELATIONS) == {"person", "city", "film", "company"}
    for rel, (kind, phrasings) in RELATIONS.items():
        assert rel in KIND_RELATIONS[kind] and phrasings
        assert all("{x}" in p and p.endswith("?") for p in phrasings)
    # the phrasings the multi-hop questions use are among them
    assert "Who is the director of {x}?" in RELATIONS["directed_by"][1]
    assert "Who is the founder of {x}?" in RELATIONS["founded_by"][1]


def test_documents_ask_what_their_passages_state(world):
    w, _ = world
    fresh = fresh_world(20, "t", taken={e.name for e in w.entities})
    docs = list(islice(stream_docs(fresh, random.Random(0), 2, (1, 3), 4), 200))
    assert {d.text.count("\nDoc ") + 1 for d in docs} == {1, 3}
    by_pid = {e.pid: e for e in fresh.entities}
    for doc in docs:
        head = doc.text[: doc.text.index(QUESTION)]
        assert 1 <= len(doc.facts) == len(doc.targets) <= 4  # as many as the passages state, at most 4
        for fact, (a, b) in zip(doc.facts, doc.targets):
            entity = by_pid[fact.pid]
            assert f"(Title: {entity.name}) " in head  # the asked entity's passage is in the document
            assert fact.answers[0] in head  # and its answer is read off it
            assert doc.text[a:b] == f" {fact.answers[0]}\n"  # the target span is the answer and its newline
            assert doc.text[:a].endswith(f"{QUESTION} {fact.question}\n{ANSWER}")
        for a, b in doc.first_mentions:  # a name's first mention is in the passages
            assert a < len(head) and doc.text.find(doc.text[a:b]) == a
    relations = {f.relation for d in docs for f in d.facts}
    assert relations == {r.lstrip("@") for r in RELATIONS}


def test_pretraining_docs_avoid_every_dataset_entity_and_are_deterministic(world):
    w, _ = world
    taken = {e.name for e in w.entities}
    first = [d.text for d in islice(pretraining_docs(taken, 0, 8, 30, 2), 90)]  # three worlds
    assert first == [d.text for d in islice(pretraining_docs(taken, 0, 8, 30, 2), 90)]
    assert first != [d.text for d in islice(pretraining_docs(taken, 1, 8, 30, 2), 90)]
    for name in taken:
        assert all(f"Title: {name})" not in t for t in first)
    worlds = [fresh_world(8, f"0/world/{i}", taken=taken) for i in range(3)]
    assert all(not taken & {e.name for e in fw.entities} for fw in worlds)
    assert len({tuple(e.name for e in fw.entities) for fw in worlds}) == 3  # a new world every 30 documents


def test_gate_drills_read_held_out_entities_as_the_dataset_states_them(world):
    w, corpus = world
    text_of = {p["id"]: p for p in corpus}
    held = {e.pid: e for e in w.entities if e.split == "test"}
    for passages in (1, 3):
        docs = gate_drills(w, corpus, ["test"], passages, 30, 0)
        assert len(docs) == 30 and docs == gate_drills(w, corpus, ["test"], passages, 30, 0)
        for doc in docs:
            [fact] = doc.facts
            assert fact.pid in held
            prompt = doc.text[: doc.prompt_end]
            assert prompt.count("(Title: ") == passages
            assert passage_line(1, "", "")[:5] == prompt[:5]
            asked = text_of[fact.pid]
            assert passage_line(0, asked["title"], asked["text"])[6:] in prompt  # the dataset's own passage
            assert fact.question == RELATIONS[
                "@" + fact.relation if "@" + fact.relation in RELATIONS else fact.relation
            ][1][0].format(x=held[fact.pid].name)
        counts = {}
        for doc in docs:
            counts[doc.facts[0].relation] = counts.get(doc.facts[0].relation, 0) + 1
        assert max(counts.values()) - min(counts.values()) <= 1  # drawn evenly over the relations


def test_facts_skip_relations_an_entity_lacks_and_build_doc_marks_answers(world):
    w, _ = world
    oldest = next(e for e in w.entities if e.kind == "person" and "father" not in e.rels)
    rels = {f.relation for f in facts_of(w, oldest)}
    assert "father" not in rels and {"born_in", "birth_year"} <= rels
    doc = build_doc([("A B", "A B is a city in C D.")], [facts_of(w, oldest)[0]], names=["A B", "C D"])
    assert doc.text.startswith("Doc 1 (Title: A B) A B is a city in C D.\nQuestion: ")
    assert doc.first_mentions == [(14, 17), (36, 39)]
    assert doc.prompt_end == doc.targets[0][0]
