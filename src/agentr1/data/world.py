"""The synthetic world: entities, typed relations and one Wikipedia-like passage per entity.

For every split the world holds ``families[split]`` independent clusters. A cluster is a
three-generation family (paternal and maternal grandparents, the parents, 2-3 children and the
spouse of the first child) plus the cities they were born in, the companies they founded and the
films they directed. Each split also has its own small pool of countries that its cities lie in. Every name is two
parts of the fixed inventory (:mod:`agentr1.data.names`); held-out splits use only parts that
train names use.
Clusters of different splits share no entity, so questions about dev/test/ood entities cannot be
answered from anything a model saw in training questions.

Relations (outgoing, stored on the source entity):
    person:  born_in -> city, father -> person, mother -> person, spouse -> person
    city:    located_in -> country
    film:    directed_by -> person, produced_by -> company
    company: founded_by -> person, headquartered_in -> city
Attributes: person.birth_year, film.release_year, company.founded_year (plus descriptive ones).

A passage states only its entity's *outgoing* facts (a city's passage does not list the people born
there, a person's passage does not list their children or films), so the chain of passages that
answers a question is unique. ``spouse`` is the one symmetric relation and is stated on both sides.
Distractor sentences mention no other entity and no fact used by any question.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from agentr1.config import SPLITS, SyntheticConfig
from agentr1.data.names import COUNTRY_FORMS, NameAllocator

CITIES_PER_FAMILY = 3
FAMILIES_PER_COUNTRY = 5
LATEST_YEAR = 2015
MIN_PART_USES = 4  # a held-out name part is one that at least this many train names use


@dataclass(eq=False)
class Entity:
    """One node of the world (compared by identity). ``rels`` maps a relation name to the target
    entity's index."""

    idx: int
    kind: str
    name: str
    split: str
    family: int  # -1 for split-level entities (countries)
    aliases: tuple[str, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    rels: dict[str, int] = field(default_factory=dict)
    pid: str = ""  # passage id, assigned after a global shuffle

    @property
    def answers(self) -> list[str]:
        """Gold answer strings when this entity is an answer: its name first, then aliases."""
        return [self.name, *self.aliases]


@dataclass
class World:
    entities: list[Entity] = field(default_factory=list)

    def add(self, kind: str, name: str, split: str, family: int, **attrs: Any) -> Entity:
        ent = Entity(idx=len(self.entities), kind=kind, name=name, split=split, family=family, attrs=attrs)
        self.entities.append(ent)
        return ent

    def of(self, split: str, kind: str) -> list[Entity]:
        """Entities of one split and kind, in creation order."""
        return [e for e in self.entities if e.split == split and e.kind == kind]

    def target(self, ent: Entity, rel: str) -> Entity | None:
        idx = ent.rels.get(rel)
        return None if idx is None else self.entities[idx]

    def by_pid(self) -> dict[str, Entity]:
        return {e.pid: e for e in self.entities}


# ------------------------------------------------------------------------------ construction
_OCCUPATIONS = ("teacher", "engineer", "painter", "merchant", "architect", "physician", "poet",
                "botanist", "clockmaker", "lawyer", "sculptor", "journalist")
_GENRES = ("drama", "comedy", "thriller", "musical", "western", "documentary", "adventure", "romance")
_INDUSTRIES = ("shipping", "textile", "publishing", "brewing", "mining", "software", "film production",
               "railway", "insurance", "furniture")


def _person(w: World, names: NameAllocator, rng: random.Random, split: str, fam: int, gender: str,
            surname: str, year: int, cities: list[Entity]) -> Entity:
    p = w.add("person", names.person(gender, surname), split, fam, gender=gender, birth_year=year,
              occupation=rng.choice(_OCCUPATIONS))
    p.rels["born_in"] = rng.choice(cities).idx
    return p


def _marry(a: Entity, b: Entity) -> None:
    a.rels["spouse"], b.rels["spouse"] = b.idx, a.idx


def _child_of(child: Entity, father: Entity, mother: Entity) -> None:
    child.rels["father"], child.rels["mother"] = father.idx, mother.idx


def _make_family(w: World, names: NameAllocator, rng: random.Random, split: str, fam: int,
                 countries: list[Entity]) -> None:
    """Add one cluster (family tree + its cities, companies and films) to ``w``."""
    cities = []
    for _ in range(CITIES_PER_FAMILY):
        city = w.add("city", names.city(), split, fam, population=rng.randint(8, 900))
        city.rels["located_in"] = rng.choice(countries).idx
        cities.append(city)
    s_pat, s_pgm, s_mat, s_mgm, s_inlaw = names.surnames(5)

    def person(gender: str, surname: str, year: int) -> Entity:
        return _person(w, names, rng, split, fam, gender, surname, year, cities)

    gf_p = person("male", s_pat, rng.randint(1850, 1880))
    gm_p = person("female", s_pgm, gf_p.attrs["birth_year"] + rng.randint(-6, 6))
    gf_m = person("male", s_mat, rng.randint(1850, 1880))
    gm_m = person("female", s_mgm, gf_m.attrs["birth_year"] + rng.randint(-6, 6))
    _marry(gf_p, gm_p)
    _marry(gf_m, gm_m)

    def born_after(*parents: Entity) -> int:
        return max(p.attrs["birth_year"] for p in parents) + rng.randint(20, 34)

    father = person("male", s_pat, born_after(gf_p, gm_p))
    mother = person("female", s_mat, born_after(gf_m, gm_m))
    _child_of(father, gf_p, gm_p)
    _child_of(mother, gf_m, gm_m)
    _marry(father, mother)
    children = []
    for _ in range(rng.choice((2, 3))):
        child = person(rng.choice(("male", "female")), s_pat, born_after(father, mother))
        _child_of(child, father, mother)
        children.append(child)
    first = children[0]
    in_law = person("female" if first.attrs["gender"] == "male" else "male", s_inlaw,
                    first.attrs["birth_year"] + rng.randint(-5, 5))
    _marry(first, in_law)
    people = [gf_p, gm_p, gf_m, gm_m, father, mother, *children, in_law]

    companies = []
    for _ in range(rng.choice((1, 2))):
        founder = rng.choice(people)
        year = min(founder.attrs["birth_year"] + rng.randint(24, 50), LATEST_YEAR - 30)
        comp = w.add("company", names.company(), split, fam, founded_year=year,
                     industry=rng.choice(_INDUSTRIES))
        comp.rels["founded_by"] = founder.idx
        comp.rels["headquartered_in"] = rng.choice(cities).idx
        companies.append(comp)

    directors = [p for p in people if p.attrs["birth_year"] <= LATEST_YEAR - 30]
    previous: Entity | None = None
    for _ in range(rng.choice((2, 3))):
        # Half the time a person directs a second film, so "same director?" has yes answers.
        director = previous if previous is not None and rng.random() < 0.5 else rng.choice(directors)
        producer = rng.choice(companies)
        earliest = max(director.attrs["birth_year"] + 25, producer.attrs["founded_year"] + 1)
        year = min(earliest + rng.randint(0, 30), LATEST_YEAR)
        film = w.add("film", names.film(), split, fam, release_year=year, genre=rng.choice(_GENRES),
                     minutes=rng.randint(80, 160))
        film.rels["directed_by"] = director.idx
        film.rels["produced_by"] = producer.idx
        previous = director


def _add_split(w: World, names: NameAllocator, rng: random.Random, split: str, n_fam: int) -> None:
    """``n_fam`` clusters of ``split`` and the split's own countries (one per
    :data:`FAMILIES_PER_COUNTRY` clusters, at least 2)."""
    countries = []
    for _ in range(max(2, math.ceil(n_fam / FAMILIES_PER_COUNTRY))):
        countries.append(w.add("country", names.country(), split, -1, form=rng.choice(COUNTRY_FORMS),
                               population=rng.randint(2, 90)))
    for c in countries:
        c.aliases = (f"{c.attrs['form']} of {c.name}",)
    for fam in range(n_fam):
        _make_family(w, names, rng, split, fam, countries)


def _assign_pids(w: World, rng: random.Random) -> None:
    order = list(range(len(w.entities)))
    rng.shuffle(order)
    for rank, idx in enumerate(order):
        w.entities[idx].pid = f"p{rank:06d}"


def build_world(cfg: SyntheticConfig, seed: int) -> World:
    """Build all splits' clusters deterministically from ``seed`` and assign passage ids.

    The train split is built first; every held-out split then draws its names from the parts
    train names use (:meth:`NameAllocator.restrict_to`): its entities are new combinations of
    known parts, so every word of a held-out name occurs in some train name. Passage ids
    (``p000123``) follow a seeded shuffle of all entities, so an id reveals neither the split
    nor the kind of its entity.
    """
    rng = random.Random(seed)
    names = NameAllocator(rng)
    w = World()
    for split in SPLITS:
        n_fam = getattr(cfg.families, split)
        if split == "dev" and w.entities:  # train is built: held-out names reuse its parts
            names.restrict_to(MIN_PART_USES)
        if n_fam:
            _add_split(w, names, rng, split, n_fam)
    _assign_pids(w, rng)
    return w


def fresh_world(families: int, seed: int | str, taken=(), split: str = "pretrain",
                capacity_hint: str = "pretrain.world_families") -> World:
    """A world of ``families`` new clusters (one split, ``split``) whose entity names avoid
    ``taken`` (e.g. every dataset entity's name): new combinations of the inventory's parts with
    new facts, drawn from ``seed``. A stream of them (one seed each) is pretraining material in
    which no answer can be memorized. ``capacity_hint``: the param that sets ``families``, named
    when the inventory runs out of names (:class:`agentr1.data.names.NameAllocator`)."""
    rng = random.Random(seed)
    w = World()
    _add_split(w, NameAllocator(rng, capacity_hint, taken=taken), rng, split, families)
    _assign_pids(w, rng)
    return w


# ---------------------------------------------------------------------------------- passages
# Distractor sentence templates per kind: no entity names, no years, nothing a question asks about.
_DISTRACTORS: dict[str, tuple[str, ...]] = {
    "person": (
        "{S} enjoyed {hobby} in {P} spare time.", "{S} spoke {count} languages.",
        "Friends described {O} as {trait}.", "{S} once kept a collection of {things}.",
        "{S} preferred {season} to any other season.", "{S} studied {subject} for several years.",
        "{S} rarely gave interviews.", "{S} kept a detailed diary for most of {P} life.",
        "{S} was fond of {food}.", "{S} walked to work every morning.",
    ),
    "city": (
        "It is known for its {feature}.", "The city has about {n},000 inhabitants.",
        "Its climate is {climate}.", "The local economy relies on {trade}.",
        "It hosts a yearly {event}.", "Its streets are lined with {trees}.",
        "It began as a small {origin}.", "Many visitors come for its {feature}.",
        "A slow river runs through its center.", "Its old town is surrounded by {walls}.",
    ),
    "country": (
        "Its landscape is mostly {terrain}.", "It has about {n} million inhabitants.",
        "Its flag is {color} and {color2}.", "It is known for its {export}.",
        "It has a {climate} climate.", "Its currency is divided into {count} smaller units.",
        "Most of its people live near the {terrain2}.", "It has {count} official languages.",
        "Its national animal is the {animal}.", "Its parliament meets twice a year.",
    ),
    "company": (
        "It employs about {n} people.", "Its logo is a {color} {shape}.",
        "It is known for its {quality}.", "It was listed on a stock exchange after several decades.",
        "Its first product was a {product}.", "It publishes an annual report every spring.",
        "It sponsors a local {event}.", "Its staff wear {color} uniforms.",
        "It once faced a long strike.", "It runs a small museum about its history.",
    ),
    "film": (
        "The film runs for {minutes} minutes.", "It was shot in {season}.",
        "Its soundtrack is built around the {instrument}.", "Critics praised its {aspect}.",
        "It was shot in black and white.", "It was restored decades later.",
        "Its premiere took place on a {weather} evening.", "It features {count} songs.",
        "Its poster shows a {color} {shape}.", "It was a modest success at the box office.",
    ),
}
_FILLERS: dict[str, tuple[str, ...]] = {
    "hobby": ("chess", "sailing", "gardening", "archery", "pottery", "birdwatching", "fishing", "rowing"),
    "trait": ("generous", "reserved", "curious", "stubborn", "cheerful", "patient", "meticulous"),
    "things": ("old maps", "pocket watches", "seashells", "pressed flowers", "stamps", "brass keys"),
    "season": ("spring", "summer", "autumn", "winter"),
    "subject": ("mathematics", "music", "law", "geology", "history", "medicine", "languages"),
    "food": ("plum cake", "roasted chestnuts", "smoked fish", "honey bread", "green tea"),
    "feature": ("stone bridges", "narrow streets", "old harbor", "clock tower", "glass market", "gardens"),
    "climate": ("mild", "dry", "humid", "cold", "windy", "temperate"),
    "trade": ("fishing", "weaving", "tourism", "farming", "trade", "timber"),
    "event": ("lantern festival", "horse race", "music festival", "harvest fair", "boat race"),
    "trees": ("lime trees", "chestnut trees", "poplars", "oaks", "cypresses"),
    "origin": ("fishing village", "trading post", "river crossing", "mining camp", "market town"),
    "walls": ("stone walls", "earthen ramparts", "a dry moat", "old towers"),
    "terrain": ("hills", "plains", "forest", "marshland", "mountains", "steppe"),
    "terrain2": ("coast", "rivers", "lakes", "southern plains", "northern valleys"),
    "color": ("red", "blue", "green", "white", "black", "yellow", "grey"),
    "color2": ("gold", "silver", "orange", "purple", "brown"),
    "export": ("wool", "copper", "wine", "salt", "timber", "amber", "tea"),
    "animal": ("lynx", "heron", "ibex", "wolf", "otter", "crane"),
    "shape": ("circle", "star", "triangle", "anchor", "leaf", "wheel"),
    "quality": ("reliable products", "low prices", "careful design", "long warranties", "fast delivery"),
    "product": ("bicycle", "sewing machine", "lamp", "radio", "typewriter", "stove"),
    "instrument": ("cello", "piano", "accordion", "harp", "trumpet", "organ"),
    "aspect": ("photography", "pacing", "dialogue", "costumes", "score", "lead performance"),
    "weather": ("rainy", "snowy", "warm", "foggy", "windy"),
}


def _fill(template: str, ent: Entity, rng: random.Random) -> str:
    male = ent.attrs.get("gender") == "male"
    values = {k: rng.choice(v) for k, v in _FILLERS.items() if "{" + k + "}" in template}
    values.update(S="He" if male else "She", P="his" if male else "her", O="him" if male else "her",
                  count=rng.choice(("two", "three", "four", "five")), n=rng.randint(12, 950),
                  minutes=ent.attrs.get("minutes", 90))
    return template.format(**values)


def _a(word: str) -> str:
    """``word`` with its indefinite article ("a poet", "an engineer")."""
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def facts(w: World, e: Entity) -> list[str]:
    """The sentences stating ``e``'s own outgoing facts, in a fixed order, name first."""
    a, t = e.attrs, (lambda rel: w.entities[e.rels[rel]].name)
    if e.kind == "person":
        he, his = ("He", "His") if a["gender"] == "male" else ("She", "Her")
        out = [f"{e.name} is {_a(a['occupation'])}.", f"{he} was born in {t('born_in')} in {a['birth_year']}."]
        if "father" in e.rels:
            out += [f"{his} father is {t('father')}.", f"{his} mother is {t('mother')}."]
        if "spouse" in e.rels:
            out.append(f"{he} is married to {t('spouse')}.")
        return out
    if e.kind == "city":
        return [f"{e.name} is a city in {t('located_in')}."]
    if e.kind == "country":
        return [f"{e.name}, officially the {a['form']} of {e.name}, is a country."]
    if e.kind == "company":
        return [f"{e.name} is {_a(a['industry'])} company founded in {a['founded_year']} by {t('founded_by')}.",
                f"It is headquartered in {t('headquartered_in')}."]
    if e.kind == "film":
        return [f"{e.name} is {_a(a['genre'])} film released in {a['release_year']}.",
                f"It was directed by {t('directed_by')}.", f"It was produced by {t('produced_by')}."]
    raise ValueError(f"unknown entity kind {e.kind!r}")


def passage_text(w: World, e: Entity, n_distractors: int, rng: random.Random) -> str:
    """Facts plus ``n_distractors`` distractor sentences inserted at random places after the first."""
    sentences = facts(w, e)
    pool = _DISTRACTORS[e.kind]
    for template in rng.sample(pool, min(n_distractors, len(pool))):
        sentences.insert(rng.randint(1, len(sentences)), _fill(template, e, rng))
    return " ".join(sentences)


def corpus_rows(w: World, n_distractors: int, seed: int) -> list[dict[str, str]]:
    """One passage per entity, sorted by passage id."""
    rng = random.Random(f"{seed}/passages")
    rows = [{"id": e.pid, "title": e.name, "text": passage_text(w, e, n_distractors, rng)} for e in w.entities]
    return sorted(rows, key=lambda r: r["id"])
