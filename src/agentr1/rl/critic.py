"""Model-side modules of the trainer: the policy's token log-probs and the critic (value model).

Both are ``nn.Module`` s whose ``forward`` does the whole computation, so that DDP/FSDP wrap them
as a unit (calling a submodule of a DDP-wrapped model directly would bypass the gradient hooks).

Alignment (as :func:`agentr1.rollout.trajectory.collate` and :mod:`agentr1.rl.masks`): every
output is ``[B, L]`` over ``prompt + response``; entry ``t`` belongs to token ``x_t``:

* ``logp[b, t] = log softmax(z_{t-1} / T)[x_t]`` - the log-prob of token ``t`` given ``x_<t``
  (``T`` = the sampling temperature, so it is the same quantity the rollout stored);
* ``entropy[b, t]`` = entropy of that same distribution;
* ``values[b, t] = V(x_<t)`` - the critic's value of the state in which token ``t`` is chosen.

Entries at ``t = 0`` and outside ``target_mask`` are 0. Only the selected positions go through the
output head (the vocabulary projection dominates a small model's cost), and the token prefix all
rows of a micro-batch share (system prompt + chat header, capped before the first target) runs
once, its KV cache repeated for the rows (:func:`agentr1.rl.sft._hidden_states`): same numbers as
the full forward, measured 0.70-0.74x the time of a pass on nano batches (bench/RESULTS.md).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from agentr1.rl.losses import entropy_from_logits
from agentr1.rl.sft import _fast_head, _hidden_states, shared_prefix_length


def _scatter(values: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
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
        self._fast = _fast_head(model)
        self.share_prefix = share_prefix

    def forward(self, input_ids, attention_mask, target_mask, with_entropy: bool = False):
        targets, sel = input_ids[:, 1:], target_mask[:, 1:].bool()
        if self._fast:
            prefix = 0
            if self.share_prefix:
                rows = {"input_ids": input_ids, "attention_mask": attention_mask, "action_mask": target_mask}
                prefix = shared_prefix_length(rows)
            # hidden states of positions prefix..L-1; no target is predicted from inside the prefix
            hidden = _hidden_states(self.model, input_ids, attention_mask, prefix)
            logits = self.model.get_output_embeddings()(hidden[:, :-1][sel[:, prefix:]])
        else:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1][sel]
        logits = logits.float() / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        picked = logp_all.gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)
        entropy = _scatter(entropy_from_logits(logits), sel) if with_entropy else None
        return _scatter(picked, sel), entropy


class ValueModel(nn.Module):
    """A scalar value head on a transformer backbone: ``forward(input_ids, attention_mask,
    value_mask=None) -> values [B, L]`` (module docstring). The head starts at zero (V = 0
    everywhere), so the first advantages are the plain returns.

    With ``value_mask`` (the positions whose values are used: the advantage mask) and
    ``share_prefix``, the prefix every row shares, capped before the first masked position, runs
    once as in :class:`PolicyLogProbs`; values inside it are 0 (none is used). Without the mask
    every position gets its value (the full forward). The saving is the policy's: the system
    prompt is most of a nano episode's tokens, and the critic ran it for every row."""

    def __init__(self, backbone: nn.Module, hidden_size: int, share_prefix: bool = True):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        self.share_prefix = share_prefix
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask, value_mask=None):
        prefix = 0
        if self.share_prefix and value_mask is not None:
            prefix = shared_prefix_length({"input_ids": input_ids, "attention_mask": attention_mask,
                                           "action_mask": value_mask})
        hidden = _hidden_states(self.backbone, input_ids, attention_mask, prefix)
        v = self.value_head(hidden[:, :-1].to(self.value_head.weight.dtype)).squeeze(-1).float()
        return F.pad(v, (prefix + 1, 0))


def build_critic(policy: nn.Module, critic_cfg, dtype: torch.dtype = torch.float32,
                 share_prefix: bool = True) -> ValueModel:
    """The critic of ``train.critic``: ``model: policy`` = a deep copy of the policy's backbone
    (same weights, trained separately); otherwise ``model`` is a checkpoint directory / hub id
    whose backbone (``AutoModel``) is used - it must share the policy's tokenizer.
    ``share_prefix``: as :class:`ValueModel` (off under FSDP, as for the actor)."""
    if critic_cfg.model == "policy":
        backbone = copy.deepcopy(policy.base_model)
    else:
        from transformers import AutoModel

        backbone = AutoModel.from_pretrained(critic_cfg.model, dtype=dtype)
        if backbone.config.vocab_size < policy.config.vocab_size:
            raise ValueError(
                f"critic model {critic_cfg.model!r} has a vocabulary of {backbone.config.vocab_size} < the "
                f"policy's {policy.config.vocab_size}: it must share the policy's tokenizer"
            )
    return ValueModel(backbone, backbone.config.hidden_size, share_prefix).to(dtype)
