"""The scratch policy of the ``pretrain`` stage (``model.kind: scratch``): tokenizer and model.

The tokenizer is trained on ``pretrain.tokenizer_docs`` drill documents of a fresh world (its own
seed, ``"<seed>/tokenizer"``, with no entity of the dataset's world), every name part of the
inventory (:data:`agentr1.data.names.PARTS`) one token and the tool tags added
(:func:`agentr1.models.scratch.train_tokenizer`); the model is a Llama of ``model.scratch``
initialised with ``seed`` (:func:`agentr1.models.scratch.build_scratch_model`).
"""

from __future__ import annotations

import random

from agentr1.data.drills import stream_docs
from agentr1.data.names import PARTS
from agentr1.data.world import fresh_world
from agentr1.models.scratch import TOOL_TAGS, build_scratch_model, train_tokenizer


def scratch_policy(cfg, taken: set[str]):
    """``(model, tokenizer)``: the tokenizer trained on drill documents of a fresh world (its own
    seed), every name part one token, and a freshly initialised model (seed ``cfg.seed``);
    ``taken``: the names the fresh world must avoid (the dataset's entities)."""
    pcfg, syn = cfg.pretrain, cfg.data.synthetic
    world = fresh_world(pcfg.world_families, f"{cfg.seed}/tokenizer", taken=taken)
    docs = stream_docs(world, random.Random(f"{cfg.seed}/tokenizer"), syn.distractor_sentences, pcfg.passages,
                       pcfg.questions, pcfg.question_first)
    texts = [next(docs).text for _ in range(pcfg.tokenizer_docs)]
    parts = sorted({w for pool in PARTS.values() for w in pool})
    tokenizer = train_tokenizer(texts, cfg.model.scratch.vocab_size, TOOL_TAGS, whole_words=parts)
    return build_scratch_model(cfg.model.scratch, tokenizer, seed=cfg.seed), tokenizer
