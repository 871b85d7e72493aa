"""What the portable numerics pin costs: MKL's COMPATIBLE branch against its AVX2 branch, side by side.

Issue 47's question. ``MKL_CBWR=AVX2,STRICT`` (the pin until then) gives Intel CPUs one set of bits
and AMD CPUs another: MKL's conditional numerical reproducibility guide says the AVX2 branch is
not taken on non-Intel CPUs (they run the AUTO branch instead). ``COMPATIBLE`` (SSE2 code, no
approximate reciprocals) is the branch MKL documents for Intel and non-Intel CPUs alike. It is
slower where MKL does the work (the matrix products); everything else (torch's own AVX2 kernels)
is the same code under both. How much slower is this bench's answer.

The pin is read when torch loads, so every measurement is a fresh worker process started with one
pin (``agentr1.numerics.PINS``); the two pins alternate ``--rounds`` times (A B A B ...), so the
machine's drift hits both alike. Each worker times, after a warm-up of each:

* ``pretrain``: ``--steps`` steps of the ``pretrain`` stage itself (its policy, tokenizer and drill
  stream, :func:`agentr1.lm.pretrain.pretrain_reader`: ``pretrain.batch_size`` rows packed to
  ``pretrain.context`` tokens, forward, backward, clipping, AdamW), after its first step - the
  stage that takes hours;
* ``update``: a forward + backward + AdamW step of the committed base (``data/models/init``) on a
  batch shaped like an RL update (``--rows`` sequences of ``--seq`` tokens);
* ``generate``: greedy decoding of ``--new`` tokens for ``--rows`` prompts of ``--prompt`` tokens
  with the KV cache (the rollouts and evaluations).

Reported: the median seconds of each workload per pin, and the median of the per-round ratios
portable / avx2 (table on stdout, ``bench/results/numerics_pin.json``). Run it alone on the
machine (no training beside it):

    .venv/bin/python bench/numerics_pin.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))
from numerics_fingerprint import cpu_info  # noqa: E402  (torch loads only inside its fingerprint())

from agentr1.numerics import PINS, SWITCH  # noqa: E402  (light: no torch)

WORKLOADS = ("pretrain", "update", "generate")


def worker(a: argparse.Namespace) -> dict:
    """One process under one pin: the three workloads' seconds (module docstring)."""
    from agentr1.numerics import pin_cpu_numerics

    pinned = pin_cpu_numerics()  # the pin AGENTR1_CPU_NUMERICS names, before torch loads (as every stage)
    import torch

    assert all(os.environ.get(k) == v for k, v in pinned.items()) and pinned, "the worker runs unpinned"

    from agentr1.config import load_config
    from agentr1.data.drills import pretraining_docs
    from agentr1.data.world import build_world
    from agentr1.lm.pretrain import pretrain_reader
    from agentr1.models import load_checkpoint
    from agentr1.models.build import scratch_policy

    torch.set_num_threads(a.threads)
    cfg = load_config(ROOT / "params.yaml")
    pcfg, syn = cfg.pretrain, cfg.data.synthetic
    out: dict[str, float] = {}

    def timed(name: str, fn, n: int) -> None:
        fn()  # warm-up
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out[name] = (time.perf_counter() - t0) / n

    taken = {e.name for e in build_world(syn, cfg.seed).entities}
    model, tok = scratch_policy(cfg, taken)
    docs = pretraining_docs(
        taken,
        cfg.seed,
        pcfg.world_families,
        pcfg.docs_per_world,
        syn.distractor_sentences,
        pcfg.passages,
        pcfg.questions,
        pcfg.question_first,
    )
    history = pretrain_reader(model, tok, docs, pcfg.model_copy(update={"steps": a.steps + 1}), log_every=0)
    out["pretrain"] = (history[-1]["elapsed_s"] - history[0]["elapsed_s"]) / a.steps

    base, base_tok = load_checkpoint(ROOT / pcfg.out_dir, cfg.model.dtype)
    gen = torch.Generator().manual_seed(0)
    vocab = len(base_tok)
    ids = torch.randint(4, vocab, (a.rows, a.seq), generator=gen)
    bopt = torch.optim.AdamW(base.parameters(), lr=1e-4)

    def update_step() -> None:
        base.train()
        loss = base(input_ids=ids, labels=ids).loss
        bopt.zero_grad(set_to_none=True)
        loss.backward()
        bopt.step()

    timed("update", update_step, a.steps)

    prompts = torch.randint(4, vocab, (a.rows, a.prompt), generator=gen)
    base.eval()

    def generate() -> None:
        with torch.no_grad():
            base.generate(
                prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=a.new,
                min_new_tokens=a.new,
                do_sample=False,
                pad_token_id=base_tok.pad_token_id,
            )

    timed("generate", generate, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="timed steps of pretrain and update (after one warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--seq", type=int, default=640)
    ap.add_argument("--prompt", type=int, default=480)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--pins", nargs=2, default=["portable", "avx2"], choices=sorted(PINS))
    ap.add_argument("--out", default=str(ROOT / "bench/results/numerics_pin.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    times: dict[str, list[dict[str, float]]] = {p: [] for p in a.pins}
    argv = [
        sys.executable,
        __file__,
        "--worker",
        *sum(([f"--{k}", str(getattr(a, k))] for k in ("steps", "threads", "rows", "seq", "prompt", "new")), []),
    ]
    for r in range(a.rounds):
        for pin in a.pins:
            env = {**os.environ, SWITCH: pin, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
            res = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
            times[pin].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {pin}: " + ", ".join(f"{k} {v:.3f}s" for k, v in times[pin][-1].items()), flush=True)
    a_pin, b_pin = a.pins
    rows = {}
    print(f"\n{'workload':<10}{a_pin + ' s':>14}{b_pin + ' s':>12}{'ratio ' + a_pin + '/' + b_pin:>24}")
    for w in WORKLOADS:
        ta = [t[w] for t in times[a_pin]]
        tb = [t[w] for t in times[b_pin]]
        ratios = [x / y for x, y in zip(ta, tb)]
        rows[w] = {
            a_pin: statistics.median(ta),
            b_pin: statistics.median(tb),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "rounds": {a_pin: ta, b_pin: tb},
        }
        print(
            f"{w:<10}{rows[w][a_pin]:>14.3f}{rows[w][b_pin]:>12.3f}{rows[w]['ratio_median']:>14.2f} "
            f"[{min(ratios):.2f}, {max(ratios):.2f}]"
        )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(
        json.dumps(
            {
                "pins": {p: PINS[p] for p in a.pins},
                "settings": {k: getattr(a, k) for k in ("rounds", "steps", "threads", "rows", "seq", "prompt", "new")},
                "cpu": cpu_info()["model_name"],
                "workloads": rows,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
