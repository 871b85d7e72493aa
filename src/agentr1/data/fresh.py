"""Fresh worlds: multi-hop questions over entities that no dataset split, no demonstration and no
earlier world holds, in unlimited supply (the RL question source ``train.questions: fresh``).

World ``k`` of a stream seeded ``seed`` is :func:`agentr1.data.world.fresh_world` with
``families`` new clusters drawn from ``"<seed>/fresh/<k>"``; its entity names avoid ``taken``
(every title of the dataset's corpus, so a fresh entity never shares a name with a train, dev or
test entity). Its questions are sampled exactly as the train split's are
(:func:`agentr1.data.synthetic.split_questions`): ``questions`` of them, split over the types by
``data.synthetic.types`` after ``round(train_chains * questions)`` 3-hop chains, the same
templates, the same hygiene rules within the world. Its passages (one per entity, ids
``fresh<k>-p000123`` so they never collide with the dataset's) are what the search tool must find.

Because every world is new, an answer can only be earned by reading the passages retrieved in
the episode: nothing about a fresh entity can be remembered from SFT, from pretraining or from
an earlier RL step (the memorization that a fixed question set allows, measured in
``bench/RESULTS.md`` section 14).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentr1.config import SyntheticConfig
from agentr1.data.questions import Registry, TooSmall
from agentr1.data.synthetic import split_questions, type_counts
from agentr1.data.world import corpus_rows, fresh_world

SPLIT = "fresh"  # the split label of a fresh world's entities and questions


@dataclass(frozen=True)
class FreshWorld:
    """World ``index`` of a stream: its passages (``id, title, text``) and questions (the
    unified question schema, ``split`` = :data:`SPLIT`)."""

    index: int
    corpus: list[dict[str, Any]]
    questions: list[dict[str, Any]]


def make_world(
    cfg: SyntheticConfig,
    index: int,
    families: int,
    questions: int,
    seed: int | str,
    taken: Iterable[str] = (),
    param: str = "train.fresh",
) -> FreshWorld:
    """World ``index`` of the stream seeded ``seed`` (module docstring; the RL stream is the run's
    seed, the SFT demonstrations' ``"<seed>/sft"``); deterministic in its arguments.
    :class:`ValueError` naming the params (``<param>.families`` / ``.questions``: ``train.fresh``
    or ``sft.fresh``) when the name inventory cannot supply ``families`` clusters or they cannot
    supply ``questions`` questions."""
    key = f"{seed}/fresh/{index}"
    try:
        w = fresh_world(families, key, taken=taken, split=SPLIT, capacity_hint=f"{param}.families")
    except ValueError as exc:  # the inventory's message speaks of the dataset's families, summed over splits
        if not str(exc).startswith("the synthetic name inventory"):
            raise
        room = str(exc).split(", and this world")[0]
        raise ValueError(
            f"{param}.families={families}: one fresh world of that many clusters needs more names than "
            f"{room} (the dataset's own names excluded): lower {param}.families"
        ) from None
    prefix = f"fresh{index}-"
    for e in w.entities:
        e.pid = prefix + e.pid
    rng = random.Random(f"{key}/questions")
    try:
        qs = split_questions(w, cfg, SPLIT, rng, Registry(), type_counts(cfg, "train", questions))
    except TooSmall as exc:
        raise ValueError(
            f"a fresh world of {param}.families={families} clusters cannot supply "
            f"{param}.questions={questions} questions (only {exc}): raise families or lower "
            "questions"
        ) from None
    rng.shuffle(qs)
    for i, q in enumerate(qs):
        q.id, q.split = f"{prefix}q{i:05d}", SPLIT
    return FreshWorld(index, corpus_rows(w, cfg.distractor_sentences, key), [q.to_row() for q in qs])
