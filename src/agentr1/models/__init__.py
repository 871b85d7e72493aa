"""agentr1.models: policy loading (scratch / HF / GGUF-in-a-package) and checkpoints."""

from agentr1.models.loading import (
    find_gguf_file,
    gguf_to_checkpoint,
    is_checkpoint,
    load_checkpoint,
    load_policy,
    save_checkpoint,
    torch_dtype,
)
from agentr1.models.scratch import CHATML_TEMPLATE, TOOL_TAGS, build_scratch_model, train_tokenizer

__all__ = [
    "CHATML_TEMPLATE",
    "TOOL_TAGS",
    "build_scratch_model",
    "find_gguf_file",
    "gguf_to_checkpoint",
    "is_checkpoint",
    "load_checkpoint",
    "load_policy",
    "save_checkpoint",
    "torch_dtype",
    "train_tokenizer",
]
