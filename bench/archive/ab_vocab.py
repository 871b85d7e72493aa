"""SmolLM2 RL step with the full vs the world-restricted vocabulary (``model.restrict_vocab``), side by side.

Not a test. Run from the repository root after ``dvc repro index`` (~6 min on 2 cores):

    python bench/archive/ab_vocab.py --rounds 2

Two GRPO trainers on the same world (the smol step of bench/_rl.py: ``--smol-questions`` x
``--smol-group`` episodes, short turns), one on SmolLM2-135M as converted from the GGUF, one on
the same weights after :func:`agentr1.models.vocab.restrict_vocabulary` with the texts the sft
stage uses (corpus, every question, the oracle's episode texts). After one warm-up step each,
they alternate ``--rounds`` measured steps (full, cut, full, cut, ...); each step is split into
rollout / prepare (old + ref log-probs) / update. Results: a table of seconds per phase and the
cut/full ratio, and ``bench/results/ab_vocab.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

from agentr1.data.schema import read_dataset  # noqa: E402
from agentr1.io import write_json_atomic  # noqa: E402
from agentr1.models.vocab import restrict_vocabulary  # noqa: E402
from agentr1.rollout.oracle import corpus_titles, plan_all, unique_questions, world_texts  # noqa: E402

PHASES = ("rollout_s", "prepare_s", "update_s", "step_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--run", default="grpo")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smol-steps", type=int, default=1)  # unused; add_smol_args compatibility
    ap.add_argument("--out", default="bench/results/ab_vocab.json")
    _rl.add_smol_args(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    world = _rl.load_world(a.params, _rl.smol_world_overrides("smol", a))
    cfg = world.cfg
    tcfg, rcfg = _rl.step_configs("smol", cfg, a)
    cache = _rl.default_smol_cache(cfg)
    full, tok, source = _rl.load_model("smol", cfg, smol_cache=cache)
    cut, cut_tok, _ = _rl.load_model("smol", cfg, smol_cache=cache)
    ds = read_dataset(cfg.data.processed_dir)
    full_env = _rl.load_world(a.params).env  # the texts come from the params' env, not the step's shortened one
    train = unique_questions(world.train_q)[:200]
    plans = plan_all(train, corpus_titles(ds.corpus), full_env.fmt, 0.0, cfg.seed, full_env.max_turns, True)
    cut, cut_tok, info = restrict_vocabulary(cut, cut_tok, world_texts(ds, full_env, train, plans))
    sides = {
        "full": _rl.make_trainer(full, tok, world, tcfg, rcfg),
        "cut": _rl.make_trainer(cut, cut_tok, world, tcfg, rcfg),
    }
    times: dict[str, list[dict]] = {k: [] for k in sides}
    for step in range(a.rounds + 1):
        for name, trainer in sides.items():
            t0 = time.perf_counter()
            m = trainer.train_step(step + 1)
            row = {k: m[f"time/{k}"] for k in PHASES[:-1]}
            row["step_s"] = time.perf_counter() - t0
            if step:  # step 0 = warm-up
                times[name].append(row)
            print(f"round {step} {name:4s} " + " ".join(f"{k} {row[k]:.1f}" for k in PHASES), flush=True)
    med = {name: {k: statistics.median(r[k] for r in rows) for k in PHASES} for name, rows in times.items()}
    print(
        f"\nSmolLM2-135M ({source}); vocabulary {info['before']} -> {info['after']}; "
        f"{tcfg.batch_questions}x{tcfg.group_size} episodes per step, {a.threads} threads"
    )
    print(f"{'phase':10s} {'full s':>8s} {'cut s':>8s} {'cut/full':>9s}")
    for k in PHASES:
        print(f"{k:10s} {med['full'][k]:8.2f} {med['cut'][k]:8.2f} {med['cut'][k] / med['full'][k]:9.3f}")
    write_json_atomic(
        Path(a.out),
        {
            "vocab": info,
            "threads": a.threads,
            "rounds": a.rounds,
            "median_s": med,
            "rounds_s": times,
            "episodes_per_step": tcfg.batch_questions * tcfg.group_size,
        },
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
