"""The critic (value model) of the trainer.

An ``nn.Module`` whose ``forward`` does the whole computation, so that DDP/FSDP wrap it as a unit
(calling a submodule of a DDP-wrapped model directly would bypass the gradient hooks); the actor's
counterpart is :class:`agentr1.models.forward.PolicyLogProbs`.

Alignment (as :func:`agentr1.rollout.trajectory.collate` and :mod:`agentr1.rl.masks`): the output
is ``[B, L]`` over ``prompt + response``; ``values[b, t] = V(x_<t)`` - the critic's value of the
state in which token ``t`` is chosen; 0 at ``t = 0`` (and inside a shared prefix). The prefix
all rows share runs once, its KV cache repeated for the rows
(:func:`agentr1.models.forward.hidden_states`).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from agentr1.lm.schedule import make_optimizer
from agentr1.models.forward import PolicyLogProbs, hidden_states, shared_prefix_length
from agentr1.registry import ESTIMATORS
from agentr1.rl.distributed import Dist, wrap


class ValueModel(nn.Module):
    """A scalar value head on a transformer backbone: ``forward(input_ids, attention_mask,
    value_mask=None) -> values [B, L]`` (module docstring). The head starts at zero (V = 0
    everywhere), so the first advantages are the plain returns.

    With ``value_mask`` (the positions whose values are used: the advantage mask) and
    ``share_prefix``, the prefix every row shares, capped before the first masked position, runs
    once as in :class:`agentr1.models.forward.PolicyLogProbs`; values inside it are 0 (none is used). Without the mask
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
            prefix = shared_prefix_length(
                {"input_ids": input_ids, "attention_mask": attention_mask, "action_mask": value_mask}
            )
        hidden = hidden_states(self.backbone, input_ids, attention_mask, prefix)
        v = self.value_head(hidden[:, :-1].to(self.value_head.weight.dtype)).squeeze(-1).float()
        return F.pad(v, (prefix + 1, 0))


def build_critic(
    policy: nn.Module, critic_cfg, dtype: torch.dtype = torch.float32, share_prefix: bool = True
) -> ValueModel:
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


def build_modules(policy: nn.Module, tcfg, rollout_cfg, dist: Dist):
    """``(actor, ref, critic, opt, critic_opt)`` of the trainer: the actor
    (:class:`~agentr1.models.forward.PolicyLogProbs` of ``policy`` at the sampling temperature,
    DDP/FSDP-wrapped), the frozen reference (a deep copy; ``None`` without a KL term), the critic
    (estimators that need values; else ``None``) and their AdamW optimizers. The shared prefix
    runs once except under FSDP."""
    share_prefix = not (dist.active and dist.strategy == "fsdp")
    actor = wrap(PolicyLogProbs(policy, rollout_cfg.temperature, share_prefix), dist)
    ref: PolicyLogProbs | None = None
    if tcfg.kl.mode != "none" and tcfg.kl.coef > 0:
        ref_model = copy.deepcopy(policy).eval().requires_grad_(False)
        ref = PolicyLogProbs(ref_model, rollout_cfg.temperature, share_prefix)
    critic = critic_opt = None
    if ESTIMATORS.spec(tcfg.estimator).meta.get("needs_values"):
        critic = wrap(
            build_critic(policy, tcfg.critic, next(policy.parameters()).dtype, share_prefix).to(dist.device), dist
        )
        critic_opt = make_optimizer(critic, tcfg.critic.lr, tcfg.weight_decay)
    opt = make_optimizer(actor, tcfg.lr, tcfg.weight_decay)
    return actor, ref, critic, opt, critic_opt
