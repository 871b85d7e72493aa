"""The actor's forward: token log-probs and entropies of a causal LM over a padded batch.

Used by the RL trainer (the actor and the reference, :class:`PolicyLogProbs`), its critic
(:class:`agentr1.rl.critic.ValueModel`, through :func:`hidden_states`) and the SFT loss
(:func:`agentr1.lm.sft.action_logprobs`).

Alignment (as :func:`agentr1.rollout.trajectory.collate`): every output is ``[B, L]`` over
``prompt + response``; entry ``t`` belongs to token ``x_t``:

* ``logp[b, t] = log softmax(z_{t-1} / T)[x_t]`` - the log-prob of token ``t`` given ``x_<t``
  (``T`` = the sampling temperature, so it is the same quantity the rollout stored);
* ``entropy[b, t]`` = entropy of that same distribution,
  ``H = logsumexp(z) - sum_v p_v z_v`` (:func:`entropy_from_logits`).

Entries at ``t = 0`` and outside ``target_mask`` are 0. Two savings, neither changing the result,
when the logits are ``lm_head(last_hidden_state)`` (:func:`fast_head`): only the selected
positions go through the output head (the vocabulary projection dominates a small model's cost),
and the token prefix all rows of a micro-batch share (system prompt + chat header, capped before
the first target, :func:`shared_prefix_length`) runs once, its KV cache repeated for the rows
(:func:`hidden_states`): same numbers as the full forward, measured 0.70-0.74x the time of a pass
on nano batches (bench/RESULTS.md).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn


def fast_head(model) -> bool:
    """Whether the logits are ``lm_head(last_hidden_state)`` with nothing in between (Llama,
    Qwen2, SmolLM, Mistral; not models with logit soft-capping or scaling)."""
    cfg = getattr(model, "config", None)
    return (
        model.get_output_embeddings() is not None
        and getattr(model, "base_model", model) is not model
        and getattr(cfg, "final_logit_softcapping", None) is None
        and getattr(cfg, "logit_scale", None) is None
    )


def shared_prefix_length(batch: dict[str, torch.Tensor], min_length: int = 16) -> int:
    """Length ``P`` of the token prefix every row of ``batch`` shares (the system prompt and the
    chat header), capped so that no action token is predicted from inside it (``P`` <= first
    action position - 1); 0 when the batch has one row or the prefix is shorter than
    ``min_length``."""
    ids, attn = batch["input_ids"], batch["attention_mask"]
    if ids.shape[0] < 2:
        return 0
    same = ((ids == ids[:1]) & (attn == 1)).all(0).long()
    prefix = int(same.cumprod(0).sum())
    acting = batch["action_mask"].any(0).nonzero()
    if len(acting):
        prefix = min(prefix, int(acting[0]) - 1)
    return prefix if prefix >= min_length else 0


def _cache_kwarg(base) -> str:
    """The keyword the decoder's forward takes its KV cache by (renamed across transformers)."""
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def hidden_states(model, ids: torch.Tensor, attn: torch.Tensor, prefix: int) -> torch.Tensor:
    """Last hidden states at positions ``prefix .. L-1``. With ``prefix > 0`` the shared prefix
    runs once (batch 1), its KV cache is repeated for every row and the rows continue from it:
    the same numbers as the full forward (causal attention), and the gradient of the prefix
    collects every row's contribution, at ``1/B`` of the prefix's compute."""
    base = model.base_model
    if prefix == 0:
        return base(input_ids=ids, attention_mask=attn).last_hidden_state
    B, L = ids.shape
    cache = base(input_ids=ids[:1, :prefix], use_cache=True).past_key_values
    cache.batch_repeat_interleave(B)
    positions = torch.arange(prefix, L, device=ids.device).expand(B, -1)
    out = base(
        input_ids=ids[:, prefix:],
        attention_mask=attn,
        position_ids=positions,
        use_cache=True,
        **{_cache_kwarg(base): cache},
    )
    return out.last_hidden_state


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dim: ``H = logsumexp(z) - sum_v p_v z_v``;
    ``[..., V] -> [...]``, computed in float32 at least."""
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(-1)


def scatter_targets(values: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """Place ``values`` (one per True of ``sel`` ``[B, L-1]``) into a zero ``[B, L]`` tensor at
    columns ``1..L-1`` (differentiable)."""
    out = torch.zeros(sel.shape, dtype=values.dtype, device=values.device).masked_scatter(sel, values)
    return F.pad(out, (1, 0))


class PolicyLogProbs(nn.Module):
    """``forward(input_ids, attention_mask, target_mask) -> (logp, entropy)`` of a causal LM
    (module docstring); ``entropy`` is ``None`` unless ``with_entropy``. ``share_prefix``: run the
    rows' common prefix once (off under FSDP, whose sharded modules are best called once per
    forward)."""

    def __init__(self, model: nn.Module, temperature: float = 1.0, share_prefix: bool = True):
        super().__init__()
        self.model = model
        self.temperature = float(temperature) if temperature > 0 else 1.0
        self._fast = fast_head(model)
        self.share_prefix = share_prefix

    def forward(self, input_ids, attention_mask, target_mask, with_entropy: bool = False):
        targets, sel = input_ids[:, 1:], target_mask[:, 1:].bool()
        if self._fast:
            prefix = 0
            if self.share_prefix:
                rows = {"input_ids": input_ids, "attention_mask": attention_mask, "action_mask": target_mask}
                prefix = shared_prefix_length(rows)
            # hidden states of positions prefix..L-1; no target is predicted from inside the prefix
            hidden = hidden_states(self.model, input_ids, attention_mask, prefix)
            logits = self.model.get_output_embeddings()(hidden[:, :-1][sel[:, prefix:]])
        else:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1][sel]
        logits = logits.float() / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        picked = logp_all.gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)
        entropy = scatter_targets(entropy_from_logits(logits), sel) if with_entropy else None
        return scatter_targets(picked, sel), entropy
