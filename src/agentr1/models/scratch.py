"""A small policy trained from scratch: byte-level BPE tokenizer + Llama-architecture causal LM.

The tokenizer is lossless: byte-level BPE maps every UTF-8 byte to a symbol, so
``decode(encode(text)) == text`` for any string (unicode, newlines, leading spaces).

Whole words (``whole_words``). A small model copies a name from an observation into its next
query far more easily when every part of the name is one token. The synthetic world's names are
built from a fixed inventory of parts, but BPE merges follow frequency, and a rare part (most
country names) would still split into 2-3 pieces. So every word in ``whole_words`` (the sft stage
passes the words of every passage title, i.e. the entity names) is added to the vocabulary as one
token, in its running-text form with a leading space (``" Nukdia"``), and the BPE model runs with
``ignore_merges``: a pre-tokenized word found in the vocabulary is emitted whole, anything else
goes through the learned merges (and, at worst, single bytes) - still lossless.

Special tokens (never split, one id each):

- ``<|pad|>`` (padding) and the ChatML markers ``<|im_start|>`` / ``<|im_end|>`` (``<|im_end|>`` is
  also the EOS), marked *special*;
- the tool-format tags (``<search>``, ``</search>``, ``<information>``, ...), added as ordinary
  (non-special) added tokens so they survive ``skip_special_tokens=True`` decodes.

The model is a plain ``transformers`` ``LlamaForCausalLM``, so checkpoints load with stock
transformers and vLLM.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
CHAT_SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
TOOL_TAGS = (
    "<search>",
    "</search>",
    "<information>",
    "</information>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)

# ChatML, as used by Qwen2.5 and SmolLM2: every message is
# "<|im_start|>{role}\n{content}<|im_end|>\n"; the generation prompt opens an assistant message.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _add_whole_words(tok: Tokenizer, words: Iterable[str]) -> Tokenizer:
    """``tok`` with each word of ``words`` that BPE splits added to the vocabulary as one token
    (leading-space form, module docstring) and ``ignore_merges`` on; new ids follow the largest id."""
    byte_map = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    next_id = 1 + max([*vocab.values(), *(t["id"] for t in data["added_tokens"])])
    for word in sorted({w for w in words if w and not w.isspace()}):
        chunks = byte_map.pre_tokenize_str(" " + word.strip())
        if len(chunks) != 1:  # not one pre-tokenizer word (punctuation, digits after letters): leave it to BPE
            continue
        piece = chunks[0][0]
        if piece not in vocab:
            vocab[piece] = next_id
            next_id += 1
    data["model"]["ignore_merges"] = True
    return Tokenizer.from_str(json.dumps(data))


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    special_tokens: Sequence[str] = TOOL_TAGS,
    min_frequency: int = 2,
    whole_words: Iterable[str] = (),
) -> PreTrainedTokenizerFast:
    """Train a lossless byte-level BPE tokenizer on ``texts``.

    ``special_tokens`` are the tool-format tags (added as single, non-special tokens); the ChatML
    markers and ``<|pad|>`` are always added as special tokens. ``vocab_size`` counts the 256 byte
    symbols, the merges and the added tokens; each word of ``whole_words`` that the merges would
    split gets one more token on top (module docstring). Training is deterministic for the same
    texts and words.
    Returns a ``PreTrainedTokenizerFast`` with pad = ``<|pad|>``, eos = ``<|im_end|>``, no BOS and
    a ChatML chat template.
    """
    tags = [t for t in special_tokens if t not in CHAT_SPECIAL_TOKENS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    n_added = len(CHAT_SPECIAL_TOKENS) + len(tags)
    trainer = trainers.BpeTrainer(
        vocab_size=max(vocab_size - len(tags), 256 + n_added),
        min_frequency=min_frequency,
        special_tokens=list(CHAT_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok = _add_whole_words(tok, whole_words)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in tags])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )
    wrapped.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    wrapped.chat_template = CHATML_TEMPLATE
    return wrapped


def build_scratch_model(scratch_cfg, tokenizer, seed: int = 0, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """A freshly initialised Llama causal LM sized by ``scratch_cfg`` (``ScratchModelConfig``).

    The vocabulary is ``len(tokenizer)``; pad/eos ids come from the tokenizer. Initialisation is
    seeded (``seed``) without touching the caller's global RNG state.
    """
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=scratch_cfg.hidden_size,
        num_hidden_layers=scratch_cfg.num_layers,
        num_attention_heads=scratch_cfg.num_heads,
        num_key_value_heads=scratch_cfg.num_kv_heads,
        intermediate_size=scratch_cfg.intermediate_size,
        max_position_embeddings=scratch_cfg.max_position,
        tie_word_embeddings=scratch_cfg.tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    return model.to(dtype).eval()
