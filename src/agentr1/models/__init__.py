"""agentr1.models: policy loading (scratch / HF / GGUF-in-a-package) and checkpoints.

``save_checkpoint`` here is :func:`agentr1.models.saving.save_checkpoint` (bytes and modes that depend
only on the weights and the tokenizer), what the stages save their policies with.
"""

from agentr1.models.loading import (
    downloaded_checkpoint,
    find_gguf_file,
    gguf_to_checkpoint,
    is_checkpoint,
    load_checkpoint,
    load_policy,
    resolve_checkpoint,
    torch_dtype,
    write_reference,
)
from agentr1.models.saving import save_checkpoint
from agentr1.models.scratch import CHATML_TEMPLATE, TOOL_TAGS, build_scratch_model, train_tokenizer

__all__ = [
    "CHATML_TEMPLATE",
    "TOOL_TAGS",
    "build_scratch_model",
    "downloaded_checkpoint",
    "find_gguf_file",
    "gguf_to_checkpoint",
    "is_checkpoint",
    "load_checkpoint",
    "load_policy",
    "resolve_checkpoint",
    "save_checkpoint",
    "write_reference",
    "torch_dtype",
    "train_tokenizer",
]
