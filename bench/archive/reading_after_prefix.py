"""Does a base policy read after other text? The gate's one-hop drills, shifted (not a test).

A base that learned to read only at the start of a document can pass the gate (drills at
position 0) and still fail as an agent, whose passages come after a system prompt, the question
and earlier turns. For a saved base (``--model``), greedy reading accuracy
(:func:`agentr1.lm.pretrain.reading_accuracy`, the gate's measure) on the same one-hop drills over
dev entities, three ways:

* ``none``: the drill alone (what the gate measures);
* ``system prompt``: after the agent's system prompt (the env of ``params.yaml``);
* ``other passages``: after the passages of two other drills (test entities).

Table on stdout, one JSON line appended to ``--out``:

    python bench/archive/reading_after_prefix.py --model data/models/init
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

from agentr1.config import load_config  # noqa: E402
from agentr1.data.drills import Doc, gate_drills  # noqa: E402
from agentr1.data.world import build_world, corpus_rows  # noqa: E402
from agentr1.env.load import load_env  # noqa: E402
from agentr1.lm.pretrain import reading_accuracy  # noqa: E402
from agentr1.models import load_checkpoint  # noqa: E402


def shifted(docs: list[Doc], prefix: str) -> list[Doc]:
    """``docs`` with ``prefix`` before each text (character spans moved with it)."""
    n = len(prefix)
    return [
        Doc(prefix + d.text, targets=[(a + n, b + n) for a, b in d.targets], facts=d.facts, prompt_end=d.prompt_end + n)
        for d in docs
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results/reading_after_prefix.jsonl")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = load_config("params.yaml")
    world = build_world(cfg.data.synthetic, cfg.seed)
    corpus = corpus_rows(world, cfg.data.synthetic.distractor_sentences, cfg.seed)
    docs = gate_drills(world, corpus, ["dev"], 1, a.n, cfg.seed)
    others = gate_drills(world, corpus, ["test"], 3, 2, cfg.seed)
    model, tok = load_checkpoint(a.model)
    prefixes = {
        "none": "",
        "system prompt": load_env(cfg).system_prompt() + "\n",
        "other passages": "\n".join(o.text[: o.prompt_end].split("\nQuestion")[0] for o in others) + "\n",
    }
    rows = {}
    print(f"{'prefix':<16}{'tokens':>7}{'reading':>9}")
    for name, prefix in prefixes.items():
        hits = reading_accuracy(model, tok, shifted(docs, prefix))
        rows[name] = {
            "prefix_tokens": len(tok(prefix)["input_ids"]) if prefix else 0,
            "accuracy": sum(hits) / len(hits),
        }
        print(f"{name:<16}{rows[name]['prefix_tokens']:>7}{rows[name]['accuracy']:>9.3f}")
    with open(a.out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"model": a.model, "n": len(docs), "prefixes": rows}) + "\n")


if __name__ == "__main__":
    main()
