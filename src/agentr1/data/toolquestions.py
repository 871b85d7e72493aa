"""Calculator questions of ``data.task: tools``: arithmetic word problems and multi-tool questions.

Both kinds carry an ``expression`` (the arithmetic whose value is the answer, written with the
numbers the agent reads) and are added to every split of the synthetic world
(:func:`agentr1.data.synthetic.generate` with ``tool_questions``), drawn from their own RNG
stream ``"<seed>/tool_questions/<split>"`` after the multi-hop questions, so the world and the
multi-hop questions are the draws of ``data.task: multihop``.

* ``arithmetic`` (hops 0, no supporting passage): a story about a person of the split, starting
  from one amount and changed by ``operations`` steps (``+ - * /``), each a fresh number; the
  question asks for the final amount. Operands of ``+``/``-``/the start have ``digits`` digits;
  ``*`` multiplies by 2-12, ``/`` divides by a divisor in 2-12 of the current amount (``keeps one
  of n equal boxes``), each at most once per problem; ``-`` never empties the amount, and no amount exceeds :data:`MAX_AMOUNT`,
  so the answer is a positive integer. ``expression`` applies the steps left to right
  (``(1234 + 567) * 3``); template key ``arithmetic/<k>ops``.
* ``multi_tool`` (hops 2, two supporting passages): a year difference between two facts of the
  world that no single passage states - the years of an entity and of the entity it links to
  (``multi_tool/founder_age``: "How many years after the birth of its founder was X founded?",
  ``director_age``, ``producer_age``) or of two people (``multi_tool/birth_gap``: "How many
  years apart were A and B born?"). The agent must search both entities (each passage states its
  year), then calculate ``later - earlier``; the answer is positive.

Split hygiene: question texts are unique over the dataset (the shared question
:class:`~agentr1.data.questions.Registry`); the (template, answer) rule of the multi-hop
questions does not apply (a computed number is not a fact to memorise, and the few distinct
year gaps would starve the later-sampled splits). No answer occurs in its question.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from agentr1.config import ToolQuestionsConfig
from agentr1.data.questions import Registry, SynQuestion, TooSmall, _leaks
from agentr1.data.world import Entity, World

ARITHMETIC, MULTI_TOOL = "arithmetic", "multi_tool"
MAX_AMOUNT = 10**9
FACTORS = range(2, 13)
_UNITS = (
    "apples",
    "coins",
    "books",
    "stamps",
    "bricks",
    "tickets",
    "bottles",
    "marbles",
    "seeds",
    "nails",
    "shells",
    "candles",
)
_STEPS: dict[str, tuple[str, ...]] = {
    "+": ("{S} then gets {n} more {unit}.", "Later {s} buys another {n} {unit}.", "A friend gives {o} {n} {unit}."),
    "-": ("{S} then gives away {n} {unit}.", "Later {s} sells {n} {unit}.", "{S} loses {n} {unit}."),
    "*": ("{S} then ends up with {n} times as many {unit}.", "Later {p} stock of {unit} grows {n} times larger."),
    "/": (
        "{S} then splits the {unit} into {n} equal boxes and keeps one box.",
        "Later {s} shares the {unit} equally among {n} people, {o}self included, and keeps {p} share.",
    ),
}


@dataclass(frozen=True)
class YearPath:
    """``anchor.attrs[year] - target.attrs[target_year]`` with target = ``w.target(anchor, rel)``."""

    key: str
    anchor: str
    year: str
    rel: str
    target_year: str
    text: str  # {x} = anchor name


YEAR_PATHS = (
    YearPath(
        "multi_tool/founder_age",
        "company",
        "founded_year",
        "founded_by",
        "birth_year",
        "How many years after the birth of its founder was {x} founded?",
    ),
    YearPath(
        "multi_tool/director_age",
        "film",
        "release_year",
        "directed_by",
        "birth_year",
        "How many years after the birth of its director was {x} released?",
    ),
    YearPath(
        "multi_tool/producer_age",
        "film",
        "release_year",
        "produced_by",
        "founded_year",
        "How many years after the founding of the company that produced {x} was {x} released?",
    ),
)
BIRTH_GAP_KEY = "multi_tool/birth_gap"
BIRTH_GAP_TEXT = "How many years apart were {a} and {b} born?"


def _admit(q: SynQuestion, reg: Registry, *also: str) -> bool:
    """Text-only admission (module docstring): new text (and none of ``also``), no leaked answer."""
    return q.question not in reg.texts and not any(t in reg.texts for t in also) and not _leaks(q.question, q.answers)


# ------------------------------------------------------------------------------------ arithmetic
def _pronouns(person: Entity) -> dict[str, str]:
    male = person.attrs.get("gender") == "male"
    return {
        "S": "He" if male else "She",
        "s": "he" if male else "she",
        "o": "him" if male else "her",
        "p": "his" if male else "her",
    }


def _operand(rng: random.Random, cfg: ToolQuestionsConfig) -> int:
    d = rng.randint(cfg.digits.min, cfg.digits.max)
    return rng.randint(10 ** (d - 1), 10**d - 1)


def _step(total: int, used: set[str], rng: random.Random, cfg: ToolQuestionsConfig) -> tuple[str, int]:
    """One feasible operation on ``total`` and its operand (module docstring's bounds), uniform
    over the feasible ones; ``*`` and ``/`` at most once per problem (``used``)."""
    n = _operand(rng, cfg)
    options = [("+", n)] if total + n <= MAX_AMOUNT else []
    if total > 1:
        options.append(("-", min(n, rng.randint(1, total - 1))))
    factor = rng.choice(FACTORS)
    if "*" not in used and total * factor <= MAX_AMOUNT:
        options.append(("*", factor))
    divisors = [k for k in FACTORS if total % k == 0]
    if "/" not in used and divisors:
        options.append(("/", rng.choice(divisors)))
    return rng.choice(options)


def _apply(total: int, op: str, n: int) -> int:
    return {"+": total + n, "-": total - n, "*": total * n, "/": total // n}[op]


def arithmetic_problem(person: Entity, n_ops: int, rng: random.Random, cfg: ToolQuestionsConfig) -> SynQuestion:
    """One word problem about ``person`` with ``n_ops`` operations (module docstring)."""
    unit = rng.choice(_UNITS)
    words = _pronouns(person)
    total = _operand(rng, cfg)
    sentences = [f"{person.name} has {total} {unit}."]
    expr, low = str(total), False  # low: the expression's top level is a sum (so * and / need parentheses)
    used: set[str] = set()
    for _ in range(n_ops):
        op, n = _step(total, used, rng, cfg)
        used.add(op)
        sentences.append(rng.choice(_STEPS[op]).format(n=n, unit=unit, **words))
        if op in "+-":
            expr, low = f"{expr} {op} {n}", True
        else:
            expr, low = (f"({expr}) {op} {n}" if low else f"{expr} {op} {n}"), False
        total = _apply(total, op, n)
    sentences.append(f"How many {unit} does {person.name} have now?")
    return SynQuestion(" ".join(sentences), [str(total)], ARITHMETIC, 0, [], f"arithmetic/{n_ops}ops", expression=expr)


def sample_arithmetic(
    w: World, split: str, n: int, cfg: ToolQuestionsConfig, rng: random.Random, reg: Registry
) -> list[SynQuestion]:
    """``n`` arithmetic problems about the split's people, operation counts uniform in
    ``cfg.operations``."""
    people = w.of(split, "person")
    out: list[SynQuestion] = []
    for _ in range(50 * n + 100 if people else 0):
        if len(out) == n:
            break
        q = arithmetic_problem(rng.choice(people), rng.randint(cfg.operations.min, cfg.operations.max), rng, cfg)
        if _admit(q, reg):
            reg.texts.add(q.question)
            out.append(q)
    if len(out) < n:
        raise TooSmall(f"{len(out)} of {n} arithmetic questions")
    return out


# ------------------------------------------------------------------------------------ multi-tool
def year_question(w: World, t: YearPath, anchor: Entity) -> SynQuestion | None:
    """``t`` on ``anchor``; None when the link is missing or the difference is not positive."""
    target = w.target(anchor, t.rel)
    if target is None:
        return None
    later, earlier = anchor.attrs[t.year], target.attrs[t.target_year]
    if later <= earlier:
        return None
    return SynQuestion(
        t.text.format(x=anchor.name),
        [str(later - earlier)],
        MULTI_TOOL,
        2,
        [anchor, target],
        t.key,
        expression=f"{later} - {earlier}",
    )


def birth_gap_question(a: Entity, b: Entity) -> SynQuestion | None:
    """The birth-year gap of two people; None when they were born in the same year."""
    ya, yb = a.attrs["birth_year"], b.attrs["birth_year"]
    if ya == yb:
        return None
    return SynQuestion(
        BIRTH_GAP_TEXT.format(a=a.name, b=b.name),
        [str(abs(ya - yb))],
        MULTI_TOOL,
        2,
        [a, b],
        BIRTH_GAP_KEY,
        expression=f"{max(ya, yb)} - {min(ya, yb)}",
    )


def _year_stream(w: World, split: str, t: YearPath, rng: random.Random, reg: Registry) -> Iterator[SynQuestion]:
    pool = w.of(split, t.anchor)
    rng.shuffle(pool)
    for anchor in pool:
        q = year_question(w, t, anchor)
        if q is not None and _admit(q, reg):
            yield q


def _gap_stream(w: World, split: str, n: int, rng: random.Random, reg: Registry) -> Iterator[SynQuestion]:
    people = w.of(split, "person")
    for _ in range(40 * n + 200 if len(people) >= 2 else 0):
        a, b = rng.sample(people, 2)
        q = birth_gap_question(a, b)
        if q is not None and _admit(q, reg, BIRTH_GAP_TEXT.format(a=b.name, b=a.name)):
            yield q


def sample_multi_tool(w: World, split: str, n: int, rng: random.Random, reg: Registry) -> list[SynQuestion]:
    """``n`` multi-tool questions drawn round-robin over the templates (balanced until one runs out)."""
    streams = {t.key: _year_stream(w, split, t, rng, reg) for t in YEAR_PATHS}
    streams[BIRTH_GAP_KEY] = _gap_stream(w, split, n, rng, reg)
    live = list(streams)
    rng.shuffle(live)
    out: list[SynQuestion] = []
    while len(out) < n:
        if not live:
            raise TooSmall(f"{len(out)} of {n} multi_tool questions")
        key = live[len(out) % len(live)]
        q = next(streams[key], None)
        if q is None:
            live.remove(key)
            continue
        reg.texts.add(q.question)
        out.append(q)
    return out


def tool_questions(w: World, cfg: ToolQuestionsConfig, split: str, seed: int, reg: Registry) -> list[SynQuestion]:
    """The split's arithmetic then multi-tool questions (counts ``cfg.<kind>.<split>``), from the
    RNG stream ``"<seed>/tool_questions/<split>"``. A world too small for the counts is a
    ``ValueError`` naming the params to change."""
    rng = random.Random(f"{seed}/tool_questions/{split}")
    n_arith, n_multi = getattr(cfg.arithmetic, split), getattr(cfg.multi_tool, split)
    try:
        return sample_arithmetic(w, split, n_arith, cfg, rng, reg) + sample_multi_tool(w, split, n_multi, rng, reg)
    except TooSmall as exc:
        raise ValueError(
            f"the synthetic world is too small for data.tool_questions.arithmetic.{split}={n_arith} / "
            f"multi_tool.{split}={n_multi}: could only make {exc}. Raise data.synthetic.families.{split} or lower "
            "those counts"
        ) from None
