"""Rollout backend on an in-memory transformers causal LM (CPU and GPU; the one the CPU tests
exercise), with the KV cache kept across the turns of a multi-turn rollout.

One call = one batched decode loop written here (not ``model.generate``), so that the cache of a
row survives the call. A multi-turn rollout asks for the next turn of a context that is the
previous call's context + the turn it generated + the observation the environment injected; the
backend keeps, per generated row, the key/value states of every token it has seen (``_PrefixStore``)
and, on the next call, prefills only the tokens after the longest stored prefix of the new
context (the observation) instead of the whole history again. On a first turn, the prefix all
prompts share (system prompt + chat header) runs once and every row starts from it. ``bench/rollout.py`` measures the
saving; before this the prefill of the full history was 86% of the generate time.

Batch layout of one call (row ``b`` reuses ``c_b`` cached tokens and has ``s_b`` new ones)::

    [ pad.. cache_b (c_b) | pad.. new_b (s_b) | t_1 t_2 ... ]   width C = max c_b, S = max s_b

Pads are holes in the 2-D attention mask (key padding), and every real token gets its true
position ``cumsum(mask) - 1``, so each row computes exactly what it would alone, unpadded (the
same holds for transformers' left padding). Reuse is switched off for models whose cache is not a
plain per-token key/value list (sliding-window or recurrent layers): every call then prefills
the whole context.

Sampling uses *only* temperature and top-p: the sampled token comes from
``softmax(logits / T)`` (top-p-truncated when ``top_p < 1``) drawn with a ``torch.Generator``
seeded by ``seed``; ``T = 0`` is greedy. Log-probs are ``log_softmax(logits / T)`` of the sampled
id (at ``T = 1`` when greedy) - the quantity a training forward pass recomputes; top-p
truncation is not renormalised into them (with the default ``top_p = 1`` they are exact).

Stops: a row stops at an EOS id or once its *generated* tokens contain a stop string (only the
generated tail is decoded, so a stop string that starts in the prompt, e.g. a prompt ending in
``"</sear"``, does not end the turn); :func:`agentr1.rollout.backends.first_stop` then trims the
row exactly. Rows that stopped are fed as holes until the whole batch has stopped.

Cache lifetime: the stored states belong to the current weights. The rollout engine calls
:meth:`HFBackend.reset` at the start and end of every rollout (between them the weights do not
change), and the backend drops the store itself when the parameters were written in place since
its last call (their version counters moved); ``max_cache_bytes`` bounds the store (least
recently used rows dropped first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from agentr1.rollout.backends import Generation, first_stop


def _as_set(x) -> set[int]:
    if x is None:
        return set()
    return {int(v) for v in (x if isinstance(x, (list, tuple, set)) else [x])}


class _PrefixStore:
    """Per-row key/value states keyed by the token ids they were computed for.

    An entry is ``ids -> [(k, v) per layer]`` with ``k, v`` of shape ``[kv_heads, len(ids),
    head_dim]``. :meth:`take` returns the longest entry whose ids are a prefix of a context and
    keeps it (rows of a group with identical histories share it); the least recently used
    entries are dropped once the store holds more than ``max_bytes``.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self.nbytes = 0

    @staticmethod
    def _size(kv) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)

    def clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0

    def put(self, ids: tuple[int, ...], kv) -> None:
        if not ids:
            return
        old = self.entries.pop(ids, None)
        if old is not None:
            self.nbytes -= self._size(old)
        self.entries[ids] = kv
        self.nbytes += self._size(kv)
        while self.nbytes > self.max_bytes and self.entries:
            _, dropped = self.entries.popitem(last=False)
            self.nbytes -= self._size(dropped)

    def take(self, context: Sequence[int]):
        """``(n, kv)`` for the longest stored prefix of ``context``, else ``(0, None)``."""
        lengths = sorted({len(ids) for ids in self.entries if len(ids) <= len(context)}, reverse=True)
        ctx = tuple(context)
        for n in lengths:
            kv = self.entries.get(ctx[:n])
            if kv is not None:
                self.entries.move_to_end(ctx[:n])
                return n, kv
        return 0, None


class HFBackend:
    """:class:`agentr1.rollout.backends.Backend` on an in-memory transformers causal LM."""

    def __init__(self, model, tokenizer, reuse_cache: bool = True, max_cache_bytes: int = 2 << 30):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = _as_set(getattr(model.generation_config, "eos_token_id", None)) | _as_set(tokenizer.eos_token_id)
        if not self.eos_ids:
            raise ValueError("the tokenizer/model define no EOS token")
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else min(self.eos_ids)
        self.reuse_cache = reuse_cache
        self.store = _PrefixStore(max_cache_bytes)
        #: token counts of the calls since :meth:`reset`: ``prefilled`` (run through the model
        #: before the first sample), ``shared`` (the part of it that ran once as a shared prefix)
        #: and ``reused`` (taken from the store, summed over rows).
        self.counters = {"prefilled": 0, "shared": 0, "reused": 0}
        self._version = self._weights_version()

    def _weights_version(self) -> int:
        """Sum of the parameters' in-place write counters: any optimizer step or
        ``load_state_dict`` changes it (a guard on top of the engine's :meth:`reset`)."""
        return sum(p._version for p in self.model.parameters())

    def reset(self) -> None:
        """Forget every stored key/value state (call whenever the weights may have changed)."""
        self.store.clear()
        self.counters = {"prefilled": 0, "shared": 0, "reused": 0}

    # ------------------------------------------------------------------------------ pieces
    def _batch_cache(self, taken, n_layers: int, device) -> tuple[DynamicCache | None, torch.Tensor]:
        """The stored states of each row right-aligned in one ``[B, H, C, D]`` cache per layer,
        and its ``[B, C]`` key-padding mask (``C = 0``: no cache)."""
        width = max(n for n, _ in taken)
        if width == 0:
            return None, torch.zeros((len(taken), 0), dtype=torch.long, device=device)
        ref = next(kv for n, kv in taken if n)
        layers = []
        mask = torch.zeros((len(taken), width), dtype=torch.long, device=device)
        for layer in range(n_layers):
            k0, v0 = ref[layer]
            k = k0.new_zeros((len(taken), k0.shape[0], width, k0.shape[2]))
            v = v0.new_zeros((len(taken), v0.shape[0], width, v0.shape[2]))
            for b, (n, kv) in enumerate(taken):
                if n:
                    k[b, :, width - n :] = kv[layer][0]
                    v[b, :, width - n :] = kv[layer][1]
            layers.append((k, v))
        for b, (n, _) in enumerate(taken):
            mask[b, width - n :] = 1 if n else 0
        return DynamicCache(ddp_cache_data=layers), mask

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, cache):
        """One forward of the new block ``ids`` ([B, S]) given the full key mask ``mask``
        ([B, past + S]); returns the last position's logits and the cache."""
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1] :]
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
        )
        return out.logits[:, -1, :].float(), out.cache

    @staticmethod
    def _plain(cache) -> bool:
        return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))

    @staticmethod
    def _sample(
        logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled ids and their log-probs ``log_softmax(logits / T)`` (greedy and ``T = 1`` when ``T = 0``)."""
        if temperature == 0:
            ids = logits.argmax(-1)
            return ids, torch.log_softmax(logits, -1).gather(1, ids[:, None]).squeeze(1)
        logp = torch.log_softmax(logits / float(temperature), -1)
        probs = logp.exp()
        if top_p < 1.0:
            sorted_p, order = probs.sort(-1, descending=True)
            drop = (sorted_p.cumsum(-1) - sorted_p) >= float(top_p)  # keep the smallest set reaching top_p
            probs = probs.scatter(1, order, sorted_p.masked_fill(drop, 0.0))
        ids = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        return ids, logp.gather(1, ids[:, None]).squeeze(1)

    def _stopped(self, gen_ids: list[list[int]], rows: list[int], stop_strings: Sequence[str], tail: int) -> list[bool]:
        """Whether each row in ``rows`` has a stop string in the tail of its generated tokens
        (a stop string ending in the newest token lies within the last ``tail`` tokens)."""
        texts = self.tokenizer.batch_decode(
            [gen_ids[b][-tail:] for b in rows], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        return [any(s in t for s in stop_strings) for t in texts]

    # ------------------------------------------------------------------------------ the call
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
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        self._drop_stale_states()
        device = self.model.device
        block, mask, cache = self._prefill_block(prompts, device)

        gen = torch.Generator(device=device).manual_seed(int(seed))
        logits, cache = self._forward(block.to(device), mask, cache)
        stop_strings = list(stop_strings)
        gen_ids, gen_lp, cache, mask = self._decode(
            prompts, logits, cache, mask, max_new_tokens, stop_strings, temperature, top_p, gen, device
        )

        if self.reuse_cache and self._plain(cache):
            self._keep(prompts, gen_ids, cache, mask)
        results = []
        for b in range(len(prompts)):
            k, finish = first_stop(self.tokenizer, gen_ids[b], stop_strings, self.eos_ids)
            results.append(Generation(gen_ids[b][:k], gen_lp[b][:k], finish))
        return results

    def _drop_stale_states(self) -> None:
        """Clear the stored states when the weights changed in place since the last call."""
        version = self._weights_version()
        if version != self._version:  # weights changed in place (an optimizer step): states are stale
            self.store.clear()
            self._version = version

    def _prefill_block(self, prompts, device):
        """``(block, mask, cache)``: each prompt's tokens past its stored states, left-padded into
        one block, the full key mask (stored states + block) and the batched stored-state cache."""
        n_layers = self.model.config.get_text_config().num_hidden_layers
        taken = [self._take(p) for p in prompts]
        fresh = [b for b, (n, _) in enumerate(taken) if n == 0]
        if self.reuse_cache and self._seed_shared_prefix([prompts[b] for b in fresh]):
            for b in fresh:
                taken[b] = self._take(prompts[b])
        cache, mask = self._batch_cache(taken, n_layers, device)
        news = [list(p[n:]) for p, (n, _) in zip(prompts, taken)]
        width = max(len(s) for s in news)
        block = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        block_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, s in enumerate(news):
            block[b, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            block_mask[b, width - len(s) :] = 1
        mask = torch.cat([mask, block_mask.to(device)], dim=1)
        self.counters["prefilled"] += sum(len(s) for s in news)
        self.counters["reused"] += sum(n for n, _ in taken)
        return block, mask, cache

    def _decode(self, prompts, logits, cache, mask, max_new_tokens, stop_strings, temperature, top_p, gen, device):
        """The sampling loop from the prefill ``logits``: ``(gen_ids, gen_lp, cache, mask)``, each
        row's sampled ids and log-probs (up to and including its stop) and the final cache and mask."""
        tail = max((len(s.encode("utf-8")) for s in stop_strings), default=0) + 2
        gen_ids: list[list[int]] = [[] for _ in prompts]
        gen_lp: list[list[float]] = [[] for _ in prompts]
        live = [True] * len(prompts)
        for step in range(max_new_tokens):
            ids, lps = self._sample(logits, temperature, top_p, gen)
            ids_l, lps_l = ids.tolist(), lps.tolist()
            rows = [b for b in range(len(prompts)) if live[b]]
            for b in rows:
                gen_ids[b].append(ids_l[b])
                gen_lp[b].append(lps_l[b])
            ended = [gen_ids[b][-1] in self.eos_ids for b in rows]
            if stop_strings:
                ended = [e or s for e, s in zip(ended, self._stopped(gen_ids, rows, stop_strings, tail))]
            # Feed every row's newest token (stopped rows included: their last token is real and
            # its state is kept for the next turn); rows stopped earlier are holes.
            fed = torch.tensor([1 if live[b] else 0 for b in range(len(prompts))], dtype=torch.long, device=device)
            for b, e in zip(rows, ended):
                if e:
                    live[b] = False
            if not any(live) or step == max_new_tokens - 1:
                if self.reuse_cache:
                    # one more forward so the last sampled tokens enter the cache (only when reused)
                    mask = torch.cat([mask, fed[:, None]], dim=1)
                    _, cache = self._forward(ids[:, None], mask, cache)
                break
            mask = torch.cat([mask, fed[:, None]], dim=1)
            logits, cache = self._forward(ids[:, None], mask, cache)
        return gen_ids, gen_lp, cache, mask

    def _take(self, prompt: Sequence[int]):
        """``(n, kv)``: the stored states of the first ``n`` tokens of ``prompt`` - at most
        ``len(prompt) - 1``, as the last token is run to get the next logits."""
        if not self.reuse_cache:
            return 0, None
        n, kv = self.store.take(prompt)
        if n >= len(prompt):
            n = len(prompt) - 1
            kv = [(k[:, :n], v[:, :n]) for k, v in kv] if n else None
        return (n, kv) if n else (0, None)

    def _seed_shared_prefix(self, fresh, min_length: int = 16) -> bool:
        """Run the prefix that the prompts ``fresh`` (those without stored states) share - the
        system prompt and chat header of a first turn - once, as one row, and store it, so that
        every row starts from it instead of prefilling it again. Returns whether it did."""
        if len(fresh) < 2:
            return False
        n = min(len(p) for p in fresh) - 1
        first = fresh[0]
        for p in fresh[1:]:
            n = next((i for i in range(n) if p[i] != first[i]), n)
        if n < min_length:
            return False
        ids = torch.tensor([list(first[:n])], dtype=torch.long, device=self.model.device)
        out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, logits_to_keep=1)
        if not self._plain(out.cache):
            return False
        self.store.put(tuple(first[:n]), [(layer.keys[0], layer.values[0]) for layer in out.cache.layers])
        self.counters["prefilled"] += n
        self.counters["shared"] += n
        return True

    def _keep(self, prompts, gen_ids, cache, mask) -> None:
        """Store each row's states of its real tokens (prompt + generated) under their ids."""
        real = mask.bool().cpu()
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        for b, p in enumerate(prompts):
            idx = real[b].nonzero().squeeze(1).to(mask.device)
            ids = tuple(p) + tuple(gen_ids[b])
            if len(idx) != len(ids):  # cannot happen: one real key per prompt/generated token
                raise RuntimeError(f"cache row {b} holds {len(idx)} tokens for {len(ids)} ids")
            self.store.put(ids, [(k[b].index_select(1, idx), v[b].index_select(1, idx)) for k, v in layers])
