"""A/B of the rollout KV cache kept across turns (``HFBackend(reuse_cache=...)``).

Not a test. Run from the repository root after ``dvc repro sft`` (it uses the cold-start policy
``sft.out_dir``, the BM25 index and the processed test split of params.yaml):

    python bench/archive/ab_kv_cache.py                      # ~2 min
    python bench/archive/ab_kv_cache.py --rounds 3 --eval-questions 64

Two workloads, each run with A = ``reuse_cache=False`` (every turn prefills the whole history, the
behaviour before) and B = ``reuse_cache=True``, alternated ``--rounds`` times in one process:

* ``eval``: greedy rollouts of ``--eval-questions`` test questions in one batch (as ``evaluate``);
* ``rl``: ``--rl-questions`` x ``--group`` sampled rollouts at T = 1 (one RL step's rollout).

Checked: A and B give the same token ids in every episode and log-probs within 1e-4.
Reported: median seconds of each, B/A, and the tokens each prefilled / reused.
Results: a table on stdout and ``bench/results/ab_kv_cache.json``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

from agentr1.config import load_config  # noqa: E402
from agentr1.data.schema import read_dataset  # noqa: E402
from agentr1.env.load import load_env as _load_env  # noqa: E402
from agentr1.io import write_json_atomic  # noqa: E402
from agentr1.models import load_checkpoint  # noqa: E402
from agentr1.rollout import RolloutEngine  # noqa: E402
from agentr1.rollout.hf import HFBackend  # noqa: E402


def run(engine: RolloutEngine, questions, group: int, seed: int):
    t0 = time.perf_counter()
    trajs = engine.rollout(questions, group_size=group, seed=seed)
    return time.perf_counter() - t0, trajs, dict(engine.stats)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--checkpoint", default=None, help="policy directory (default: sft.out_dir)")
    ap.add_argument("--eval-questions", type=int, default=64)
    ap.add_argument("--rl-questions", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/ab_kv_cache.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.params)
    ckpt = args.checkpoint or cfg.sft.out_dir
    model, tok = load_checkpoint(ckpt)
    env = _load_env(cfg)
    test = list(read_dataset(cfg.data.processed_dir).split("test"))
    workloads = {
        "eval": (test[: args.eval_questions], 1, cfg.rollout.model_copy(update={"temperature": 0.0, "batch_size": 64})),
        "rl": (test[: args.rl_questions], args.group, cfg.rollout),
    }
    times = {(w, m): [] for w in workloads for m in "AB"}
    stats, trajs = {}, {}
    for r in range(args.rounds):
        for w, (qs, group, rcfg) in workloads.items():
            for m, reuse in (("A", False), ("B", True)) if r % 2 == 0 else (("B", True), ("A", False)):
                engine = RolloutEngine(HFBackend(model, tok, reuse_cache=reuse), env, tok, rcfg)
                sec, tr, st = run(engine, qs, group, seed=r)
                times[(w, m)].append(sec)
                stats[(w, m)], trajs[(w, m)] = st, tr
            a, b = trajs[(w, "A")], trajs[(w, "B")]
            if [t.response_ids for t in a] != [t.response_ids for t in b]:
                raise SystemExit(f"{w}: the cached rollout differs from the uncached one (round {r})")
            worst = max((abs(x - y) for ta, tb in zip(a, b) for x, y in zip(ta.logprobs, tb.logprobs)), default=0.0)
            if worst > 1e-4:
                raise SystemExit(f"{w}: log-probs differ by {worst:.2e} (round {r})")

    rows = []
    print(f"policy {ckpt}, {args.rounds} alternated rounds, {args.threads} thread(s)")
    print(
        f"{'workload':<8} {'episodes':>8} {'A s (no cache)':>15} {'B s (cache)':>12} {'B/A':>6} "
        f"{'A prefilled':>12} {'B prefilled':>12} {'B reused':>9} {'gen tok':>8}"
    )
    for w in workloads:
        a, b = statistics.median(times[(w, "A")]), statistics.median(times[(w, "B")])
        ratios = [tb / ta for ta, tb in zip(times[(w, "A")], times[(w, "B")])]
        sa, sb = stats[(w, "A")], stats[(w, "B")]
        row = dict(
            workload=w,
            episodes=len(trajs[(w, "A")]),
            a_seconds=a,
            b_seconds=b,
            ratio=statistics.median(ratios),
            ratios=ratios,
            a_prefilled=sa["prefilled_tokens"],
            b_prefilled=sb["prefilled_tokens"],
            b_reused=sb["reused_tokens"],
            generated=sb["generated_tokens"],
            turns=sb["turns"],
        )
        rows.append(row)
        print(
            f"{w:<8} {row['episodes']:>8} {a:>15.2f} {b:>12.2f} {row['ratio']:>6.2f} "
            f"{row['a_prefilled']:>12} {row['b_prefilled']:>12} {row['b_reused']:>9} {row['generated']:>8}"
        )
    write_json_atomic(
        args.out,
        {
            "bench": "ab_kv_cache",
            "checkpoint": ckpt,
            "rounds": args.rounds,
            "threads": args.threads,
            "machine": platform.processor() or platform.machine(),
            "rows": rows,
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
