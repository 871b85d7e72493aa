"""Supervised cold start on oracle trajectories: the NLL of the action tokens only.

Loss. For a batch of trajectories (``collate``: prompt + response, right-padded) with tokens
``x_t`` and ``action_mask`` ``a_t`` (1 on tokens the policy wrote, 0 on prompt, observations and
padding), the token at position ``t`` is predicted from the prefix ``x_<t``::

    L(theta) = - sum_t a_t * log p_theta(x_t | x_<t)  /  sum_t a_t

i.e. the mean negative log-likelihood over every action token of the batch (a token-level mean,
so long episodes weigh more than short ones, as in the policy loss). Observation tokens are
context only: they are never targets, so changing one changes the loss only through the context
of later action tokens. With ``loss_on: response`` the targets are every response token instead
(``a_t`` = 1 on the policy's turns and on the observations): the demonstrations read as text,
whose copies (a query into the observation's title, a name from it into the next call) are
dense targets in the agent's own format.

Optimisation (``cfg.sft``): AdamW (betas 0.9/0.95; weight decay on matrices only, not on norms
and biases), learning rate warmed up linearly over ``warmup_steps`` then cosine-decayed to
``0.1 * lr`` at ``steps``, gradient norm clipped to ``grad_clip`` (0 = off). Batches are
``batch_size`` trajectories drawn without replacement from a seeded permutation, reshuffled each
epoch. Everything is seeded from ``cfg.seed``; on the CPU a run is deterministic.

Copy probe (:func:`copy_probe`). What the agent's queries and answers need is copying: a name
from the question or an observation, written again. With ``P`` the prefix every probed episode
shares (system prompt and chat header), an action token ``x_t`` is *copyable* when its id is
absent from ``x_<P`` (so not a tag or word the instructions show) and present in ``x_P .. x_t-1``
(the question, an observation or an earlier call). The probe reports, under teacher forcing,
``top1`` = share of copyable tokens with ``argmax p(.|x_<t) = x_t`` and ``nll`` = their mean
``-log p(x_t|x_<t)``, separately for ``start`` tokens (the first token of a copied span: the
model must select which name) and ``continue`` tokens (the previous token is copyable too: the
next piece of a name already begun - what an induction head does).

The stage itself lives in :mod:`agentr1.stages.sft`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence

import torch

from agentr1.lm.schedule import MIN_LR_RATIO, lr_lambda, make_optimizer, scheduler
from agentr1.models.forward import fast_head, hidden_states, shared_prefix_length
from agentr1.rollout.trajectory import Trajectory, collate

log = logging.getLogger(__name__)


def action_logprobs(
    model, batch: dict[str, torch.Tensor], share_prefix: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, mask)``: ``logp[b, t] = log p(x_{t+1} | x_<=t)`` for ``t < L - 1`` and the target
    mask ``action_mask[:, 1:]``; entries outside the mask are 0.

    Two savings when the architecture allows it (:func:`agentr1.models.forward.fast_head`), neither changing the
    result: only the masked positions go through the output head (the head over the whole
    vocabulary is the largest per-token cost of a small model), and the prefix all rows share
    (the system prompt, about 40% of an episode here) is computed once (:func:`agentr1.models.forward.hidden_states`,
    ``share_prefix``). Otherwise the full logits are used.
    """
    ids, attn = batch["input_ids"], batch["attention_mask"]
    targets, mask = ids[:, 1:], batch["action_mask"][:, 1:].bool()
    logp = torch.zeros(targets.shape, dtype=torch.float32, device=ids.device)
    if fast_head(model):
        prefix = shared_prefix_length(batch) if share_prefix else 0
        hidden = hidden_states(model, ids, attn, prefix)[:, :-1]
        logits = model.get_output_embeddings()(hidden[mask[:, prefix:]]).float()
    else:
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1][mask].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, targets[mask].unsqueeze(-1)).squeeze(-1)
    logp = logp.masked_scatter(mask, picked)
    return logp, mask


def response_mask(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """1 on every response token (the policy's turns and the observations), 0 on prompt and padding."""
    pos = torch.arange(batch["input_ids"].shape[1]).unsqueeze(0)
    start, length = batch["response_start"].unsqueeze(1), batch["response_length"].unsqueeze(1)
    return ((pos >= start) & (pos < start + length)).long()


def sft_loss(model, batch: dict[str, torch.Tensor], loss_on: str = "actions") -> tuple[torch.Tensor, int]:
    """Mean NLL over the target tokens of ``batch`` (module docstring) and their count: the action
    tokens (``loss_on: actions``) or every response token (``response``)."""
    if loss_on == "response":
        batch = {**batch, "action_mask": response_mask(batch)}
    logp, mask = action_logprobs(model, batch)
    n = int(mask.sum())
    if n == 0:
        raise ValueError("the batch has no action tokens to train on")
    return -(logp * mask).sum() / n, n


def batch_indices(n: int, batch_size: int, seed: int) -> Iterator[list[int]]:
    """Endless batches of ``min(batch_size, n)`` distinct indices in ``range(n)``: a seeded
    permutation, cut into consecutive batches, reshuffled each epoch (a partial tail is dropped
    unless it is all there is)."""
    if n < 1:
        raise ValueError("no examples to draw batches from")
    size = min(batch_size, n)
    gen = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(n, generator=gen).tolist()
        for start in range(0, n - size + 1, size):
            yield perm[start : start + size]


def train_sft(
    model,
    trajectories: Sequence[Trajectory],
    pad_id: int,
    sft_cfg,
    seed: int,
    on_step: Callable[[dict], None] | None = None,
    log_every: int = 10,
) -> list[dict]:
    """Train ``model`` in place for ``sft_cfg.steps`` optimizer steps (module docstring).

    Returns one record per step: ``step`` (1-based), ``loss`` (mean action NLL of that batch,
    before the update), ``lr``, ``grad_norm`` (before clipping), ``action_tokens``, ``tokens``
    (all non-pad tokens) and ``elapsed_s``. ``on_step`` is called with each record.
    The model is left in eval mode.
    """
    if not trajectories:
        raise ValueError("no trajectories to train on")
    opt = make_optimizer(model, sft_cfg.lr, sft_cfg.weight_decay)
    draws = batch_indices(len(trajectories), sft_cfg.batch_size, seed)
    device = next(model.parameters()).device
    history: list[dict] = []
    t0 = time.perf_counter()
    model.train()
    sched = scheduler(opt, lr_lambda(sft_cfg.lr, sft_cfg.warmup_steps, sft_cfg.steps, "cosine", MIN_LR_RATIO))
    for step in range(sft_cfg.steps):
        lr = sched.get_last_lr()[0]
        batch = collate([trajectories[i] for i in next(draws)], pad_id)
        batch = {k: v.to(device) for k, v in batch.items()}
        loss_value, grad_norm, n_action = _sft_update(model, opt, sched, batch, sft_cfg, step)
        record = {
            "step": step + 1,
            "loss": loss_value,
            "lr": lr,
            "grad_norm": grad_norm,
            "action_tokens": n_action,
            "tokens": int(batch["attention_mask"].sum()),
            "elapsed_s": time.perf_counter() - t0,
        }
        history.append(record)
        if on_step is not None:
            on_step(record)
        _log_sft_step(step, sft_cfg.steps, log_every, record, lr, grad_norm)
    model.eval()
    return history


def _sft_update(model, opt, sched, batch: dict[str, torch.Tensor], sft_cfg, step: int) -> tuple[float, float, int]:
    """One optimizer step on ``batch``: ``(loss, grad_norm, action_tokens)``, the loss and the
    gradient norm (before clipping) as floats. Raises ``FloatingPointError`` when either is not finite.
    With ``sft_cfg.micro_batch_size`` smaller than the batch, the gradient is accumulated over
    micro-batches (:func:`_accumulated_backward`)."""
    loss_on = getattr(sft_cfg, "loss_on", "actions")
    micro = getattr(sft_cfg, "micro_batch_size", None)
    if micro is None or micro >= len(batch["input_ids"]):
        loss, n_action = sft_loss(model, batch, loss_on)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        loss_value = loss.item()
    else:
        opt.zero_grad(set_to_none=True)
        loss_value, n_action = _accumulated_backward(model, batch, loss_on, micro)
    max_norm = sft_cfg.grad_clip if sft_cfg.grad_clip > 0 else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    if not math.isfinite(loss_value) or not math.isfinite(grad_norm):
        raise FloatingPointError(f"SFT step {step + 1}: loss {loss_value}, grad norm {grad_norm}")
    opt.step()
    sched.step()
    return loss_value, grad_norm, n_action


def _accumulated_backward(model, batch: dict[str, torch.Tensor], loss_on: str, micro: int) -> tuple[float, int]:
    """Backward of the whole batch's loss ``L`` = ``sum_c n_c L_c / N``, ``micro`` sequences at a time:
    ``L_c`` is micro-batch ``c``'s mean NLL over its ``n_c`` targets and ``N = sum_c n_c``, so the
    accumulated gradient is the whole batch's (up to float rounding) while only one micro-batch's
    activations are held (SmolLM2, 8 x 600 tokens: peak RSS 8.5 -> 4.3 GB at micro 2,
    ``bench/smol_memory.py``). Returns ``(L, N)``; ``ValueError`` when the batch has no target."""
    rows = len(batch["input_ids"])
    chunks = [{k: v[i : i + micro] for k, v in batch.items()} for i in range(0, rows, micro)]
    counts = [int(_targets(chunk, loss_on)[:, 1:].sum()) for chunk in chunks]
    total = sum(counts)
    if total == 0:
        raise ValueError("the batch has no action tokens to train on")
    loss_value = 0.0
    for chunk, n in zip(chunks, counts):
        if n:  # a micro-batch without targets adds nothing
            loss, _ = sft_loss(model, chunk, loss_on)
            (loss * (n / total)).backward()
            loss_value += loss.item() * n / total
    return loss_value, total


def _targets(batch: dict[str, torch.Tensor], loss_on: str) -> torch.Tensor:
    """The tokens :func:`sft_loss` trains on (before the shift): ``action_mask``, or with ``loss_on:
    response`` every response token."""
    return response_mask(batch) if loss_on == "response" else batch["action_mask"]


def _log_sft_step(step: int, steps: int, log_every: int, record: dict, lr: float, grad_norm: float) -> None:
    """Log 0-based ``step`` (its ``record``) every ``log_every`` steps and at the last of ``steps``."""
    if log_every and ((step + 1) % log_every == 0 or step + 1 == steps):
        log.info(
            "sft step %d/%d loss %.4f lr %.2e grad %.2f (%.1fs)",
            step + 1,
            steps,
            record["loss"],
            lr,
            grad_norm,
            record["elapsed_s"],
        )


@torch.no_grad()
def mean_action_nll(model, trajectories: Sequence[Trajectory], pad_id: int, batch_size: int = 8) -> float:
    """Mean NLL over all action tokens of ``trajectories`` (no gradient; eval mode)."""
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    for start in range(0, len(trajectories), batch_size):
        batch = collate(list(trajectories[start : start + batch_size]), pad_id)
        logp, mask = action_logprobs(model, batch)
        total += float(-(logp * mask).sum())
        count += int(mask.sum())
    model.train(was_training)
    return total / max(count, 1)


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all ``sequences`` share (0 for none)."""
    if not sequences:
        return 0
    n = min(len(x) for x in sequences)
    first = sequences[0]
    for i in range(n):
        if any(x[i] != first[i] for x in sequences):
            return i
    return n


def copyable_positions(ids: Sequence[int], is_action: Sequence[bool], prefix: int) -> list[tuple[int, str]]:
    """``(t, kind)`` for every copyable action token of ``ids`` (module docstring): ``kind`` is
    ``"continue"`` when position ``t - 1`` is a copyable action token too, else ``"start"``."""
    shown = set(ids[:prefix])
    seen: set[int] = set()
    out: list[tuple[int, str]] = []
    for t in range(len(ids)):
        if t >= prefix and is_action[t] and ids[t] not in shown and ids[t] in seen:
            kind = "continue" if out and out[-1][0] == t - 1 else "start"
            out.append((t, kind))
        if t >= prefix:
            seen.add(ids[t])
    return out


@torch.no_grad()
def copy_probe(model, trajectories: Sequence[Trajectory], pad_id: int, batch_size: int = 8) -> dict:
    """Teacher-forced copying of ``model`` on ``trajectories`` (module docstring): ``tokens``,
    ``top1`` and ``nll`` over all copyable tokens and per kind (``start``, ``continue``); a
    count of 0 gives ``None`` values."""
    if not trajectories:
        raise ValueError("no trajectories to probe")
    prefix = common_prefix_length([t.prompt_ids for t in trajectories])
    hits: dict[str, list[float]] = {"start": [], "continue": []}
    nlls: dict[str, list[float]] = {"start": [], "continue": []}
    device = next(model.parameters(), torch.empty(0)).device
    was_training = model.training
    model.eval()
    for start in range(0, len(trajectories), batch_size):
        chunk = list(trajectories[start : start + batch_size])
        picks = []  # (row, position whose logits predict the token, token, kind)
        for row, traj in enumerate(chunk):
            is_action = [False] * len(traj.prompt_ids) + [bool(a) for a in traj.action_mask]
            picks += [
                (row, t - 1, traj.input_ids[t], kind)
                for t, kind in copyable_positions(traj.input_ids, is_action, prefix)
            ]
        if not picks:
            continue
        rows, positions, targets, kinds = zip(*picks)
        batch = collate(chunk, pad_id)
        logits = model(
            input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)
        ).logits
        logp = torch.log_softmax(logits[list(rows), list(positions)].float(), -1)  # only the scored positions in fp32
        target = torch.tensor(targets, device=logp.device)
        hit = (logp.argmax(-1) == target).tolist()
        nll = (-logp.gather(-1, target[:, None]).squeeze(-1)).tolist()
        for kind, h, n in zip(kinds, hit, nll):
            hits[kind].append(float(h))
            nlls[kind].append(n)
    model.train(was_training)

    def stats(h: list[float], n: list[float]) -> dict:
        return {"tokens": len(h), "top1": sum(h) / len(h) if h else None, "nll": sum(n) / len(n) if n else None}

    out = stats(hits["start"] + hits["continue"], nlls["start"] + nlls["continue"])
    out.update({kind: stats(hits[kind], nlls[kind]) for kind in hits})
    return out
