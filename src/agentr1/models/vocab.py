"""Restrict a pretrained policy's vocabulary to the tokens its world uses (``model.restrict_vocab``).

A pretrained LLM carries a vocabulary for the whole web (SmolLM2: 49,152 tokens); the synthetic
world's texts use a few thousand of them. The output head over the full vocabulary is then the
largest single cost of a small model's forward and backward pass, for tokens that are never
targets. :func:`restrict_vocabulary` keeps

* every token that encoding the world's texts produces (corpus, questions, transcripts, prompts),
* every token a kept token is merged from (so the BPE still builds each kept token the same way),
* the 256 byte-level symbols (so any text still encodes, losslessly) and the added tokens,

renumbers them ``0 .. K-1`` in their original order, keeps the BPE merges among them, and slices
the embedding matrix (and an untied output head) to the kept rows. On the kept texts the new
tokenizer yields the same token strings and the model the same logits for every kept token; the
distribution is renormalized over the ``K`` kept tokens, which is exactly what sampling it
already amounted to (measured: no change in accuracy, 22% off a 16x256 SmolLM2 forward+backward;
bench/RESULTS.md). The result is a plain transformers model + tokenizer (saved and loaded as
usual, vLLM included).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import torch
from tokenizers import Tokenizer, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def _bpe_json(tokenizer) -> dict:
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    if data.get("model", {}).get("type") != "BPE" or not isinstance(data["model"].get("vocab"), dict):
        raise ValueError(
            "model.restrict_vocab needs a BPE tokenizer (vocab + merges); this one is "
            f"{data.get('model', {}).get('type')!r}: set model.restrict_vocab false"
        )
    return data


def _pairs(merges: Sequence) -> list[tuple[str, str]]:
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]


def kept_tokens(tokenizer, texts: Iterable[str]) -> set[str]:
    """The token strings to keep for ``texts`` (module docstring): produced by encoding them,
    their merge ancestors, the byte-level alphabet and the added tokens."""
    data = _bpe_json(tokenizer)
    vocab = data["model"]["vocab"]
    keep = {
        t for enc in tokenizer.backend_tokenizer.encode_batch(list(texts), add_special_tokens=False) for t in enc.tokens
    }
    keep |= {a["content"] for a in data["added_tokens"]}
    keep |= {c for c in pre_tokenizers.ByteLevel.alphabet() if c in vocab}
    made_by = {}
    for a, b in _pairs(data["model"]["merges"]):
        made_by.setdefault(a + b, (a, b))
    todo = list(keep)
    while todo:
        parts = made_by.get(todo.pop())
        for p in parts or ():
            if p not in keep:
                keep.add(p)
                todo.append(p)
    return keep


def restrict_vocabulary(model, tokenizer, texts: Iterable[str]):
    """``(model, tokenizer, info)`` with the vocabulary cut to :func:`kept_tokens` of ``texts``
    (module docstring); ``model`` is changed in place. ``info``: ``{"before": V, "after": K}``."""
    data = _bpe_json(tokenizer)
    keep = kept_tokens(tokenizer, texts)
    vocab: dict[str, int] = data["model"]["vocab"]
    added = {a["content"]: a["id"] for a in data["added_tokens"]}
    old_id = {**vocab, **added}
    order = sorted(keep, key=lambda t: old_id[t])  # original order, so 0..K-1 keeps it
    new_id = {t: i for i, t in enumerate(order)}
    data["model"]["vocab"] = {t: new_id[t] for t in vocab if t in keep}
    data["model"]["merges"] = [
        [a, b] for a, b in _pairs(data["model"]["merges"]) if a in keep and b in keep and a + b in keep
    ]
    for a in data["added_tokens"]:
        a["id"] = new_id[a["content"]]
    post = data.get("post_processor") or {}
    for spec in (post.get("special_tokens") or {}).values():  # TemplateProcessing refers to ids
        spec["ids"] = [new_id[t] for t in spec["tokens"]]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)),
        **{
            k: getattr(tokenizer, k)
            for k in ("bos_token", "eos_token", "pad_token", "unk_token")
            if getattr(tokenizer, k, None)
        },
        clean_up_tokenization_spaces=False,
        model_max_length=tokenizer.model_max_length,
    )
    fast.chat_template = tokenizer.chat_template

    rows = torch.tensor([old_id[t] for t in order])
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is emb.weight
    new_emb = torch.nn.Embedding(len(order), emb.weight.shape[1], dtype=emb.weight.dtype, device=emb.weight.device)
    new_emb.weight.data.copy_(emb.weight.data[rows.to(emb.weight.device)])
    model.set_input_embeddings(new_emb)
    if head is not None:
        if tied:
            head.weight = new_emb.weight
        else:
            head.weight = torch.nn.Parameter(head.weight.data[rows.to(head.weight.device)].clone())
            if getattr(head, "bias", None) is not None:
                head.bias = torch.nn.Parameter(head.bias.data[rows.to(head.bias.device)].clone())
        head.out_features = len(order)
    model.config.vocab_size = len(order)
    for cfg in (model.config, getattr(model, "generation_config", None)):
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(cfg, key, None) if cfg is not None else None
            if isinstance(value, int):
                setattr(cfg, key, int(new_id[tokenizer.convert_ids_to_tokens(value)]))
            elif isinstance(value, list):
                setattr(cfg, key, [int(new_id[tokenizer.convert_ids_to_tokens(v)]) for v in value])
    return model, fast, {"before": len(old_id), "after": len(order)}
