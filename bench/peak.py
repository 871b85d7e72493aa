"""Peak fp32 matmul FLOP/s with torch: the GEMMs of the nano and smol models, 1 thread vs all.

Not a test. Run from the repository root:

    python bench/peak.py                     # ~1-2 min on 2 cores
    python bench/peak.py --square 4096 --smol-tokens 4096 --repeats 7   # bigger

Each GEMM is ``[M, K] @ [K, N]`` (``2*M*K*N`` FLOPs) with ``M`` = tokens in a batch, in two
layouts: ``NN`` (``B`` stored ``[K, N]``) and ``NT`` (``B`` stored ``[N, K]`` and transposed: what
``nn.Linear`` does with its ``[out, in]`` weight); the row keeps the faster one:

* nano (params.yaml ``model.scratch``: hidden 128, intermediate 512, vocab 8192), ``M`` = 8 x 1024
  tokens: attention projection 128->128, MLP up/gate 128->512, MLP down 512->128, LM head 128->8192;
* smol (SmolLM2-135M: hidden 576, intermediate 1536, vocab 49152), ``M`` = ``--smol-tokens``
  (default 2048; the 49152-wide head makes 8192 tokens slow on one core): 576->576, 576->1536,
  1536->576, 576->49152;
* a large square GEMM (``--square``, default 2048).

Thread counts are measured alternately (1, all, 1, all, ...) inside one run, so load from other
processes on the shared machine hits both alike; each (shape, threads) keeps its best and median
of ``--repeats`` timed rounds (each round >= ``--min-time`` s of back-to-back matmuls after a
warm-up). "peak" (per thread count) is the best FLOP/s over all shapes; ``bench/rl_step.py``
divides achieved FLOP/s by it (MFU).

Results: a table on stdout and ``bench/results/peak.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch


def shapes(nano_tokens: int, smol_tokens: int, square: int) -> list[tuple[str, int, int, int]]:
    """(name, M, K, N) of every GEMM measured."""
    return [
        ("nano attn proj 128x128", nano_tokens, 128, 128),
        ("nano mlp up 128x512", nano_tokens, 128, 512),
        ("nano mlp down 512x128", nano_tokens, 512, 128),
        ("nano lm head 128x8192", nano_tokens, 128, 8192),
        ("smol attn proj 576x576", smol_tokens, 576, 576),
        ("smol mlp up 576x1536", smol_tokens, 576, 1536),
        ("smol mlp down 1536x576", smol_tokens, 1536, 576),
        ("smol lm head 576x49152", smol_tokens, 576, 49152),
        (f"square {square}", square, square, square),
    ]


def time_round(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, min_time: float) -> float:
    """FLOP/s of back-to-back ``a @ b`` for at least ``min_time`` seconds."""
    flops = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    n, t0 = 0, time.perf_counter()
    while True:
        torch.mm(a, b, out=out)
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return n * flops / dt


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nano-tokens", type=int, default=8 * 1024)
    ap.add_argument("--smol-tokens", type=int, default=2048)
    ap.add_argument("--square", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=4, help="timed rounds per (shape, threads)")
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per timed round")
    ap.add_argument("--threads", type=int, nargs="+", default=None, help="thread counts (default: 1 and all)")
    ap.add_argument("--out", default="bench/results/peak.json")
    args = ap.parse_args(argv)

    all_threads = os.cpu_count() or 1
    threads = args.threads or sorted({1, all_threads})
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name, m, k, n in shapes(args.nano_tokens, args.smol_tokens, args.square):
        a = torch.randn(m, k, generator=gen)
        layouts = {"NN": torch.randn(k, n, generator=gen), "NT": torch.randn(n, k, generator=gen).t()}
        out = torch.empty(m, n)
        samples: dict[tuple[int, str], list[float]] = {(t, lay): [] for t in threads for lay in layouts}
        for t in threads:  # warm-up per thread count (thread pool, caches)
            torch.set_num_threads(t)
            for b in layouts.values():
                torch.mm(a, b, out=out)
        for _ in range(args.repeats):
            for t in threads:  # alternate thread counts (and layouts)
                torch.set_num_threads(t)
                for lay, b in layouts.items():
                    samples[(t, lay)].append(time_round(a, b, out, args.min_time))
        per_thread = {}
        for t in threads:
            lay = max(layouts, key=lambda x: max(samples[(t, x)]))
            s = samples[(t, lay)]
            per_thread[str(t)] = {
                "best_gflops": max(s) / 1e9,
                "median_gflops": statistics.median(s) / 1e9,
                "layout": lay,
                "samples_gflops": {x: [round(v / 1e9, 2) for v in samples[(t, x)]] for x in layouts},
            }
        row = {"name": name, "M": m, "K": k, "N": n, "gflop": 2.0 * m * k * n / 1e9, "threads": per_thread}
        rows.append(row)
        print(
            f"{name}: " + ", ".join(f"{t} thr {row['threads'][str(t)]['best_gflops']:.1f}" for t in threads),
            file=sys.stderr,
            flush=True,
        )
        del a, layouts, out
    peak = {str(t): max(r["threads"][str(t)]["best_gflops"] for r in rows) for t in threads}
    peak_shape = {str(t): max(rows, key=lambda r: r["threads"][str(t)]["best_gflops"])["name"] for t in threads}
    result = {
        "machine": {
            "cpus": all_threads,
            "cpu": _cpu_name(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "peak_gflops": peak,
        "peak_shape": peak_shape,
        "gemms": rows,
        "note": "fp32 torch.mm; best of --repeats rounds and of the NN/NT layouts; thread counts alternated in one run",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    head = f"{'GEMM [M,K]x[K,N]':<26}{'M':>7}{'GFLOP':>8}" + "".join(
        f"{f'{t} thr best':>13}{f'{t} thr med':>12}" for t in threads
    )
    print(head)
    for r in rows:
        print(
            f"{r['name']:<26}{r['M']:>7}{r['gflop']:>8.2f}"
            + "".join(
                f"{r['threads'][str(t)]['best_gflops']:>13.1f}{r['threads'][str(t)]['median_gflops']:>12.1f}"
                for t in threads
            )
            + "  "
            + "/".join(r["threads"][str(t)]["layout"] for t in threads)
        )
    print("peak GFLOP/s: " + ", ".join(f"{t} thread(s) {peak[str(t)]:.1f} ({peak_shape[str(t)]})" for t in threads))
    print(f"wrote {args.out}")
    return result


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
