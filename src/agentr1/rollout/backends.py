"""The generation interface every rollout backend implements (:mod:`agentr1.rollout.factory` builds one).

A backend turns a batch of token-id prompts into one continuation each::

    generate(prompts, max_new_tokens, stop_strings, temperature, top_p, seed) -> list[Generation]

``Generation`` is a named tuple ``(token_ids, logprobs, finish)``: the sampled ids exactly as
sampled, up to and including the token that completed a stop string or the EOS token (nothing
after it), the log-probability of each under the sampling distribution at temperature ``T``
(``log_softmax(logits / T)``; ``T = 0`` means greedy and its log-probs are taken at ``T = 1``;
top-p truncation is *not* renormalised into them), and why it stopped: ``"stop"`` (a stop
string), ``"eos"`` or ``"length"`` (``max_new_tokens`` reached).

Implementations, built by name through :data:`agentr1.registry.BACKENDS`:
:class:`agentr1.rollout.hf.HFBackend` (a transformers causal LM, KV cache kept across turns; CPU
and GPU, tested on CPU) and :class:`agentr1.rollout.vllm.VLLMBackend` (GPU only; imported lazily).

A backend that keeps state between calls (the HF backend's per-row KV cache) also has
``reset()``; the rollout engine calls it before and after every rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol


class Generation(NamedTuple):
    token_ids: list[int]
    logprobs: list[float]
    finish: str


class Backend(Protocol):
    """What the rollout engine needs from a generator (see the module docstring)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_strings: Sequence[str],
        temperature: float,
        top_p: float,
        seed: int,
    ) -> list[Generation]: ...


def first_stop(tokenizer, token_ids: Sequence[int], stop_strings: Sequence[str], eos_ids: set[int]) -> tuple[int, str]:
    """Length of the shortest prefix of ``token_ids`` that ends the turn, and why.

    The prefix ends at the first EOS token (kept) or at the first token whose prefix decode
    contains a stop string (kept), else it is the whole sequence (``"length"``). Containment of
    a stop string in prefix decodes is monotonic, so a binary search needs O(log n) decodes.
    """
    n = len(token_ids)
    eos_at = next((i for i, t in enumerate(token_ids) if t in eos_ids), None)
    limit = n if eos_at is None else eos_at + 1

    def has_stop(k: int) -> bool:
        text = tokenizer.decode(list(token_ids[:k]), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return any(s in text for s in stop_strings)

    if stop_strings and has_stop(limit):
        lo, hi = 1, limit
        while lo < hi:
            mid = (lo + hi) // 2
            if has_stop(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo, "stop"
    if eos_at is not None:
        return limit, "eos"
    return n, "length"
