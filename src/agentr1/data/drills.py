"""One-hop reading drills over the synthetic world: "Who is the father of <person>?" for every
entity of a split and every fact its passage states.

They are pretraining material for a scratch policy (``sft.pretrain.texts: episodes``), never
questions of the dataset: each drill is played by the oracle as a one-search episode (search the
entity, read its passage, answer with the fact), so its transcript ends in the skill the agent's
second query and its answer need - pick, from an observation, the name that follows the asked
relation, and copy it. A drill's question and answer are facts of its own split's entities only
(the sft stage uses the train split), so they reveal nothing about dev/test/ood entities.

The world is not stored by ``agentr1 prepare``; :func:`regenerate` rebuilds it from the same
params and checks that it is the one whose corpus is on disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentr1.data.world import World

# kind -> relation (or "@attribute") -> question template ({x} = the entity's name)
ONE_HOP: dict[str, dict[str, str]] = {
    "person": {
        "born_in": "Where was {x} born?",
        "@birth_year": "In which year was {x} born?",
        "father": "Who is the father of {x}?",
        "mother": "Who is the mother of {x}?",
        "spouse": "Who is the spouse of {x}?",
    },
    "city": {"located_in": "In which country is {x}?"},
    "film": {
        "directed_by": "Who directed {x}?",
        "produced_by": "Which company produced {x}?",
        "@release_year": "In which year was {x} released?",
    },
    "company": {
        "founded_by": "Who founded {x}?",
        "headquartered_in": "Where is {x} headquartered?",
        "@founded_year": "When was {x} founded?",
    },
}


def one_hop_questions(world: World, split: str = "train") -> list[dict[str, Any]]:
    """One drill per (entity of ``split``, fact of :data:`ONE_HOP` its passage states), in entity
    order, as question rows (``id``, ``question``, ``answers``, ``type`` = ``drill``, ``hops`` = 1,
    ``supporting_ids`` = the entity's passage)."""
    out = []
    for e in world.entities:
        if e.split != split:
            continue
        for rel, template in ONE_HOP.get(e.kind, {}).items():
            if rel.startswith("@"):
                answers = [str(e.attrs[rel[1:]])]
            elif rel in e.rels:
                answers = list(world.entities[e.rels[rel]].answers)
            else:  # the oldest generation has no parents
                continue
            out.append({"id": f"drill-{e.pid}-{rel.lstrip('@')}", "question": template.format(x=e.name),
                        "answers": answers, "type": "drill", "hops": 1, "supporting_ids": [e.pid]})
    return out


def regenerate(synthetic_cfg, seed: int, corpus: Sequence[Mapping[str, Any]]) -> World:
    """The world ``agentr1 prepare`` built with these params; ``ValueError`` when its passages
    (ids and titles) are not those of ``corpus``, i.e. the dataset on disk came from other params."""
    from agentr1.data.synthetic import generate

    world, _ = generate(synthetic_cfg, seed)
    mine = sorted((e.pid, e.name) for e in world.entities)
    theirs = sorted((str(p["id"]), str(p["title"])) for p in corpus)
    if mine != theirs:
        raise ValueError("the synthetic world rebuilt from params `data.synthetic` and `seed` is not the one in the "
                         "processed dataset: re-run `agentr1 prepare` (dvc repro prepare)")
    return world
