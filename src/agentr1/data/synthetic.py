"""The contamination-free synthetic multi-hop dataset (the embedded "nano" default).

``generate_world(cfg, seed)`` builds the world (:mod:`agentr1.data.world`: invented entities with
names from :mod:`agentr1.data.names`, typed relations, one passage per entity) and samples the
questions of every split (:mod:`agentr1.data.questions`), and returns them in the unified schema.

Guarantees (all tested):
  * deterministic from ``seed`` (only seeded ``random.Random`` instances; no set/dict iteration
    over strings, so ``PYTHONHASHSEED`` does not matter);
  * the entities of train/dev/test/ood are disjoint; the corpus holds them all, so dev/test/ood
    questions are about entities no training question mentions;
  * train/dev/test have exactly ``questions[split]`` questions split by ``types`` (largest
    remainder rounding; train first sets aside ``round(train_chains * n)`` 3-hop chains of its
    own templates), ``round(yes_no_fraction * comparisons)`` of the comparisons are yes/no;
    ood has exactly ``questions.ood`` chain questions split evenly over ``ood_hops``;
  * answers are stated in the last supporting passage, each supporting passage names the next
    one's entity, and no answer occurs in its question (comparison excepted);
  * no question text and no (template, answer) pair is shared across splits (yes/no exempt,
    see :mod:`agentr1.data.questions`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentr1.config import SPLITS, SyntheticConfig, ToolQuestionsConfig
from agentr1.data import toolquestions
from agentr1.data.questions import (
    IN_DOMAIN_TYPES,
    PATH_TEMPLATES,
    TRAIN_CHAIN_TEMPLATES,
    Registry,
    SynQuestion,
    TooSmall,
    sample_comparisons,
    sample_path_questions,
)
from agentr1.data.schema import Dataset
from agentr1.data.world import World, build_world, corpus_rows

# Evaluation splits first: train (the largest) absorbs the re-draws of the split-hygiene rules.
SAMPLING_ORDER = ("ood", "test", "dev", "train")


def allocate(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` into integer parts proportional to ``weights`` (largest remainder, ties
    to the earlier entry); the parts always sum to ``total``."""
    wsum = sum(weights)
    if total == 0 or wsum == 0:
        return [0] * len(weights)
    raw = [total * w / wsum for w in weights]
    parts = [int(r) for r in raw]
    by_remainder = sorted(range(len(raw)), key=lambda i: (-(raw[i] - parts[i]), i))
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


def type_counts(cfg: SyntheticConfig, split: str, n: int | None = None) -> dict[str, int]:
    """Questions per type for one split of ``n`` questions (default ``questions[split]``; ood: per
    ``chain-<hops>``; train: ``train_chain`` for its 3-hop chains, ``round(train_chains * n)``,
    then the in-domain types)."""
    n = getattr(cfg.questions, split) if n is None else n
    if split == "ood":
        hops = sorted(set(cfg.ood_hops))
        return {f"chain-{h}": c for h, c in zip(hops, allocate(n, [1.0] * len(hops)))}
    chains = round(cfg.train_chains * n) if split == "train" else 0
    weights = [getattr(cfg.types, t) for t in IN_DOMAIN_TYPES]
    counts = dict(zip(IN_DOMAIN_TYPES, allocate(n - chains, weights)))
    return {**counts, "train_chain": chains} if chains else counts


def split_questions(
    w: World, cfg: SyntheticConfig, split: str, rng: random.Random, reg: Registry, counts: dict[str, int] | None = None
) -> list[SynQuestion]:
    """The questions of ``split`` of ``w``, ``counts`` per type (default :func:`type_counts`);
    :class:`TooSmall` when the world cannot supply them."""
    out: list[SynQuestion] = []
    for kind, count in (type_counts(cfg, split) if counts is None else counts).items():
        if count == 0:
            continue
        if kind == "comparison":
            out += sample_comparisons(w, split, count, cfg.yes_no_fraction, rng, reg)
            continue
        if kind.startswith("chain-"):
            hops = int(kind.split("-")[1])
            templates = [t for t in PATH_TEMPLATES if t.qtype == "chain" and t.hops == hops]
        elif kind == "train_chain":
            templates = list(TRAIN_CHAIN_TEMPLATES)
        else:
            templates = [t for t in PATH_TEMPLATES if t.qtype == kind]
        out += sample_path_questions(w, split, templates, count, rng, reg)
    return out


def generate(
    cfg: SyntheticConfig, seed: int, tool_questions: ToolQuestionsConfig | None = None
) -> tuple[World, dict[str, list[SynQuestion]]]:
    """Build the world and its questions (with template keys); ids assigned, order shuffled.

    ``tool_questions`` (``data.task: tools``) adds each split's arithmetic and multi-tool
    questions (:mod:`agentr1.data.toolquestions`, their own RNG stream) before the split's shuffle;
    without it the draws are exactly those of the multi-hop task."""
    w = build_world(cfg, seed)
    reg = Registry()
    questions: dict[str, list[SynQuestion]] = {}
    for split in SAMPLING_ORDER:
        rng = random.Random(f"{seed}/questions/{split}")
        try:
            qs = split_questions(w, cfg, split, rng, reg)
        except TooSmall as exc:
            raise ValueError(
                f"the synthetic world is too small for data.synthetic.questions.{split}="
                f"{getattr(cfg.questions, split)} with data.synthetic.families.{split}="
                f"{getattr(cfg.families, split)}: could only make {exc}. Raise "
                f"data.synthetic.families.{split} or lower data.synthetic.questions.{split}"
            ) from None
        if tool_questions is not None:
            qs += toolquestions.tool_questions(w, tool_questions, split, seed, reg)
        rng.shuffle(qs)
        for i, q in enumerate(qs):
            q.id, q.split = f"syn-{split}-{i:05d}", split
        questions[split] = qs
    return w, {s: questions[s] for s in SPLITS}


def to_dataset(w: World, questions: dict[str, list[SynQuestion]], cfg: SyntheticConfig, seed: int) -> Dataset:
    """Rows of the unified schema: questions per split and one passage per entity."""
    return Dataset(
        questions={s: [q.to_row() for q in qs] for s, qs in questions.items()},
        corpus=corpus_rows(w, cfg.distractor_sentences, seed),
    )


def generate_world(cfg: SyntheticConfig, seed: int) -> Dataset:
    """The synthetic dataset in the unified schema: questions per split and the whole corpus."""
    w, questions = generate(cfg, seed)
    return to_dataset(w, questions, cfg, seed)


def world_stats(w: World) -> dict[str, dict[str, int]]:
    """Entity counts per split and kind (for the manifest and the closing report)."""
    stats: dict[str, dict[str, int]] = {}
    for e in w.entities:
        per = stats.setdefault(e.split, {})
        per[e.kind] = per.get(e.kind, 0) + 1
    return {s: dict(sorted(stats[s].items())) for s in SPLITS if s in stats}
