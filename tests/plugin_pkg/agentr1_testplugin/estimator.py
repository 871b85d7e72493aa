"""A grouped advantage estimator: each sequence's score minus its group's mean, on the mask tokens.

s_b  = sum_t mask[b,t] * r[b,t]
A_bt = mask_bt * (s_b - mean_{g(b)}(s))           (returns = advantages)
"""

from __future__ import annotations

import torch

from agentr1.rl.advantages import group_ids, group_stats, sequence_scores


@torch.no_grad()
def centered(token_rewards: torch.Tensor, mask: torch.Tensor, index) -> tuple[torch.Tensor, torch.Tensor]:
    s = sequence_scores(token_rewards, mask)
    gid, n_groups = group_ids(index, s.shape[0], s.device)
    _, mean, _ = group_stats(s, gid, n_groups)
    adv = torch.where(mask.bool(), (s - mean).unsqueeze(-1).expand(mask.shape), torch.zeros(()))
    return adv, adv
