"""Pretraining a scratch policy to read: next-token loss on drill documents, only where it counts.

A drill document (:mod:`agentr1.data.drills`) is tokenized once with character offsets; token
``x_t`` is a *target* when its characters overlap the document's answer spans (``loss_on:
answers``), or when they overlap no first mention of a name (``loss_on: text``). For a batch of
documents (right-padded) with targets ``m_t`` and weights ``w_t`` (``answer_weight`` on the
answers' tokens, 1 on every other target)::

    L(theta) = - sum_i sum_{t>=1} m_t w_t log p_theta(x^(i)_t | x^(i)_<t)  /  sum_i sum_{t>=1} m_t w_t

With ``loss_on: text`` the many easy targets (the syntax of passages and questions, a name's
later mentions) form the copying heads, and the weight keeps the answers - a few percent of the
targets - from being drowned out by them.

Rows are packed (``context`` > 0): documents are tokenized and concatenated, one after the
other, into rows of ``context`` tokens (a document that does not fit starts the next row), and a
batch is ``batch_size`` rows. A document's answers are then read at any position and after any
amount of unrelated text before it - as in an agent's context, where the passage to read comes
after a system prompt of hundreds of tokens, the question and earlier turns (a base trained on
short documents alone reads 0.73 of one-hop drills at position 0 and 0.04 after the agent's
system prompt: ``bench/RESULTS.md``). Rows have no padding but their tail. With ``context`` 0
a batch is ``batch_size`` documents, right-padded.

Only the target positions go through the output head (``lm_head(h_{t-1})`` for each target
``t``): with answer targets that is ~10% of the tokens, and the head over the vocabulary is
about half of a small model's FLOPs per token. The result equals the loss of the full logits.

Optimisation: AdamW (betas 0.9/0.95, weight decay on matrices only), lr warmed up linearly over
``warmup_steps`` then cosine-decayed to ``0.1 * lr`` at ``steps`` (:mod:`agentr1.lm.schedule`),
gradient norm clipped at 1. Batches come from the caller's document stream (seeded), so a run is
deterministic on the CPU.

Reading accuracy (:func:`reading_accuracy`). Greedy decoding after a document's prompt writes
its gold answer (and then ends the line) exactly when every answer token, and the newline after
it, is the argmax of the model's distribution given the gold prefix. So one teacher-forced
forward pass per document decides, with no sampling and no generation loop, whether greedy
decoding reads the answer right: ``correct_i = all_t (argmax p(.|x_<t) == x_t)`` over the
answer's tokens ``t``. (A document's first answer is scored: the gate's documents have one.)
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence

import torch

from agentr1.lm.schedule import MIN_LR_RATIO, lr_lambda, make_optimizer, scheduler

log = logging.getLogger(__name__)

LOSS_ON = ("answers", "text")


def _overlaps(start: int, end: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(start < b and a < end for a, b in spans)


def encode_docs(tokenizer, docs, loss_on: str = "answers") -> list[tuple[list[int], list[bool], list[bool]]]:
    """``(ids, targets, answers)`` per document: the loss targets (module docstring; ``loss_on``
    in :data:`LOSS_ON`) and the answer tokens among them."""
    if loss_on not in LOSS_ON:
        raise ValueError(f"unknown loss_on {loss_on!r}; use one of {', '.join(LOSS_ON)}")
    enc = tokenizer([d.text for d in docs], add_special_tokens=False, return_offsets_mapping=True,
                    split_special_tokens=True)  # drill text never becomes a control token
    out = []
    for doc, ids, offsets in zip(docs, enc["input_ids"], enc["offset_mapping"]):
        answers = [_overlaps(a, b, doc.targets) for a, b in offsets]
        answers[0] = False  # nothing predicts the first token
        if loss_on == "answers":
            targets = list(answers)
        else:
            targets = [not _overlaps(a, b, doc.first_mentions) for a, b in offsets]
            targets[0] = False
        out.append((list(ids), targets, answers))
    return out


def collate_docs(encoded: Sequence[tuple[list[int], list[bool], list[bool]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask``, ``targets`` and ``answers`` (bool) tensors."""
    width = max(len(ids) for ids, _, _ in encoded)
    ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(encoded), width), dtype=torch.long)
    targets = torch.zeros((len(encoded), width), dtype=torch.bool)
    answers = torch.zeros((len(encoded), width), dtype=torch.bool)
    for row, (x, m, a) in enumerate(encoded):
        ids[row, : len(x)] = torch.tensor(x)
        attn[row, : len(x)] = 1
        targets[row, : len(m)] = torch.tensor(m)
        answers[row, : len(a)] = torch.tensor(a)
    return {"input_ids": ids, "attention_mask": attn, "targets": targets, "answers": answers}


def weighted_loss(logits: torch.Tensor, tokens: torch.Tensor, batch: dict[str, torch.Tensor],
                  answer_weight: float = 1.0) -> torch.Tensor:
    """The weighted mean NLL of the targets (module docstring): weight ``answer_weight`` on the
    answers' tokens, 1 on the other targets."""
    nll = torch.nn.functional.cross_entropy(logits, tokens, reduction="none")
    on_answer = batch["answers"][:, 1:][batch["targets"][:, 1:]]
    weights = torch.where(on_answer, torch.tensor(float(answer_weight)), torch.tensor(1.0))
    return (weights * nll).sum() / weights.sum()


def target_logits(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, tokens)``: the output head applied only at the positions that predict a
    target (``h_{t-1}`` for each target ``t``), and those targets' token ids."""
    ids, attn, targets = batch["input_ids"], batch["attention_mask"], batch["targets"]
    hidden = model.base_model(input_ids=ids, attention_mask=attn).last_hidden_state[:, :-1]
    mask = targets[:, 1:]
    return model.get_output_embeddings()(hidden[mask]).float(), ids[:, 1:][mask]


def packed_rows(tokenizer, docs: Iterator, context: int, loss_on: str,
                chunk: int = 64) -> Iterator[tuple[list[int], list[bool], list[bool]]]:
    """Endless rows of at most ``context`` tokens, each the concatenation of consecutive documents
    of ``docs`` (module docstring); a document longer than ``context`` is cut to it."""
    row: tuple[list[int], list[bool], list[bool]] = ([], [], [])
    while True:
        for ids, targets, answers in encode_docs(tokenizer, [next(docs) for _ in range(chunk)], loss_on):
            if row[0] and len(row[0]) + len(ids) > context:
                yield row
                row = ([], [], [])
            row[0].extend(ids[:context])
            row[1].extend(targets[:context])
            row[2].extend(answers[:context])


def document_batches(tokenizer, docs: Iterator, cfg) -> Iterator[dict[str, torch.Tensor]]:
    """Endless collated batches of ``cfg.batch_size`` rows: packed rows of ``cfg.context`` tokens
    (:func:`packed_rows`), or single documents when ``cfg.context`` is 0."""
    if cfg.context:
        rows = packed_rows(tokenizer, docs, cfg.context, cfg.loss_on)
        while True:
            yield collate_docs([next(rows) for _ in range(cfg.batch_size)], tokenizer.pad_token_id)
    while True:
        yield collate_docs(encode_docs(tokenizer, [next(docs) for _ in range(cfg.batch_size)], cfg.loss_on),
                           tokenizer.pad_token_id)


def pretrain_reader(
    model,
    tokenizer,
    docs: Iterator,
    cfg,
    on_step: Callable[[dict], None] | None = None,
    log_every: int = 100,
) -> list[dict]:
    """Train ``model`` in place for ``cfg.steps`` AdamW steps (module docstring), each on a batch
    of :func:`document_batches` over ``docs`` (:class:`agentr1.data.drills.Doc`: ``cfg.batch_size``
    rows packed to ``cfg.context`` tokens, or documents), loss on ``cfg.loss_on`` with
    ``cfg.answer_weight``; ``cfg`` also gives ``lr``, ``warmup_steps`` and ``weight_decay``.
    Returns one record per step (``step``, ``loss``, ``lr``, ``grad_norm``, ``tokens``,
    ``targets``, ``elapsed_s``); the model is left in eval mode."""
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay)
    sched = scheduler(opt, lr_lambda(cfg.lr, cfg.warmup_steps, cfg.steps, "cosine", MIN_LR_RATIO))
    device = next(model.parameters()).device
    batches = document_batches(tokenizer, docs, cfg)
    history: list[dict] = []
    t0 = time.perf_counter()
    model.train()
    for step in range(cfg.steps):
        lr = sched.get_last_lr()[0]
        batch = {k: v.to(device) for k, v in next(batches).items()}
        logits, tokens = target_logits(model, batch)
        loss = weighted_loss(logits, tokens, batch, cfg.answer_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        if not math.isfinite(loss.item()) or not math.isfinite(grad_norm):
            raise FloatingPointError(f"pretraining step {step + 1}: loss {loss.item()}, grad norm {grad_norm}")
        opt.step()
        sched.step()
        record = {"step": step + 1, "loss": loss.item(), "lr": lr, "grad_norm": grad_norm,
                  "tokens": int(batch["attention_mask"].sum()), "targets": int(tokens.numel()),
                  "elapsed_s": time.perf_counter() - t0}
        history.append(record)
        if on_step is not None:
            on_step(record)
        if log_every and ((step + 1) % log_every == 0 or step + 1 == cfg.steps):
            log.info("pretrain step %d/%d loss %.4f lr %.2e (%.1fs)", step + 1, cfg.steps, record["loss"], lr,
                     record["elapsed_s"])
    model.eval()
    return history


@torch.no_grad()
def reading_accuracy(model, tokenizer, docs, batch_size: int = 32, detail: bool = False) -> list:
    """Per document: does greedy decoding after its prompt write its first answer, then end the
    line? (module docstring: one teacher-forced pass decides it). ``detail``: per document a
    dict instead, ``{"correct", "first" (the answer's first token is the argmax), "nll" (mean
    over the answer's tokens)}``."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[bool] = []
    for start in range(0, len(docs), batch_size):
        chunk = list(docs[start : start + batch_size])
        encoded = encode_docs(tokenizer, chunk, "answers")
        for ids, targets, _ in encoded:  # score the first answer only
            first = targets.index(True)
            end = next((t for t in range(first, len(targets)) if not targets[t]), len(targets))
            targets[end:] = [False] * (len(targets) - end)
        batch = {k: v.to(device) for k, v in collate_docs(encoded, tokenizer.pad_token_id).items()}
        logits, tokens = target_logits(model, batch)
        hits = (logits.argmax(-1) == tokens).tolist()
        nll = torch.nn.functional.cross_entropy(logits, tokens, reduction="none").tolist()
        k = 0
        for ids, targets, _ in encoded:
            n = sum(targets[1:])
            correct = all(hits[k : k + n])
            out.append({"correct": correct, "first": bool(hits[k]), "nll": sum(nll[k : k + n]) / n} if detail else correct)
            k += n
    model.train(was_training)
    return out


def gate_report(model, tokenizer, drills: dict[tuple[str, str], list], one_hop: float, multi: float) -> dict:
    """The reading gate: for each ``(split, kind)`` of ``drills`` (``kind`` ``one_hop`` or
    ``multi``), the greedy reading accuracy overall and per relation (:func:`reading_accuracy`),
    and ``passed``: every kind's accuracy, overall and for every relation of every split, at
    least its threshold (``one_hop``, ``multi``)."""
    need = {"one_hop": one_hop, "multi": multi}
    out: dict = {"splits": {}, "thresholds": need, "failing": []}
    for (split, kind), docs in drills.items():
        hits = reading_accuracy(model, tokenizer, docs)
        per: dict[str, list[bool]] = {}
        for doc, hit in zip(docs, hits):
            per.setdefault(doc.facts[0].relation, []).append(hit)
        entry = {"n": len(hits), "accuracy": sum(hits) / len(hits),
                 "relations": {r: {"n": len(v), "accuracy": sum(v) / len(v)} for r, v in sorted(per.items())}}
        out["splits"].setdefault(split, {})[kind] = entry
        if entry["accuracy"] < need[kind]:
            out["failing"].append(f"{split}/{kind}")
        out["failing"] += [f"{split}/{kind}/{r}" for r, v in entry["relations"].items() if v["accuracy"] < need[kind]]
    out["passed"] = not out["failing"]
    return out
