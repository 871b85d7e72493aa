"""``pretrain``: the base policy and its reading gate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from agentr1.config.base import _Section


class ReadingGateConfig(_Section):
    """The reading gate of the base policy (stage ``pretrain``, ``data/pretrain/metrics.json``):
    greedy reading accuracy on drills over the dataset's entities of ``splits`` (never in any
    pretraining text), ``per_split`` drills per split and kind, drawn evenly over the relations.
    *One-hop*: the asked entity's passage alone; *multi-passage*: it among ``passages`` passages
    of the same split. ``one_hop``/``multi``: the accuracy each must reach, overall and for every
    relation (``passed`` records it; the stage does not fail on it). ``every``: also measure on
    the first split every N pretraining steps (the gate curve; 0 = only at the end)."""

    splits: list[Literal["dev", "test", "ood"]] = Field(default_factory=lambda: ["dev", "test"], min_length=1)
    per_split: int = Field(240, ge=1)
    passages: int = Field(3, ge=2, le=8)
    one_hop: float = Field(0.95, ge=0, le=1)
    multi: float = Field(0.90, ge=0, le=1)
    every: int = Field(1000, ge=0)


class PretrainConfig(_Section):
    """Stage ``pretrain``: the base policy, the nano world's "pretrained LLM" that reads and copies
    but has never seen a tool-use episode (``agentr1.stages.pretrain``).

    ``model.kind: scratch``: a tokenizer (``model.scratch.vocab_size`` BPE tokens, every name part
    of the inventory one more token) and a Llama model trained on reading drills
    (``agentr1.data.drills``) over a stream of fresh worlds of ``world_families`` clusters each
    (a new world every ``docs_per_world`` documents; no dataset entity): each document holds a
    number of passages drawn from ``passages`` and ``questions`` questions about them with their
    answers, the first question before the passages in a share ``question_first`` of them (as in
    an agent's context, where the question precedes what its searches return). ``steps`` AdamW
    steps of ``batch_size`` rows of ``context`` tokens, each packed with consecutive documents
    (reading at any position, after any text: what an agent's long context needs; 0 = one
    document per row), lr warmed up over ``warmup_steps`` then cosine-decayed; the loss on
    ``loss_on``: ``answers`` (the answers' tokens) or ``text`` (every token but the first mention
    of each name), the answers' tokens weighted ``answer_weight`` (``agentr1.lm.pretrain``). The
    tokenizer is trained on ``tokenizer_docs`` documents of its own fresh world. ``hf``/``gguf``:
    the pretrained model as downloaded is the base policy (no training). Either way the gate
    (:class:`ReadingGateConfig`) is measured and the base saved to ``out_dir`` (the
    ``base_tool_call`` baseline; the sft stage starts from it), metrics and curves to
    ``report_dir``. ``num_threads``: torch CPU threads (null = torch's default)."""

    steps: int = Field(6000, ge=1)
    batch_size: int = Field(4, ge=1)
    context: int = Field(1024, ge=0)
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(100, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    loss_on: Literal["answers", "text"] = "text"
    answer_weight: float = Field(1.0, ge=1)
    world_families: int = Field(100, ge=1, le=400)
    docs_per_world: int = Field(2000, ge=1)
    passages: list[Annotated[int, Field(ge=1, le=8)]] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    questions: int = Field(4, ge=1)
    question_first: float = Field(0.5, ge=0, le=1)
    tokenizer_docs: int = Field(3000, ge=1)
    gate: ReadingGateConfig = ReadingGateConfig()
    out_dir: str = "data/models/init"
    report_dir: str = "data/pretrain"
    num_threads: int | None = Field(2, ge=1)
    log_every: int = Field(100, ge=1)
