"""A fixed inventory of invented, pronounceable name parts, and unique names built from it.

Every entity of the synthetic world is named by combining a few parts from this inventory
("Talven Moric", "Orlek Ford", "Sutaro Films", "Zorlia"). The inventory itself does not depend on
the world seed: it is built once from syllables with a constant seed, so it is identical for every
world, and the same first names, surnames and stems recur across entities of all splits. A
word-level tokenizer trained on the corpus therefore has one token per name part. Every name has
two parts ("First Surname", "Stem Kind", "North Terdia"), so a new entity is a new combination
of known parts: after the train split is built, :meth:`NameAllocator.restrict_to` limits the
held-out splits to parts that several train names use, so no dev/test/ood name needs a word that
no train text holds (a country too: "North Terdia" is a fixed English prefix and an invented
stem, like any other name).

The pools are pairwise disjoint, so no part of one kind of name can be mistaken for another kind
(a country never appears inside a city or person name). Capitalised invented words may
occasionally coincide with a real given name; the full combinations are what identify entities,
and those are invented.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable

INVENTORY_SEED = 1729  # constant on purpose: the inventory is shared by every world

_SIMPLE_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_ONSETS = _SIMPLE_ONSETS + ("br", "dr", "gr", "kr", "th", "st")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("l", "n", "r", "s", "m", "k")  # inside a word
_FINAL_CODAS = _CODAS + ("th", "sk")  # at the end of a word
_LIQUIDS = ("l", "n", "r", "v", "d")

CITY_KINDS = (
    "Ford", "Vale", "Haven", "Mere", "Holm", "Crest", "Wick", "Moor", "Fell", "Brook", "Port", "Reach",
)
COMPANY_KINDS = ("Films", "Industries", "Holdings", "Works", "Labs", "Trading", "Motors", "Foods")
FILM_NOUNS = (
    "Summer", "Requiem", "Horizon", "Lantern", "Harvest", "Echo", "Voyage", "Tides",
    "Winter", "Crown", "Garden", "Mirror", "River", "Letters", "Shadow", "Storm",
)
COUNTRY_FORMS = ("Republic", "Kingdom", "Federation", "Commonwealth")
COUNTRY_PREFIXES = ("North", "South", "East", "West", "Upper", "Lower", "New", "Greater")


def _open(r: random.Random) -> str:
    return r.choice(_ONSETS) + r.choice(_VOWELS)


def _closed(r: random.Random) -> str:
    return _open(r) + r.choice(_CODAS)


def _mid(r: random.Random) -> str:
    """A word-internal syllable start: a single consonant and a vowel."""
    return r.choice(_SIMPLE_ONSETS) + r.choice(_VOWELS)


# Word shapes per pool (a shape is a function of the inventory RNG).
_SHAPES: dict[str, Callable[[random.Random], str]] = {
    "male": lambda r: _closed(r) + _mid(r) + r.choice(("n", "r", "k", "l", "s")),
    "female": lambda r: _closed(r) + r.choice(_SIMPLE_ONSETS) + r.choice(("a", "e", "i", "ia", "ina")),
    "surname": lambda r: _open(r) + _mid(r) + r.choice(("c", "k", "n", "t", "rn", "sk")),
    "city": lambda r: r.choice(_VOWELS) + r.choice(_CODAS[:5]) + _open(r) + r.choice(_FINAL_CODAS),
    "country": lambda r: _closed(r) + r.choice(_LIQUIDS) + r.choice(("ia", "ova", "and", "ar", "esh")),
    "brand": lambda r: _open(r) + _open(r) + _open(r),
    "film": lambda r: _open(r) + _open(r) + r.choice(_CODAS),
}

POOL_SIZES: dict[str, int] = {
    "male": 300,
    "female": 300,
    "surname": 500,
    "city": 500,
    "country": 60,
    "brand": 300,
    "film": 300,
}


def _build_inventory() -> dict[str, tuple[str, ...]]:
    """Build the disjoint word pools deterministically (fixed seed, fixed pool order)."""
    rng = random.Random(INVENTORY_SEED)
    # membership only (pool order comes from the RNG draw order); fixed English parts are reserved
    taken: set[str] = set(CITY_KINDS + COMPANY_KINDS + FILM_NOUNS + COUNTRY_FORMS + COUNTRY_PREFIXES)
    pools: dict[str, tuple[str, ...]] = {}
    for pool, size in POOL_SIZES.items():
        words: list[str] = []
        while len(words) < size:
            word = _SHAPES[pool](rng).capitalize()
            if word not in taken and 4 <= len(word) <= 9:
                taken.add(word)
                words.append(word)
        pools[pool] = tuple(words)
    return pools


INVENTORY: dict[str, tuple[str, ...]] = _build_inventory()
# every pool a name part is drawn from: the invented ones and the fixed English ones
PARTS: dict[str, tuple[str, ...]] = {**INVENTORY, "city_kind": CITY_KINDS, "company_kind": COMPANY_KINDS,
                                     "film_noun": FILM_NOUNS, "country_prefix": COUNTRY_PREFIXES}
# kind of name -> (pool of its first word, pool of its second word); persons are "<male|female> <surname>"
PAIRS: dict[str, tuple[str, str]] = {"city": ("city", "city_kind"), "company": ("brand", "company_kind"),
                                     "film": ("film", "film_noun"), "country": ("country_prefix", "country")}


class NameAllocator:
    """Draws globally unique entity names from the inventory with a seeded RNG.

    ``taken``: names that must not be drawn (a stream of pretraining worlds passes the dataset's
    entity names, so no pretraining entity is a dataset entity). :meth:`restrict_to` limits
    later draws to name parts earlier names use. ``capacity_hint`` names the param to change
    when a kind of name runs out, so the error is actionable (the inventory is fixed; only the
    world size can be lowered).
    """

    MAX_FILL = 0.9  # refuse to fill a name space beyond this (rejection sampling gets slow)
    MAX_TRIES = 10_000  # draws in a row that hit a used or taken name before giving up

    def __init__(self, rng: random.Random, capacity_hint: str = "data.synthetic.families",
                 taken: Iterable[str] = ()) -> None:
        self.rng = rng
        self.hint = capacity_hint
        self.taken = frozenset(taken)
        self.used: dict[str, str] = {}  # name -> kind
        self._counts: dict[str, int] = {}
        self._inside: dict[str, int] = {}  # kind -> used names inside the restricted pools
        self.pools: dict[str, tuple[str, ...]] = dict(PARTS)

    def restrict_to(self, min_uses: int = 3, min_parts: int = 30) -> None:
        """Draw later names from the parts the names drawn so far use: per pool, the parts used
        at least ``min_uses`` times, or its ``min_parts`` most used ones when fewer are (ties in
        inventory order). Where a kind's restricted pools have no room left (a small world), its
        draws fall back to the whole inventory."""
        uses = Counter(part for name in self.used for part in name.split())
        for pool, words in PARTS.items():
            ranked = sorted((w for w in words if uses[w] > 0), key=lambda w: -uses[w])
            keep = {w for w in ranked if uses[w] >= min_uses}
            if len(keep) < min_parts:
                keep = set(ranked[:min_parts])
            self.pools[pool] = tuple(w for w in words if w in keep)
        self._counts.clear()  # capacities are counted against the restricted pools from now on
        for kind, (first, second) in PAIRS.items():
            self._inside[kind] = sum(1 for name, k in self.used.items() if k == kind and
                                     name.split()[0] in self.pools[first] and name.split()[1] in self.pools[second])

    def _draw(self, kind: str, space: int, make: Callable[[], str], tag: str | None = None) -> str:
        n = self._counts.get(kind, 0)
        full = ValueError(f"the synthetic name inventory has room for about {int(space * self.MAX_FILL)} {kind} "
                          f"names, and this world needs more: lower {self.hint} (summed over all splits)")
        if n + 1 > int(space * self.MAX_FILL):
            raise full
        for _ in range(self.MAX_TRIES):
            name = make()
            if name not in self.used and name not in self.taken:
                self.used[name] = tag or kind
                self._counts[kind] = n + 1
                return name
        raise full

    def person(self, gender: str, surname: str) -> str:
        """A unique "First Surname" with a first name of the given gender ('male'/'female')."""
        firsts = self.pools[gender]
        return self._draw(f"{gender} {surname}", len(firsts), lambda: f"{self.rng.choice(firsts)} {surname}", "person")

    def surnames(self, k: int) -> list[str]:
        """``k`` distinct surnames (surnames recur across families; full names stay unique)."""
        return self.rng.sample(self.pools["surname"], k)

    def city(self) -> str:
        """"<Stem> <Kind>" ("Ontun Haven")."""
        return self._pair("city")

    def company(self) -> str:
        """"<Brand> <Kind>" ("Sutaro Films")."""
        return self._pair("company")

    def film(self) -> str:
        """"<Word> <Noun>" ("Drozis Letters")."""
        return self._pair("film")

    def country(self) -> str:
        """"<Prefix> <Stem>" ("North Terdia")."""
        return self._pair("country")

    def _pair(self, kind: str) -> str:
        first, second = PAIRS[kind]
        firsts, seconds = self.pools[first], self.pools[second]
        room = int(len(firsts) * len(seconds) * self.MAX_FILL) - self._inside.get(kind, 0)
        if self._counts.get(kind, 0) + 1 > room:  # restricted pools full (a small world): the whole inventory
            firsts, seconds = PARTS[first], PARTS[second]
        return self._draw(kind, len(firsts) * len(seconds),
                          lambda: f"{self.rng.choice(firsts)} {self.rng.choice(seconds)}")
