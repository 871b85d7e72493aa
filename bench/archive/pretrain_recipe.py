"""How fast does the nano base learn to read? One pretraining recipe per run (not a test).

Builds the scratch tokenizer and model, pretrains on reading drills over a stream of fresh
worlds (``agentr1.data.drills.stream_docs`` over ``agentr1.data.world.fresh_world``, no dataset
entity) with ``agentr1.lm.pretrain.pretrain_reader``, and every ``--eval-every`` steps measures
the reading gate on the dataset's dev entities (never trained on): one-hop (the asked entity's
passage alone) and multi-passage (3 passages), greedy, per relation. One JSON line per run is
appended to ``--out``; ``--save`` keeps the model.

    python bench/archive/pretrain_recipe.py --name A --steps 2000 --loss-on answers
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

from agentr1.config import load_config  # noqa: E402
from agentr1.data.drills import gate_drills, pretraining_docs, stream_docs  # noqa: E402
from agentr1.data.names import PARTS  # noqa: E402
from agentr1.data.world import build_world, corpus_rows, fresh_world  # noqa: E402
from agentr1.lm.pretrain import pretrain_reader, reading_accuracy  # noqa: E402
from agentr1.models import TOOL_TAGS, build_scratch_model, train_tokenizer  # noqa: E402


def gate(model, tok, docs):
    rows = reading_accuracy(model, tok, docs, detail=True)
    per = defaultdict(list)
    for d, h in zip(docs, rows):
        per[d.facts[0].relation].append(h["correct"])
    n = len(rows)
    return {
        "acc": round(sum(h["correct"] for h in rows) / n, 4),
        "first": round(sum(h["first"] for h in rows) / n, 4),
        "nll": round(sum(h["nll"] for h in rows) / n, 3),
        "per": {r: round(sum(v) / len(v), 3) for r, v in sorted(per.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--loss-on", default="answers")
    ap.add_argument("--passages", default="1,2,3")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--question-first", type=float, default=0.0)
    ap.add_argument("--context", type=int, default=0)
    ap.add_argument("--prefix-test", action="store_true", help="also read the gate after the agent's system prompt")
    ap.add_argument("--answer-weight", type=float, default=1.0)
    ap.add_argument("--families", type=int, default=100)
    ap.add_argument("--docs-per-world", type=int, default=2000)
    ap.add_argument("--bpe-vocab", type=int, default=1500)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default=None)
    ap.add_argument("--out", default="bench/results/pretrain_recipe.jsonl")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = load_config("params.yaml")
    syn = cfg.data.synthetic
    world = build_world(syn, cfg.seed)
    corpus = corpus_rows(world, syn.distractor_sentences, cfg.seed)
    taken = {e.name for e in world.entities}
    passages = tuple(int(x) for x in a.passages.split(","))
    one = gate_drills(world, corpus, ["dev"], 1, a.eval_n, cfg.seed)
    multi = gate_drills(world, corpus, ["dev"], 3, a.eval_n, cfg.seed)
    after = None
    if a.prefix_test:  # the same one-hop drills after the agent's system prompt (what SFT must read through)
        from agentr1.data.drills import Doc
        from agentr1.env.load import load_env

        sp = load_env(cfg).system_prompt() + "\n"
        after = [
            Doc(
                sp + d.text,
                targets=[(x + len(sp), y + len(sp)) for x, y in d.targets],
                facts=d.facts,
                prompt_end=d.prompt_end + len(sp),
            )
            for d in one
        ]

    t0 = time.perf_counter()
    sample = fresh_world(a.families, f"{a.seed}/tokenizer", taken=taken)
    srng = random.Random(0)
    texts = [next(stream_docs(sample, srng, syn.distractor_sentences, passages, a.questions)).text for _ in range(3000)]
    words = sorted({w for pool in PARTS.values() for w in pool})
    tok = train_tokenizer(texts, a.bpe_vocab, TOOL_TAGS, whole_words=words)
    scratch = cfg.model.scratch.model_copy(
        update={
            "hidden_size": a.hidden,
            "num_layers": a.layers,
            "num_heads": a.heads,
            "num_kv_heads": a.heads,
            "intermediate_size": 4 * a.hidden,
        }
    )
    model = build_scratch_model(scratch, tok, seed=a.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocab {len(tok)} params {n_params / 1e6:.2f}M setup {time.perf_counter() - t0:.1f}s", flush=True)

    docs = pretraining_docs(
        taken, a.seed, a.families, a.docs_per_world, syn.distractor_sentences, passages, a.questions, a.question_first
    )
    curve = []
    tally = {"tokens": 0, "targets": 0, "loss": []}

    def on_step(r):
        tally["tokens"] += r["tokens"]
        tally["targets"] += r["targets"]
        tally["loss"] = (tally["loss"] + [r["loss"]])[-20:]
        if r["step"] % a.eval_every == 0 or r["step"] == a.steps:
            g1, g3 = gate(model, tok, one), gate(model, tok, multi)
            if after is not None:
                tally["after"] = gate(model, tok, after)["acc"]
            row = {
                "step": r["step"],
                "after_prompt": tally.get("after"),
                "loss": round(sum(tally["loss"]) / len(tally["loss"]), 4),
                "tokens": tally["tokens"],
                "train_s": round(r["elapsed_s"], 1),
                "one": g1["acc"],
                "multi": g3["acc"],
                "first": [g1["first"], g3["first"]],
                "nll": [g1["nll"], g3["nll"]],
                "one_per": g1["per"],
                "multi_per": g3["per"],
            }
            curve.append(row)
            print(json.dumps(row), flush=True)

    pcfg = SimpleNamespace(
        steps=a.steps,
        batch_size=a.batch,
        lr=a.lr,
        warmup_steps=a.warmup,
        weight_decay=0.01,
        loss_on=a.loss_on,
        context=a.context,
        answer_weight=a.answer_weight,
    )
    hist = pretrain_reader(model, tok, docs, pcfg, on_step=on_step, log_every=0)
    out = {
        "name": a.name,
        "args": vars(a),
        "vocab": len(tok),
        "params": n_params,
        "elapsed_s_incl_eval": round(hist[-1]["elapsed_s"], 1),
        "target_share": round(tally["targets"] / tally["tokens"], 4),
        "curve": curve,
    }
    with open(a.out, "a") as f:
        f.write(json.dumps(out) + "\n")
    if a.save:
        model.save_pretrained(a.save)
        tok.save_pretrained(a.save)


if __name__ == "__main__":
    main()
