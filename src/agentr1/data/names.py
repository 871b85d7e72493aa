"""A fixed inventory of invented, pronounceable name parts, and unique names built from it.

Every entity of the synthetic world is named by combining a few parts from this inventory
("Talven Moric", "Orlek Ford", "Sutaro Films", "Zorlia"). The inventory itself does not depend on
the world seed: it is built once from syllables with a constant seed, so it is identical for every
world, and the same first names, surnames and stems recur across entities of all splits. A
word-level tokenizer trained on the corpus therefore has one token per name part, and the parts of
an unseen dev/test entity were already seen in training names (only a country is a single
split-specific word).

The pools are pairwise disjoint, so no part of one kind of name can be mistaken for another kind
(a country never appears inside a city or person name). Capitalised invented words may
occasionally coincide with a real given name; the full combinations are what identify entities,
and those are invented.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

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
    "country": 600,
    "brand": 300,
    "film": 300,
}


def _build_inventory() -> dict[str, tuple[str, ...]]:
    """Build the disjoint word pools deterministically (fixed seed, fixed pool order)."""
    rng = random.Random(INVENTORY_SEED)
    # membership only (pool order comes from the RNG draw order); fixed English parts are reserved
    taken: set[str] = set(CITY_KINDS + COMPANY_KINDS + FILM_NOUNS + COUNTRY_FORMS)
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


class NameAllocator:
    """Draws globally unique entity names from the inventory with a seeded RNG.

    ``capacity_hint`` names the param to change when a kind of name runs out, so the error is
    actionable (the inventory is fixed; only the world size can be lowered).
    """

    MAX_FILL = 0.9  # refuse to fill a name space beyond this (rejection sampling gets slow)

    def __init__(self, rng: random.Random, capacity_hint: str = "data.synthetic.families") -> None:
        self.rng = rng
        self.hint = capacity_hint
        self.used: set[str] = set()
        self._counts: dict[str, int] = {}

    def _draw(self, kind: str, space: int, make: Callable[[], str]) -> str:
        n = self._counts.get(kind, 0)
        if n + 1 > int(space * self.MAX_FILL):
            raise ValueError(
                f"the synthetic name inventory has room for about {int(space * self.MAX_FILL)} {kind} "
                f"names, and this world needs more: lower {self.hint} (summed over all splits)"
            )
        while True:
            name = make()
            if name not in self.used:
                self.used.add(name)
                self._counts[kind] = n + 1
                return name

    def person(self, gender: str, surname: str) -> str:
        """A unique "First Surname" with a first name of the given gender ('male'/'female')."""
        firsts = INVENTORY[gender]
        return self._draw(f"{gender} {surname}", len(firsts), lambda: f"{self.rng.choice(firsts)} {surname}")

    def surnames(self, k: int) -> list[str]:
        """``k`` distinct surnames (surnames recur across families; full names stay unique)."""
        return self.rng.sample(INVENTORY["surname"], k)

    def city(self) -> str:
        return self._pair("city", INVENTORY["city"], CITY_KINDS)

    def company(self) -> str:
        return self._pair("company", INVENTORY["brand"], COMPANY_KINDS)

    def film(self) -> str:
        return self._pair("film", INVENTORY["film"], FILM_NOUNS)

    def country(self) -> str:
        words = INVENTORY["country"]
        return self._draw("country", len(words), lambda: self.rng.choice(words))

    def _pair(self, kind: str, stems: Sequence[str], suffixes: Sequence[str]) -> str:
        return self._draw(
            kind, len(stems) * len(suffixes), lambda: f"{self.rng.choice(stems)} {self.rng.choice(suffixes)}"
        )
