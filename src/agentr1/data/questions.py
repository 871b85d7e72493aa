"""Multi-hop questions over the synthetic world.

One module of more than 500 lines on purpose: half of it is the template tables, and their keys are what the
split hygiene below is enforced on: path and comparison sampling both admit each question through one
:class:`Registry` (question texts, (template key, answer) pairs per split); split by question kind, those rules
would be enforced in several files sharing that registry.

Question kinds (``type``):
    bridge         HotpotQA-style, 2 hops: "Where was the director of <film> born?"
    comparison     HotpotQA-style, 2 hops over two entities named in the question: "Which film was
                   released first, <A> or <B>?" (answer = one of the names) and a yes/no variant
                   "Were <A> and <B> directed by the same person?"
    compositional  2Wiki-style relation composition, 2 hops: "Who is the spouse of the founder of <c>?"
    inference      2Wiki-style kinship inference, 2 hops: "Who is the paternal grandfather of <p>?"
    chain          MuSiQue-like 3-4 hop chains: the out-of-domain ``ood`` split's templates, and 3-hop
                   templates of their own in the train split (``data.synthetic.train_chains``), so
                   training reaches past 2 hops without seeing an ood template.

Every non-comparison question follows a relation path from an anchor entity named in the question;
``supporting_ids`` are the passages of the path's entities in reading order: passage ``i`` names
the entity of passage ``i+1`` and the last one states the answer. Comparison questions list the
two compared entities' passages (each states the compared fact).

Split hygiene, enforced while sampling:
  * a question text occurs once in the whole dataset;
  * a (template, answer) pair belongs to one split only. Entity answers are split-specific by
    construction, so this bites on year answers, which are re-drawn. yes/no answers are exempt
    (every yes/no template necessarily has both answers in every split);
  * no gold answer occurs in its question (comparison excepted: the answer is one of the names).
Evaluation splits are sampled before train, so train absorbs every re-draw.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agentr1.data.world import Entity, World

IN_DOMAIN_TYPES = ("bridge", "comparison", "compositional", "inference")


@dataclass(frozen=True)
class PathTemplate:
    """A question that follows ``path`` from an anchor entity of kind ``anchor``.

    Every relation but the last moves to the next supporting entity; the last one gives the answer:
    a relation (answer = target entity's name and aliases) or ``@attr`` (answer = that attribute).
    """

    key: str
    qtype: str
    anchor: str
    path: tuple[str, ...]
    text: str  # str.format template with {x} = anchor name

    @property
    def hops(self) -> int:
        return len(self.path)


@dataclass(frozen=True)
class WhichTemplate:
    """Comparison "which of A or B has the smaller/larger ``attr``"; answer = that entity's name."""

    key: str
    anchor: str
    attr: str
    pick: str  # "min" | "max"
    text: str  # {a}, {b}


@dataclass(frozen=True)
class SameTemplate:
    """Yes/no comparison "do A and B have the same ``rel`` target"."""

    key: str
    anchor: str
    rel: str
    text: str  # {a}, {b}


PATH_TEMPLATES: tuple[PathTemplate, ...] = (
    # bridge (HotpotQA)
    PathTemplate(
        "bridge/director_birthplace",
        "bridge",
        "film",
        ("directed_by", "born_in"),
        "Where was the director of {x} born?",
    ),
    PathTemplate(
        "bridge/founder_birthplace",
        "bridge",
        "company",
        ("founded_by", "born_in"),
        "Where was the founder of {x} born?",
    ),
    PathTemplate(
        "bridge/person_birth_country", "bridge", "person", ("born_in", "located_in"), "In which country was {x} born?"
    ),
    PathTemplate(
        "bridge/company_country",
        "bridge",
        "company",
        ("headquartered_in", "located_in"),
        "In which country is {x} headquartered?",
    ),
    PathTemplate(
        "bridge/director_birth_year",
        "bridge",
        "film",
        ("directed_by", "@birth_year"),
        "In which year was the director of {x} born?",
    ),
    PathTemplate(
        "bridge/producer_founder",
        "bridge",
        "film",
        ("produced_by", "founded_by"),
        "Who founded the company that produced {x}?",
    ),
    # compositional (2WikiMultihopQA)
    PathTemplate(
        "compositional/founder_spouse",
        "compositional",
        "company",
        ("founded_by", "spouse"),
        "Who is the spouse of the founder of {x}?",
    ),
    PathTemplate(
        "compositional/director_spouse",
        "compositional",
        "film",
        ("directed_by", "spouse"),
        "Who is the spouse of the director of {x}?",
    ),
    PathTemplate(
        "compositional/director_father",
        "compositional",
        "film",
        ("directed_by", "father"),
        "Who is the father of the director of {x}?",
    ),
    PathTemplate(
        "compositional/director_mother",
        "compositional",
        "film",
        ("directed_by", "mother"),
        "Who is the mother of the director of {x}?",
    ),
    PathTemplate(
        "compositional/founder_father",
        "compositional",
        "company",
        ("founded_by", "father"),
        "Who is the father of the founder of {x}?",
    ),
    PathTemplate(
        "compositional/producer_headquarters",
        "compositional",
        "film",
        ("produced_by", "headquartered_in"),
        "Where is the company that produced {x} headquartered?",
    ),
    PathTemplate(
        "compositional/producer_founded_year",
        "compositional",
        "film",
        ("produced_by", "@founded_year"),
        "When was the company that produced {x} founded?",
    ),
    # inference (2WikiMultihopQA)
    PathTemplate(
        "inference/paternal_grandfather",
        "inference",
        "person",
        ("father", "father"),
        "Who is the paternal grandfather of {x}?",
    ),
    PathTemplate(
        "inference/paternal_grandmother",
        "inference",
        "person",
        ("father", "mother"),
        "Who is the paternal grandmother of {x}?",
    ),
    PathTemplate(
        "inference/maternal_grandfather",
        "inference",
        "person",
        ("mother", "father"),
        "Who is the maternal grandfather of {x}?",
    ),
    PathTemplate(
        "inference/maternal_grandmother",
        "inference",
        "person",
        ("mother", "mother"),
        "Who is {x}'s maternal grandmother?",
    ),
    PathTemplate(
        "inference/father_in_law", "inference", "person", ("spouse", "father"), "Who is the father-in-law of {x}?"
    ),
    PathTemplate("inference/mother_in_law", "inference", "person", ("spouse", "mother"), "Who is {x}'s mother-in-law?"),
    # chain (MuSiQue-like, out-of-domain), 3 hops
    PathTemplate(
        "chain/director_birth_country",
        "chain",
        "film",
        ("directed_by", "born_in", "located_in"),
        "In which country is the city where the director of {x} was born?",
    ),
    PathTemplate(
        "chain/founder_birth_country",
        "chain",
        "company",
        ("founded_by", "born_in", "located_in"),
        "In which country is the city where the founder of {x} was born?",
    ),
    PathTemplate(
        "chain/director_spouse_birthplace",
        "chain",
        "film",
        ("directed_by", "spouse", "born_in"),
        "Where was the spouse of the director of {x} born?",
    ),
    PathTemplate(
        "chain/producer_founder_father",
        "chain",
        "film",
        ("produced_by", "founded_by", "father"),
        "Who is the father of the person who founded the company that produced {x}?",
    ),
    PathTemplate(
        "chain/producer_country",
        "chain",
        "film",
        ("produced_by", "headquartered_in", "located_in"),
        "In which country is the headquarters of the company that produced {x}?",
    ),
    PathTemplate(
        "chain/grandfather_birthplace",
        "chain",
        "person",
        ("father", "father", "born_in"),
        "Where was the paternal grandfather of {x} born?",
    ),
    # chain, 4 hops
    PathTemplate(
        "chain/director_spouse_country",
        "chain",
        "film",
        ("directed_by", "spouse", "born_in", "located_in"),
        "In which country is the birthplace of the spouse of the director of {x}?",
    ),
    PathTemplate(
        "chain/producer_founder_country",
        "chain",
        "film",
        ("produced_by", "founded_by", "born_in", "located_in"),
        "In which country was the founder of the company that produced {x} born?",
    ),
    PathTemplate(
        "chain/grandfather_country",
        "chain",
        "person",
        ("mother", "father", "born_in", "located_in"),
        "In which country was the maternal grandfather of {x} born?",
    ),
    PathTemplate(
        "chain/producer_founder_spouse_birthplace",
        "chain",
        "film",
        ("produced_by", "founded_by", "spouse", "born_in"),
        "Where was the spouse of the founder of the company that produced {x} born?",
    ),
)

# 3-hop chains of the train split only: none is an ood template (their relation paths differ)
TRAIN_CHAIN_TEMPLATES: tuple[PathTemplate, ...] = (
    PathTemplate(
        "train_chain/director_father_birthplace",
        "chain",
        "film",
        ("directed_by", "father", "born_in"),
        "Where was the father of the director of {x} born?",
    ),
    PathTemplate(
        "train_chain/director_mother_birthplace",
        "chain",
        "film",
        ("directed_by", "mother", "born_in"),
        "Where was the mother of the director of {x} born?",
    ),
    PathTemplate(
        "train_chain/founder_spouse_birthplace",
        "chain",
        "company",
        ("founded_by", "spouse", "born_in"),
        "Where was the spouse of the founder of {x} born?",
    ),
    PathTemplate(
        "train_chain/producer_founder_birthplace",
        "chain",
        "film",
        ("produced_by", "founded_by", "born_in"),
        "Where was the founder of the company that produced {x} born?",
    ),
    PathTemplate(
        "train_chain/grandmother_birthplace",
        "chain",
        "person",
        ("father", "mother", "born_in"),
        "Where was the paternal grandmother of {x} born?",
    ),
    PathTemplate(
        "train_chain/founder_mother_birth_year",
        "chain",
        "company",
        ("founded_by", "mother", "@birth_year"),
        "In which year was the mother of the founder of {x} born?",
    ),
)

WHICH_TEMPLATES: tuple[WhichTemplate, ...] = (
    WhichTemplate("comparison/film_first", "film", "release_year", "min", "Which film was released first, {a} or {b}?"),
    WhichTemplate(
        "comparison/film_latest", "film", "release_year", "max", "Which film came out more recently, {a} or {b}?"
    ),
    WhichTemplate("comparison/person_older", "person", "birth_year", "min", "Who was born first, {a} or {b}?"),
    WhichTemplate("comparison/person_younger", "person", "birth_year", "max", "Who is younger, {a} or {b}?"),
    WhichTemplate(
        "comparison/company_older", "company", "founded_year", "min", "Which company was founded earlier, {a} or {b}?"
    ),
)

SAME_TEMPLATES: tuple[SameTemplate, ...] = (
    SameTemplate("comparison/same_director", "film", "directed_by", "Were {a} and {b} directed by the same person?"),
    SameTemplate("comparison/same_birthplace", "person", "born_in", "Were {a} and {b} born in the same city?"),
    SameTemplate(
        "comparison/same_headquarters", "company", "headquartered_in", "Are {a} and {b} headquartered in the same city?"
    ),
    SameTemplate("comparison/same_country", "city", "located_in", "Are {a} and {b} in the same country?"),
)


@dataclass
class SynQuestion:
    """A generated question plus the template key it came from (kept for split-hygiene checks)."""

    question: str
    answers: list[str]
    type: str
    hops: int
    supporting: list[Entity]
    template: str
    id: str = ""
    split: str = ""
    expression: str | None = None  # calculator questions (agentr1.data.toolquestions): value = answers[0]

    def to_row(self) -> dict[str, Any]:
        row = {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "type": self.type,
            "hops": self.hops,
            "supporting_ids": [e.pid for e in self.supporting],
            "source": "synthetic",
            "split": self.split,
        }
        if self.expression is not None:
            row["expression"] = self.expression
        return row


class TooSmall(ValueError):
    """The world of a split cannot supply the requested number of questions of one kind."""


class Registry:
    """Dataset-wide bookkeeping of question texts and (template, answer) pairs per split."""

    def __init__(self) -> None:
        self.texts: set[str] = set()
        self.pairs: dict[tuple[str, str], str] = {}

    def admits(self, q: SynQuestion, split: str) -> bool:
        if q.question in self.texts:
            return False
        if q.answers[0] in ("yes", "no"):
            return True
        owner = self.pairs.get((q.template, q.answers[0].lower()))
        return owner is None or owner == split

    def add(self, q: SynQuestion, split: str) -> None:
        self.texts.add(q.question)
        if q.answers[0] not in ("yes", "no"):
            self.pairs[(q.template, q.answers[0].lower())] = split


def _leaks(question: str, answers: list[str]) -> bool:
    low = question.lower()
    return any(a.lower() in low for a in answers)


def follow(w: World, t: PathTemplate, anchor: Entity) -> SynQuestion | None:
    """Instantiate ``t`` on ``anchor``; None if the path does not exist, loops, or would leak."""
    chain, cur = [anchor], anchor
    for rel in t.path[:-1]:
        nxt = w.target(cur, rel)
        if nxt is None or nxt in chain:
            return None
        chain.append(nxt)
        cur = nxt
    last = t.path[-1]
    if last.startswith("@"):
        answers = [str(cur.attrs[last[1:]])]
    else:
        end = w.target(cur, last)
        if end is None or end in chain:
            return None
        answers = end.answers
    text = t.text.format(x=anchor.name)
    if _leaks(text, answers):
        return None
    return SynQuestion(text, answers, t.qtype, t.hops, chain, t.key)


def sample_path_questions(
    w: World, split: str, templates: list[PathTemplate], n: int, rng: random.Random, reg: Registry
) -> list[SynQuestion]:
    """``n`` questions drawn round-robin over ``templates`` (balanced until one runs out)."""
    anchors: dict[str, list[Entity]] = {}
    for t in templates:
        pool = w.of(split, t.anchor)
        rng.shuffle(pool)
        anchors[t.key] = pool
    live = list(templates)
    rng.shuffle(live)
    out: list[SynQuestion] = []
    i = 0
    while len(out) < n:
        if not live:
            raise TooSmall(f"{len(out)} of {n} {templates[0].qtype} questions")
        t = live[i % len(live)]
        q = None
        while anchors[t.key] and q is None:
            q = follow(w, t, anchors[t.key].pop())
            if q is not None and not reg.admits(q, split):
                q = None
        if q is None:
            live.remove(t)
            continue
        reg.add(q, split)
        out.append(q)
        i += 1
    return out


def _pair_draws(pool: list[Entity], rng: random.Random, budget: int) -> Iterator[tuple[Entity, Entity]]:
    """Up to ``budget`` random ordered pairs of distinct entities (a lazy, resumable stream)."""
    for _ in range(budget if len(pool) >= 2 else 0):
        yield tuple(rng.sample(pool, 2))


def _pair_question(
    t: WhichTemplate | SameTemplate, a: Entity, b: Entity, answer: str, reg: Registry, split: str
) -> SynQuestion | None:
    """The comparison of ``a`` and ``b``, unless that pair was already asked (in either order)."""
    if t.text.format(a=b.name, b=a.name) in reg.texts:
        return None
    q = SynQuestion(t.text.format(a=a.name, b=b.name), [answer], "comparison", 2, [a, b], t.key)
    return q if reg.admits(q, split) else None


def _which(split: str, t: WhichTemplate, reg: Registry, draws: dict[Any, Any]) -> SynQuestion | None:
    for a, b in draws[t.key]:
        ya, yb = a.attrs[t.attr], b.attrs[t.attr]
        if ya == yb:
            continue
        winner = (a if ya < yb else b) if t.pick == "min" else (a if ya > yb else b)
        q = _pair_question(t, a, b, winner.name, reg, split)
        if q is not None:
            return q
    return None


def _same_yes_pairs(w: World, split: str, t: SameTemplate, rng: random.Random) -> list[tuple[Entity, Entity]]:
    """All pairs sharing the ``rel`` target, grouped in creation order, then shuffled."""
    groups: dict[int, list[Entity]] = {}
    for e in w.of(split, t.anchor):
        if t.rel in e.rels:
            groups.setdefault(e.rels[t.rel], []).append(e)
    pairs = [(g[i], g[j]) for g in groups.values() for i in range(len(g)) for j in range(i + 1, len(g))]
    rng.shuffle(pairs)
    return [p if rng.random() < 0.5 else (p[1], p[0]) for p in pairs]


def _same(split: str, t: SameTemplate, want: str, reg: Registry, draws: dict[Any, Any]) -> SynQuestion | None:
    for a, b in draws[(t.key, want)]:
        if t.rel not in a.rels or t.rel not in b.rels:
            continue
        if (a.rels[t.rel] == b.rels[t.rel]) != (want == "yes"):
            continue
        q = _pair_question(t, a, b, want, reg, split)
        if q is not None:
            return q
    return None


def sample_comparisons(
    w: World, split: str, n: int, yes_no_fraction: float, rng: random.Random, reg: Registry
) -> list[SynQuestion]:
    """``n`` comparison questions, ``round(n * yes_no_fraction)`` of them yes/no (half yes)."""
    n_yn = round(n * yes_no_fraction)
    budget = 40 * n + 200
    draws: dict[Any, Any] = {t.key: _pair_draws(w.of(split, t.anchor), rng, budget) for t in WHICH_TEMPLATES}
    for t in SAME_TEMPLATES:
        draws[(t.key, "yes")] = iter(_same_yes_pairs(w, split, t, rng))
        draws[(t.key, "no")] = _pair_draws(w.of(split, t.anchor), rng, budget)
    out: list[SynQuestion] = []
    which = list(WHICH_TEMPLATES)
    rng.shuffle(which)
    while len(out) < n - n_yn:
        if not which:
            raise TooSmall(f"{len(out)} of {n - n_yn} which-comparison questions")
        t = which[len(out) % len(which)]
        q = _which(split, t, reg, draws)
        if q is None:
            which.remove(t)
            continue
        reg.add(q, split)
        out.append(q)
    same = list(SAME_TEMPLATES)
    rng.shuffle(same)
    live = {"yes": list(same), "no": list(same)}
    for k in range(n_yn):
        q = None
        for want in ("yes", "no") if k % 2 == 0 else ("no", "yes"):
            while live[want] and q is None:
                t = live[want][k % len(live[want])]
                q = _same(split, t, want, reg, draws)
                if q is None:
                    live[want].remove(t)
            if q is not None:
                break
        if q is None:
            raise TooSmall(f"{k} of {n_yn} yes/no comparison questions")
        reg.add(q, split)
        out.append(q)
    return out
