"""Reading drills over synthetic worlds: the texts the ``pretrain`` stage's base policy learns to
read from, and the reading gate it is measured on.

A drill is a *document*: one to three passages, each shown the way the search tool shows a hit
(``Doc i (Title: T) text``, :func:`passage_line`), then questions about the entities those
passages state facts of, each followed by its answer::

    Doc 1 (Title: Kordia Ruvok) Kordia Ruvok is a journalist. She was born in Amdan Holm in 1928. ...
    Doc 2 (Title: Ongrar Moor) Ongrar Moor is a city in North Renvesh. ...
    Question: Who is the father of Kordia Ruvok?
    Answer: Brumgus Ruvok
    Question: In which country is Ongrar Moor?
    Answer: North Renvesh

Every answer is read off a passage in the document (a relation's target name or a year the
passage states), so answering is reading: find the passage of the asked entity (among several:
*multi-passage* drills), find the asked relation in it, copy what follows. A question names
its relation in one of several phrasings (:data:`RELATIONS`), the ones the multi-hop questions
use among them ("the director of", "the founder of", ...).

``Doc.targets`` are the character spans of the answers (each with its closing newline): where
reading decides the next token. The loss of the ``pretrain`` stage goes there
(``pretrain.loss_on: answers``) or on every token but the first mention of each name in the
document (``pretrain.loss_on: text``: a fresh name cannot be predicted before it is read once;
its later mentions, the questions' syntax and the answers can).

Drills are drawn over a stream of fresh worlds (:func:`agentr1.data.world.fresh_world`): new
entities, new facts, no dataset entity, so no answer can be memorized. The reading gate draws
them over the dataset's dev and test entities instead (:func:`gate_drills`), which no
pretraining text holds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentr1.data.world import Entity, World, fresh_world, passage_text

# relation (or "@attribute") -> the kind of entity that states it and its question phrasings
# ({x} = the entity's name); the first phrasing is the gate's
RELATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "born_in": ("person", ("Where was {x} born?", "In which city was {x} born?", "What is the birthplace of {x}?")),
    "@birth_year": ("person", ("In which year was {x} born?", "When was {x} born?")),
    "father": ("person", ("Who is the father of {x}?", "Who is {x}'s father?")),
    "mother": ("person", ("Who is the mother of {x}?", "Who is {x}'s mother?")),
    "spouse": ("person", ("Who is the spouse of {x}?", "Who is {x} married to?")),
    "located_in": ("city", ("In which country is {x}?", "Which country is {x} in?")),
    "directed_by": ("film", ("Who directed {x}?", "Who is the director of {x}?")),
    "produced_by": ("film", ("Which company produced {x}?", "What is the company that produced {x}?")),
    "@release_year": ("film", ("In which year was {x} released?", "When was {x} released?")),
    "founded_by": ("company", ("Who founded {x}?", "Who is the founder of {x}?")),
    "headquartered_in": ("company", ("Where is {x} headquartered?", "In which city is {x} headquartered?")),
    "@founded_year": ("company", ("When was {x} founded?", "In which year was {x} founded?")),
}
KIND_RELATIONS: dict[str, tuple[str, ...]] = {
    kind: tuple(r for r, (k, _) in RELATIONS.items() if k == kind) for kind in ("person", "city", "film", "company")
}
QUESTION, ANSWER = "Question:", "Answer:"


def passage_line(i: int, title: str, text: str) -> str:
    """How a passage is shown to the model: the search tool's observation line for hit ``i``."""
    return f"Doc {i} (Title: {title}) {text}"


@dataclass(frozen=True)
class Fact:
    """One question about one entity: its relation, the question and the gold answers."""

    pid: str
    relation: str
    question: str
    answers: tuple[str, ...]


@dataclass
class Doc:
    """A drill document: its text, the character spans of its answers (``targets``) and the
    character spans of each name's first mention (``first_mentions``), and its facts."""

    text: str
    targets: list[tuple[int, int]] = field(default_factory=list)
    first_mentions: list[tuple[int, int]] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    prompt_end: int = 0  # where the first answer starts: the text before it is the gate's prompt


def facts_of(world: World, e: Entity, phrasing: int | random.Random = 0) -> list[Fact]:
    """The facts ``e``'s passage states that :data:`RELATIONS` asks about; the question in
    phrasing ``phrasing`` (an index, or drawn with a ``random.Random``)."""
    out = []
    for rel in KIND_RELATIONS.get(e.kind, ()):
        if rel.startswith("@"):
            answers: tuple[str, ...] = (str(e.attrs[rel[1:]]),)
        elif rel in e.rels:
            answers = tuple(world.entities[e.rels[rel]].answers)
        else:  # the oldest generation has no parents
            continue
        phrasings = RELATIONS[rel][1]
        pick = phrasing.randrange(len(phrasings)) if isinstance(phrasing, random.Random) else phrasing % len(phrasings)
        out.append(Fact(e.pid, rel.lstrip("@"), phrasings[pick].format(x=e.name), answers))
    return out


def build_doc(passages: Sequence[tuple[str, str]], facts: Sequence[Fact], names: Sequence[str] = (),
              question_first: bool = False) -> Doc:
    """The document of ``passages`` (title, text) followed by ``facts``' questions and answers;
    ``question_first``: the first question comes before the passages (as in an agent's context,
    where the question precedes what the searches return), its answer after them. ``names``: the
    entity names whose first mention the document records (module docstring)."""
    lines = [passage_line(i, title, text) for i, (title, text) in enumerate(passages, start=1)]
    text = "\n".join(lines) + "\n"
    if question_first and facts:
        text = f"{QUESTION} {facts[0].question}\n" + text
    doc = Doc("", facts=list(facts))
    for k, fact in enumerate(facts):
        text += f"{ANSWER}" if (k == 0 and question_first) else f"{QUESTION} {fact.question}\n{ANSWER}"
        if k == 0:
            doc.prompt_end = len(text)
        start = len(text)
        text += f" {fact.answers[0]}\n"
        doc.targets.append((start, len(text)))
    doc.text = text
    for name in sorted(set(names)):
        at = text.find(name)
        if at >= 0:
            doc.first_mentions.append((at, at + len(name)))
    return doc


def _names_in(world: World, entities: Sequence[Entity]) -> list[str]:
    """Names of the entities and of every entity their passages mention."""
    out = []
    for e in entities:
        out.append(e.name)
        out += [world.entities[i].name for i in e.rels.values()]
    return out


def stream_docs(world: World, rng: random.Random, n_distractors: int, passages: Sequence[int] = (1, 2, 3),
                questions: int = 4, question_first: float = 0.0) -> Iterator[Doc]:
    """Endless drill documents over ``world``: each holds ``rng.choice(passages)`` passages of
    distinct entities (drawn uniformly among the entities with facts to ask) and ``questions``
    questions drawn from their facts (each phrasing equally likely), the first one before the
    passages with probability ``question_first``. Passages are written anew for each document
    (:func:`agentr1.data.world.passage_text`: the distractor sentences and their places vary)."""
    askable = [e for e in world.entities if KIND_RELATIONS.get(e.kind)]
    while True:
        chosen = rng.sample(askable, rng.choice(tuple(passages)))
        pool = [f for e in chosen for f in facts_of(world, e, rng)]
        facts = rng.sample(pool, min(questions, len(pool)))
        shown = [(e.name, passage_text(world, e, n_distractors, rng)) for e in chosen]
        yield build_doc(shown, facts, _names_in(world, chosen), question_first=rng.random() < question_first)


def gate_drills(world: World, corpus: Sequence[dict[str, Any]], splits: Sequence[str], passages: int, per_split: int,
                seed: int | str) -> list[Doc]:
    """The reading gate's drills: for ``per_split`` facts of each split's entities (drawn evenly
    over the relations, canonical phrasing), a document of the asked entity's passage and
    ``passages - 1`` other passages of the same split, shuffled, exactly as ``corpus`` (the
    dataset's passages) states them, and the one question. ``Doc.prompt_end`` ends the prompt."""
    rng = random.Random(f"{seed}/gate/{passages}")
    text_of = {str(p["id"]): str(p["text"]) for p in corpus}
    docs = []
    for split in splits:
        ents = [e for e in world.entities if e.split == split and KIND_RELATIONS.get(e.kind)]
        by_rel: dict[str, list[Fact]] = {}
        for e in ents:
            for f in facts_of(world, e):
                by_rel.setdefault(f.relation, []).append(f)
        rels = sorted(by_rel)
        for k in range(per_split):
            if not rels:
                break
            pool = by_rel[rels[k % len(rels)]]
            fact = pool.pop(rng.randrange(len(pool)))
            if not pool:
                rels.remove(fact.relation)
            asked = next(e for e in ents if e.pid == fact.pid)
            others = rng.sample([e for e in ents if e is not asked], passages - 1)
            chosen = [asked, *others]
            rng.shuffle(chosen)
            docs.append(build_doc([(e.name, text_of[e.pid]) for e in chosen], [fact]))
    return docs


def pretraining_docs(taken: Sequence[str] | set[str], seed: int | str, families: int, docs_per_world: int,
                     n_distractors: int, passages: Sequence[int] = (1, 2, 3), questions: int = 4,
                     question_first: float = 0.0) -> Iterator[Doc]:
    """Endless drill documents over a stream of fresh worlds (:func:`stream_docs`): world ``i``
    (``families`` clusters, seed ``"<seed>/world/<i>"``, names avoiding ``taken``) gives
    ``docs_per_world`` documents, then the next world takes over. ``ValueError`` if a world held
    a name of ``taken`` (the dataset's entities never appear in pretraining)."""
    taken = frozenset(taken)
    rng = random.Random(f"{seed}/docs")
    i = 0
    while True:
        world = fresh_world(families, f"{seed}/world/{i}", taken=taken)
        clash = sorted({e.name for e in world.entities} & taken)
        if clash:
            raise ValueError(f"pretraining world {i} holds dataset entities: {clash[:5]}")
        docs = stream_docs(world, rng, n_distractors, passages, questions, question_first)
        for _ in range(docs_per_world):
            yield next(docs)
        i += 1
