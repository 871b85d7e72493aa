"""What one pretraining step costs: the output head everywhere vs only on targets, and the
vocabulary the world needs vs the old 8k one, side by side (not a test).

Four variants of the ``pretrain`` stage's step (``agentr1.lm.pretrain``), each on the same
batches the stage trains on (``pretrain.batch_size`` rows packed to ``pretrain.context`` tokens
with drill documents of a fresh world, the params' ``loss_on``):

* ``small-targets``: the stage as it runs - a BPE of ``model.scratch.vocab_size`` tokens plus one
  token per name part (about 3.6k), the output head only at the loss targets;
* ``small-full``: the same model, the head over every position (the loss is the same number);
* ``8k-targets`` / ``8k-full``: a BPE of 8192 tokens plus the name parts (the old nano vocabulary).

After a warm-up step each, the variants alternate ``--rounds`` times over ``--steps`` steps, so
machine noise hits them alike. Reported: seconds per step, tokens per second and the ratio to
``small-targets`` (table on stdout, ``bench/results/ab_pretrain_cost.json``). Run it alone on the
machine (no training beside it):

    python bench/archive/ab_pretrain_cost.py --rounds 3 --steps 10
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

from agentr1.config import load_config  # noqa: E402
from agentr1.data.drills import stream_docs  # noqa: E402
from agentr1.data.names import PARTS  # noqa: E402
from agentr1.data.world import fresh_world  # noqa: E402
from agentr1.io import write_json_atomic  # noqa: E402
from agentr1.lm.pretrain import document_batches, target_logits  # noqa: E402
from agentr1.lm.schedule import make_optimizer  # noqa: E402
from agentr1.models import TOOL_TAGS, build_scratch_model, train_tokenizer  # noqa: E402


def full_head_loss(model, batch):
    """The same loss through the full logits (the head over every position)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    mask = batch["targets"][:, 1:]
    return torch.nn.functional.cross_entropy(logits[mask].float(), batch["input_ids"][:, 1:][mask])


def head_on_targets_loss(model, batch):
    return torch.nn.functional.cross_entropy(*target_logits(model, batch))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results/ab_pretrain_cost.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = load_config(a.params)
    pcfg, syn = cfg.pretrain, cfg.data.synthetic
    docs_of = stream_docs(
        fresh_world(pcfg.world_families, "bench"),
        random.Random(0),
        syn.distractor_sentences,
        pcfg.passages,
        pcfg.questions,
        pcfg.question_first,
    )
    sample = list(islice(docs_of, pcfg.tokenizer_docs))
    parts = sorted({w for pool in PARTS.values() for w in pool})
    variants = {}
    for vocab_name, bpe in (("small", cfg.model.scratch.vocab_size), ("8k", 8192)):
        tok = train_tokenizer([d.text for d in sample], bpe, TOOL_TAGS, whole_words=parts)
        rest = stream_docs(
            fresh_world(pcfg.world_families, "bench/batches"),
            random.Random(1),
            syn.distractor_sentences,
            pcfg.passages,
            pcfg.questions,
            pcfg.question_first,
        )
        enc = list(islice(document_batches(tok, rest, pcfg), a.steps))
        for head, loss_fn in (("targets", head_on_targets_loss), ("full", full_head_loss)):
            model = build_scratch_model(cfg.model.scratch, tok, seed=0)
            variants[f"{vocab_name}-{head}"] = {
                "model": model,
                "opt": make_optimizer(model, pcfg.lr, pcfg.weight_decay),
                "batches": enc,
                "loss": loss_fn,
                "vocab": len(tok),
                "times": [],
            }

    def step(v, batch):
        v["model"].train()
        loss = v["loss"](v["model"], batch)
        v["opt"].zero_grad(set_to_none=True)
        loss.backward()
        v["opt"].step()
        return float(loss)

    for v in variants.values():  # warm-up
        step(v, v["batches"][0])
    for _ in range(a.rounds):
        for v in variants.values():
            t0 = time.perf_counter()
            for batch in v["batches"]:
                step(v, batch)
            v["times"].append((time.perf_counter() - t0) / len(v["batches"]))
    tokens = statistics.mean(int(b["attention_mask"].sum()) for b in variants["small-targets"]["batches"])
    targets = statistics.mean(int(b["targets"][:, 1:].sum()) for b in variants["small-targets"]["batches"])
    base = statistics.median(variants["small-targets"]["times"])
    rows = {}
    print(f"{'variant':<14}{'vocab':>7}{'s/step':>9}{'tokens/s':>10}{'ratio':>7}")
    for name, v in variants.items():
        med = statistics.median(v["times"])
        rows[name] = {
            "vocab": v["vocab"],
            "s_per_step": round(med, 4),
            "tokens_per_s": round(tokens / med, 1),
            "time_ratio_to_small_targets": round(med / base, 3),
            "rounds": [round(t, 4) for t in v["times"]],
        }
        print(f"{name:<14}{v['vocab']:>7}{med:>9.3f}{tokens / med:>10.0f}{med / base:>7.2f}")
    write_json_atomic(
        a.out,
        {
            "loss_on": pcfg.loss_on,
            "batch_size": pcfg.batch_size,
            "context": pcfg.context,
            "tokens_per_batch": tokens,
            "targets_per_batch": targets,
            "threads": a.threads,
            "steps": a.steps,
            "variants": rows,
        },
    )


if __name__ == "__main__":
    main()
