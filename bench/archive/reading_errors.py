"""Where does a base policy misread? Per relation of the reading gate (not a test).

For a saved base policy (``--model``), the gate's drills on the dataset's dev entities (one-hop
or multi-passage, ``--passages``): per relation the share of right first tokens, right answers,
and of the wrong answers how many (a) start with a name of another fact of the document, (b)
copy the right name but do not stop after it, (c) other; then a few wrong answers, greedy, with
the gold. Reads ``params.yaml`` for the world.

    python bench/archive/reading_errors.py --model /tmp/base --passages 1
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

from agentr1.config import load_config  # noqa: E402
from agentr1.data.drills import gate_drills  # noqa: E402
from agentr1.data.world import build_world, corpus_rows  # noqa: E402
from agentr1.lm.pretrain import reading_accuracy  # noqa: E402
from agentr1.models import load_checkpoint  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--passages", type=int, default=1)
    ap.add_argument("--n", type=int, default=240)
    ap.add_argument("--show", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config("params.yaml")
    world = build_world(cfg.data.synthetic, cfg.seed)
    corpus = corpus_rows(world, cfg.data.synthetic.distractor_sentences, cfg.seed)
    docs = gate_drills(world, corpus, ["dev"], a.passages, a.n, cfg.seed)
    model, tok = load_checkpoint(a.model)
    rows = reading_accuracy(model, tok, docs, detail=True)
    per = defaultdict(Counter)
    examples = defaultdict(list)
    for doc, r in zip(docs, rows):
        rel = doc.facts[0].relation
        per[rel]["n"] += 1
        per[rel]["first"] += r["first"]
        per[rel]["correct"] += r["correct"]
        if r["correct"]:
            continue
        ids = tok(doc.text[: doc.prompt_end], return_tensors="pt", add_special_tokens=False)["input_ids"]
        out = model.generate(ids, max_new_tokens=8, do_sample=False, attention_mask=torch.ones_like(ids))
        got = tok.decode(out[0, ids.shape[1] :]).split("\n")[0].strip()
        gold = doc.facts[0].answers[0]
        if got.startswith(gold):
            per[rel]["no_stop"] += 1
        elif r["first"]:
            per[rel]["first_ok_rest_wrong"] += 1
        else:
            per[rel]["wrong_start"] += 1
        examples[rel].append((doc.facts[0].question, gold, got))
    print(f"{'relation':<18}{'n':>4}{'first':>7}{'right':>7}{'no_stop':>9}{'1st ok':>8}{'wrong 1st':>10}")
    for rel, c in sorted(per.items()):
        print(
            f"{rel:<18}{c['n']:>4}{c['first'] / c['n']:>7.2f}{c['correct'] / c['n']:>7.2f}{c['no_stop']:>9}"
            f"{c['first_ok_rest_wrong']:>8}{c['wrong_start']:>10}"
        )
    for rel, ex in sorted(examples.items()):
        for q, gold, got in ex[: a.show]:
            print(f"  {rel}: {q} gold={gold!r} greedy={got!r}")


if __name__ == "__main__":
    main()
