"""Retrieval benchmark: build time and queries/s of BM25 and dense at 10k and 100k passages.

Not a test. Run from the repository root:

    HF_HUB_OFFLINE=1 python bench/retrieval.py                       # BM25 10k+100k, dense 10k
    HF_HUB_OFFLINE=1 python bench/retrieval.py --dense-sizes 10000 100000   # also dense 100k

Passages are synthetic (generated here, seeded): Wikipedia-like paragraphs over a made-up
vocabulary with a Zipf word distribution plus English function words, each with a two-word
title. Queries name a passage's title and a few of its words, like the questions of the nano world,
so the benchmark also checks that the right passage comes first (``title_hit@1``).

BM25 runs on one core (BLAS/OpenMP threads set to 1 before numpy loads; the query path is one
thread anyway). Dense runs with ``--threads`` torch/faiss threads (default: every core; MiniLM
encoding 10k passages on one core takes many minutes); its queries/s include encoding the queries
with MiniLM, which dominates, and ``faiss_search_queries_per_s`` is the index alone.
Results: a table on stdout and ``bench/results/retrieval.json``.
"""

from __future__ import annotations

import argparse
import os
import sys

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="BM25 corpus sizes")
    p.add_argument(
        "--dense-sizes",
        type=int,
        nargs="*",
        default=[10_000],
        help="dense corpus sizes (100000 encodes 100k passages with MiniLM: slow on CPU)",
    )
    p.add_argument("--dense-indexes", nargs="+", default=["flat", "hnsw", "ivfpq"])
    p.add_argument("--queries", type=int, default=2000, help="BM25 queries per size")
    p.add_argument("--dense-queries", type=int, default=256, help="dense queries per size")
    p.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch/faiss threads for dense (default: all)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/retrieval.json")
    return p.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

FUNCTION_WORDS = ["the", "of", "and", "in", "was", "a", "to", "is", "by", "for", "with", "on", "as", "his", "her"]
SYLLABLES = [
    "ka",
    "lo",
    "mir",
    "ven",
    "tor",
    "sa",
    "quin",
    "dar",
    "el",
    "os",
    "tri",
    "bel",
    "nor",
    "ax",
    "um",
    "ri",
    "zan",
    "pe",
    "gol",
    "fa",
    "shu",
    "ber",
    "io",
    "crat",
    "wen",
    "dil",
    "mo",
    "rak",
    "ys",
    "tan",
]


def make_vocab(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct made-up words of 2-4 syllables."""
    words: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 5))))
        if w not in words:
            words.add(w)
            out.append(w)
    return out


def make_corpus(n: int, seed: int) -> tuple[list[dict], list[tuple[str, int]]]:
    """``n`` passages (40-80 words) and, per passage, one query (its title + 3 of its words)."""
    rng = np.random.default_rng(seed)
    vocab = make_vocab(50_000, rng)
    ranks = np.arange(1, len(vocab) + 1)
    zipf = (1.0 / ranks**1.07) / (1.0 / ranks**1.07).sum()
    lengths = rng.integers(40, 81, size=n)
    content = rng.choice(len(vocab), size=int(lengths.sum()), p=zipf)
    function = rng.choice(len(FUNCTION_WORDS), size=int(lengths.sum()))
    is_function = rng.random(int(lengths.sum())) < 0.3
    rows, queries, pos = [], [], 0
    for i in range(n):
        words = [
            FUNCTION_WORDS[function[j]] if is_function[j] else vocab[content[j]]
            for j in range(pos, pos + int(lengths[i]))
        ]
        pos += int(lengths[i])
        title = f"{vocab[20_000 + (i * 7919) % 30_000].title()} {vocab[5_000 + i % 15_000].title()} {i}"
        rows.append({"id": f"p{i}", "title": title, "text": " ".join(words).capitalize() + "."})
        picks = [w for w in rng.choice(words, size=3) if w not in FUNCTION_WORDS]
        queries.append((f"what is {title} known for {' '.join(picks)}", i))
    return rows, queries


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def time_search(retriever, queries: list[str], k: int, batch: int) -> tuple[float, float, list]:
    """(wall seconds, CPU seconds of this process, hits) to answer ``queries`` in batches of
    ``batch``, after a one-batch warm-up. On a shared machine the CPU seconds are the honest
    per-core cost: wall time also counts the time other processes held the core."""
    retriever.search(queries[:batch], k)
    t0, c0 = time.perf_counter(), time.process_time()
    hits = []
    for i in range(0, len(queries), batch):
        hits.extend(retriever.search(queries[i : i + batch], k))
    return time.perf_counter() - t0, time.process_time() - c0, hits


def bench_bm25(rows, queries, n_queries: int) -> dict:
    from agentr1.config import BM25Config
    from agentr1.retrieval.bm25 import BM25Retriever

    t0 = time.perf_counter()
    retriever = BM25Retriever.build(rows, BM25Config())
    build_s = time.perf_counter() - t0
    tmp = Path(tempfile.mkdtemp(prefix="bench-bm25-"))
    try:
        retriever.save(tmp)
        size = dir_bytes(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    qs = queries[:n_queries]
    seconds, cpu_s, hits = time_search(retriever, [q for q, _ in qs], k=5, batch=64)
    hit1 = float(np.mean([bool(h) and h[0].id == f"p{i}" for h, (_, i) in zip(hits, qs)]))
    return {
        "build_s": round(build_s, 2),
        "index_bytes": size,
        "queries": len(qs),
        "queries_per_s": round(len(qs) / seconds, 1),
        "queries_per_cpu_s": round(len(qs) / cpu_s, 1),
        "ms_per_query": round(1000 * seconds / len(qs), 3),
        "title_hit@1": round(hit1, 4),
        "pruned_fraction": round(retriever.pruned_queries / (len(qs) + 64), 3),
    }


def bench_dense(rows, queries, n_queries: int, kinds: list[str], threads: int) -> dict:
    import faiss
    import torch

    from agentr1.config import DenseConfig
    from agentr1.retrieval.dense import DenseRetriever, Encoder

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    encoder = Encoder.from_config(DenseConfig())
    t0 = time.perf_counter()
    emb = encoder.encode_passages([r["title"] + "\n" + r["text"] for r in rows])
    encode_s = time.perf_counter() - t0
    qs = queries[:n_queries]
    t0 = time.perf_counter()
    qemb = encoder.encode_queries([q for q, _ in qs])
    qencode_s = time.perf_counter() - t0
    out = {
        "encode_passages_s": round(encode_s, 2),
        "passages_per_s": round(len(rows) / encode_s, 1),
        "encode_queries_per_s": round(len(qs) / qencode_s, 1),
        "threads": threads,
        "indexes": {},
    }
    for kind in kinds:
        cfg = DenseConfig(index=kind)
        t0 = time.perf_counter()
        retriever = DenseRetriever.from_embeddings(rows, emb, encoder, cfg)
        faiss_build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, ids = retriever.search_embeddings(qemb, 5)
        search_s = time.perf_counter() - t0
        hit1 = float(np.mean([ids[j, 0] == i for j, (_, i) in enumerate(qs)]))
        total_q = qencode_s + search_s
        out["indexes"][kind] = {
            "build_s": round(encode_s + faiss_build_s, 2),
            "faiss_build_s": round(faiss_build_s, 2),
            "faiss_search_queries_per_s": round(len(qs) / search_s, 1),
            "queries_per_s": round(len(qs) / total_q, 1),
            "title_hit@1": round(hit1, 4),
            "index_bytes": int(faiss.serialize_index(retriever.index).nbytes),
        }
    return out


def write_json(path: str, results: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def main(args: argparse.Namespace) -> int:
    results: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "bm25": {},
        "dense": {},
    }
    table = [("backend", "passages", "build s", "queries/s", "q/cpu-s", "hit@1", "index MB")]
    for n in sorted(set(args.sizes) | set(args.dense_sizes)):
        rows, queries = make_corpus(n, args.seed)
        if n in args.sizes:
            r = bench_bm25(rows, queries, args.queries)
            results["bm25"][str(n)] = r
            table.append(
                (
                    "bm25 (1 core)",
                    n,
                    r["build_s"],
                    r["queries_per_s"],
                    r["queries_per_cpu_s"],
                    r["title_hit@1"],
                    r["index_bytes"] / 1e6,
                )
            )
            print(f"bm25 {n}: {r}", file=sys.stderr, flush=True)
        if n in args.dense_sizes:
            r = bench_dense(rows, queries, args.dense_queries, args.dense_indexes, args.threads)
            results["dense"][str(n)] = r
            for kind, ri in r["indexes"].items():
                table.append(
                    (
                        f"dense {kind} ({args.threads} thr)",
                        n,
                        ri["build_s"],
                        ri["queries_per_s"],
                        "-",
                        ri["title_hit@1"],
                        ri["index_bytes"] / 1e6,
                    )
                )
            print(f"dense {n}: {r}", file=sys.stderr, flush=True)
        write_json(args.out, results)  # after every size, so an interrupted run keeps what it measured
    skipped = [n for n in args.sizes if n not in args.dense_sizes]
    if skipped:
        results["dense"]["skipped"] = {"sizes": skipped, "why": "not in --dense-sizes (MiniLM encoding on CPU)"}
    write_json(args.out, results)
    for row in table:
        print(
            "{:<22} {:>9} {:>9} {:>10} {:>9} {:>7} {:>9}".format(
                *[f"{c:.2f}" if isinstance(c, float) else c for c in row]
            )
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
