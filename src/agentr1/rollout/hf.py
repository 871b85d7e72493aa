"""Rollout backend on transformers ``generate`` (CPU and GPU; the one the CPU tests exercise).

One call = one left-padded batch through ``model.generate`` with the KV cache, the EOS ids and a
stopping criterion for the turn's stop strings that looks at the *generated* text only
(:class:`GeneratedStopStrings`): transformers' own ``stop_strings`` criterion also matches a
stop string that starts in the prompt (e.g. a prompt ending in ``"</sear"``), which would end a
turn on text the policy did not write. Sampling uses *only* temperature and
top-p: the model's own ``generation_config`` (which may carry top-k, repetition penalties, ...) is
swapped for a neutral one during the call and ``top_k=0`` disables transformers' default top-k,
so the sampled token really comes from ``softmax(logits / T)`` (top-p-truncated when
``top_p < 1``). Log-probs are computed from the raw logits (``output_logits``) as
``log_softmax(logits / T)`` of the sampled id - the same quantity a training forward pass
recomputes; top-p truncation is not renormalised into them (with the default ``top_p = 1`` they
are exact). ``T = 0`` is greedy decoding with log-probs at ``T = 1``.

Determinism: the call seeds the torch RNG with ``seed`` inside ``torch.random.fork_rng`` (the
caller's global RNG state is left untouched), so the same prompts, seed and weights give the same
samples on the same machine.

Memory: ``output_logits`` keeps ``steps x batch x vocab`` float32 logits until the call returns;
the engine bounds it with ``rollout.batch_size`` prompts per call. Large-scale GPU rollouts use
the vLLM backend.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from agentr1.rollout.backends import Generation, first_stop


class GeneratedStopStrings(StoppingCriteria):
    """Stop a row once its generated tokens (after ``prompt_width``) contain a stop string.

    Only the tail of the generation is decoded each step: a stop string that ends in the newest
    token lies within the last ``len(stop) + 2`` tokens (every token covers at least one byte).
    """

    def __init__(self, tokenizer, stop_strings, prompt_width: int):
        self.tokenizer = tokenizer
        self.stop_strings = list(stop_strings)
        self.prompt_width = prompt_width
        self.tail = max(len(s.encode("utf-8")) for s in self.stop_strings) + 2

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        gen = input_ids[:, self.prompt_width :]
        tails = gen[:, -self.tail :].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        done = [any(s in t for s in self.stop_strings) for t in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _as_set(x) -> set[int]:
    if x is None:
        return set()
    return {int(v) for v in (x if isinstance(x, (list, tuple, set)) else [x])}


class HFBackend:
    """:class:`agentr1.rollout.backends.Backend` on an in-memory transformers causal LM."""

    def __init__(self, model, tokenizer):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = _as_set(getattr(model.generation_config, "eos_token_id", None)) | _as_set(tokenizer.eos_token_id)
        if not self.eos_ids:
            raise ValueError("the tokenizer/model define no EOS token")
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else min(self.eos_ids)

    def _generation_config(self, max_new_tokens: int, stop_strings: Sequence[str], temperature: float, top_p: float):
        greedy = temperature == 0
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=not greedy,
            temperature=1.0 if greedy else float(temperature),
            top_p=1.0 if greedy else float(top_p),
            top_k=None if greedy else 0,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
            bos_token_id=None,
            return_dict_in_generate=True,
            output_logits=True,
            use_cache=True,
        )

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_strings: Sequence[str],
        temperature: float,
        top_p: float,
        seed: int,
    ) -> list[Generation]:
        """See :class:`agentr1.rollout.backends.Backend`."""
        if not prompts:
            return []
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        device = self.model.device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, p in enumerate(prompts):
            input_ids[b, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            attention[b, width - len(p) :] = 1
        gen_cfg = self._generation_config(max_new_tokens, stop_strings, temperature, top_p)
        saved = self.model.generation_config
        self.model.generation_config = GenerationConfig()
        devices = [device] if device.type == "cuda" else []
        criteria = StoppingCriteriaList([GeneratedStopStrings(self.tokenizer, stop_strings, width)] if stop_strings else [])
        try:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                out = self.model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention.to(device),
                    generation_config=gen_cfg,
                    stopping_criteria=criteria,
                )
        finally:
            self.model.generation_config = saved
        new = out.sequences[:, width:]
        if len(out.logits) != new.shape[1]:
            raise RuntimeError(f"generate returned {new.shape[1]} tokens but {len(out.logits)} logit steps")
        scale = 1.0 if temperature == 0 else float(temperature)
        steps = [
            torch.log_softmax(step.float() / scale, dim=-1).gather(1, new[:, t : t + 1]).squeeze(1)
            for t, step in enumerate(out.logits)
        ]
        logprobs = torch.stack(steps, dim=1).cpu()
        new = new.cpu()
        results = []
        for b in range(len(prompts)):
            ids = new[b].tolist()
            k, finish = first_stop(self.tokenizer, ids, stop_strings, self.eos_ids)
            results.append(Generation(ids[:k], logprobs[b, :k].tolist(), finish))
        return results
