"""Issue 26 items 2 and 3: the retrieval server's worst accepted request and its memory under
maximal bodies, measured on two source trees side by side (``--before`` the unmodified code, e.g.
a worktree of main; ``--after`` this one).

Each scenario starts a fresh server process (``agentr1.retrieval.server.RetrievalServer`` of that
tree, its default limits, BM25 over the nano default corpus, address space capped at
``--as-limit-gib`` so a runaway cannot take the machine) and reads the server's own counters from
``/proc``: CPU time = utime + stime (not wall time: the machine is shared), peak RSS = ``VmHWM``.

- ``work``: the old worst request (512 queries of 4,096 characters of corpus words, topk 50,
  2.1 MB) and the largest ones the new limits accept (16 x 4,096 characters, topk 50; 512 x 128
  characters, topk 8): status, server CPU seconds, answer bytes;
- ``hangup``: the largest request each tree accepts, the client closing 0.2 s after sending it:
  server CPU spent in the 10 s after the hang-up;
- ``memory``: 4 and 64 concurrent maximal bodies of ``[],[],...`` (16 MiB: the old cap; the new
  cap is 1 MiB, and a 16 MiB one is refused by its Content-Length): peak RSS over the idle server,
  RSS 2 s after.

``python bench/server_bounds.py --before /work/wt-26-before/src --after src`` writes
``bench/results/server_bounds.json`` and ``.md``. Run it under ``nice -n 19``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = r"""
import resource, sys, json
import pyarrow.parquet as pq
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from agentr1.config import BM25Config
from agentr1.retrieval.bm25 import BM25Retriever
from agentr1.retrieval.server import RetrievalServer
rows = pq.read_table(sys.argv[1]).to_pylist()
srv = RetrievalServer(BM25Retriever.build(rows, BM25Config()), "127.0.0.1", 0).start()
print(srv.httpd.server_address[1], flush=True)
sys.stdin.read()
"""


def proc_stats(pid: int) -> dict[str, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    kib = lambda key: int(status.get(key, "0 kB").split()[0]) / 1024  # noqa: E731
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / tick, "rss_mib": kib("VmRSS"), "hwm_mib": kib("VmHWM")}


class Server:
    def __init__(self, src: str, corpus: Path, as_limit: int):
        env = {**os.environ, "PYTHONPATH": src}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(corpus), str(as_limit)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.proc.stdout.readline())

    def stats(self) -> dict[str, float]:
        return proc_stats(self.proc.pid)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def request(port: int, body: bytes, timeout: float = 600.0, hang_up_after: float | None = None) -> tuple[int, int]:
    """POST /retrieve -> (status, answer bytes); (0, 0) when the connection failed or was hung up."""
    head = b"POST /retrieve HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(head % len(body))
            sock.sendall(body)
            if hang_up_after is not None:
                time.sleep(hang_up_after)
                return 0, 0
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return 0, 0
                data += chunk
            status = int(data.split(b" ", 2)[1])
            length = int(
                next(line.split(b":")[1] for line in data.split(b"\r\n") if line.lower().startswith(b"content-length"))
            )
            got = len(data.split(b"\r\n\r\n", 1)[1])
            while got < length:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
            return status, got
    except OSError:
        return 0, 0


def settle(server: Server, quiet_s: float = 0.5, timeout: float = 60.0) -> None:
    """Until the server's CPU counter stops moving for ``quiet_s``."""
    end, last = time.monotonic() + timeout, server.stats()["cpu_s"]
    while time.monotonic() < end:
        time.sleep(quiet_s)
        now = server.stats()["cpu_s"]
        if now == last:
            return
        last = now


def queries(vocab: list[str], n: int, chars: int, seed: int) -> list[str]:
    rng, out = random.Random(seed), []
    for _ in range(n):
        words, size = [], 0
        while size < chars:
            w = rng.choice(vocab)
            words.append(w)
            size += len(w) + 1
        out.append(" ".join(words)[:chars])
    return out


def work(src: str, corpus: Path, vocab: list[str], as_limit: int) -> list[dict]:
    shapes = [
        ("512 x 4096 chars, topk 50", 512, 4096, 50),
        ("16 x 4096 chars, topk 50", 16, 4096, 50),
        ("512 x 128 chars, topk 8", 512, 128, 8),
    ]
    out = []
    for name, n, chars, topk in shapes:
        server = Server(src, corpus, as_limit)
        try:
            body = json.dumps({"queries": queries(vocab, n, chars, seed=n * chars), "topk": topk}).encode()
            settle(server)
            before = server.stats()["cpu_s"]
            status, size = request(server.port, body)
            settle(server)
            out.append(
                {
                    "request": name,
                    "body_bytes": len(body),
                    "status": status,
                    "answer_bytes": size,
                    "server_cpu_s": round(server.stats()["cpu_s"] - before, 3),
                }
            )
        finally:
            server.close()
        print(f"  work {name}: {out[-1]}", flush=True)
    return out


def hangup(src: str, corpus: Path, vocab: list[str], as_limit: int, n: int, chars: int, topk: int) -> dict:
    server = Server(src, corpus, as_limit)
    try:
        body = json.dumps({"queries": queries(vocab, n, chars, seed=7), "topk": topk}).encode()
        settle(server)
        request(server.port, body, hang_up_after=0.2)
        at_hangup = server.stats()["cpu_s"]
        time.sleep(10)
        return {
            "request": f"{n} x {chars} chars, topk {topk}",
            "cpu_after_hangup_s": round(server.stats()["cpu_s"] - at_hangup, 3),
        }
    finally:
        server.close()


def memory(src: str, corpus: Path, as_limit: int, body_bytes: int, concurrent: int) -> dict:
    n = (body_bytes - 2) // 3
    body = b"[" + b",".join([b"[]"] * n) + b"]"
    server = Server(src, corpus, as_limit)
    try:
        settle(server)
        idle = server.stats()
        results: list[tuple[int, int]] = []
        threads = [
            threading.Thread(target=lambda: results.append(request(server.port, body, timeout=300)))
            for _ in range(concurrent)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        settle(server)
        time.sleep(2)
        after = server.stats()
        statuses = sorted({s for s, _ in results})
        return {
            "body_mib": round(len(body) / 2**20, 2),
            "concurrent": concurrent,
            "statuses": statuses,
            "idle_rss_mib": round(idle["rss_mib"], 1),
            "peak_over_idle_mib": round(after["hwm_mib"] - idle["rss_mib"], 1),
            "rss_after_over_idle_mib": round(after["rss_mib"] - idle["rss_mib"], 1),
            "alive": server.proc.poll() is None,
        }
    finally:
        server.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="src/ of the unmodified tree")
    ap.add_argument("--after", default=str(ROOT / "src"))
    ap.add_argument("--as-limit-gib", type=float, default=4.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "server_bounds"))
    a = ap.parse_args(argv)
    as_limit = int(a.as_limit_gib * 2**30)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "agentr1.cli",
                "--params",
                str(ROOT / "params.yaml"),
                "--set",
                f"data.processed_dir={tmp}",
                "--set",
                "tracking.enabled=false",
                "prepare",
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": a.after},
        )
        corpus = Path(tmp) / "corpus.parquet"
        import pyarrow.parquet as pq

        vocab = sorted(
            {w for t in pq.read_table(corpus, columns=["text"]).column("text").to_pylist() for w in t.split()}
        )
        results: dict = {"as_limit_gib": a.as_limit_gib, "passages": pq.read_metadata(corpus).num_rows}
        for side, src, big in (("before", a.before, (512, 4096, 50)), ("after", a.after, (16, 4096, 50))):
            print(side, flush=True)
            results[side] = {
                "work": work(src, corpus, vocab, as_limit),
                "hangup": hangup(src, corpus, vocab, as_limit, *big),
                "memory": [memory(src, corpus, as_limit, size, c) for size in ((16 << 20), (1 << 20)) for c in (4, 64)],
            }
            print(json.dumps(results[side], indent=1), flush=True)
    Path(a.out + ".json").write_text(json.dumps(results, indent=1) + "\n")
    Path(a.out + ".md").write_text(table(results))
    print(table(results))


def table(r: dict) -> str:
    lines = [
        "# Retrieval server bounds (issue 26): before / after, server CPU time and peak RSS\n",
        f"BM25 over the nano corpus ({r['passages']} passages); server address space capped at "
        f"{r['as_limit_gib']} GiB; CPU = the server's utime+stime.\n",
        "| request | before: status, CPU s, answer MB | after: status, CPU s, answer MB |",
        "|---|---|---|",
    ]
    for b, a in zip(r["before"]["work"], r["after"]["work"]):
        cell = lambda x: f"{x['status']}, {x['server_cpu_s']:.2f} s, {x['answer_bytes'] / 1e6:.2f} MB"  # noqa: E731
        lines.append(f"| {b['request']} ({b['body_bytes'] / 1e6:.2f} MB) | {cell(b)} | {cell(a)} |")
    worst = {
        side: max((w["server_cpu_s"] for w in r[side]["work"] if w["status"] == 200), default=0.0)
        for side in ("before", "after")
    }
    lines += [
        "",
        f"**Worst accepted request: {worst['before']:.2f} s of server CPU before, {worst['after']:.2f} s after.**",
        "",
        f"Client hangs up 0.2 s after sending its largest accepted request: server CPU in the next 10 s "
        f"{r['before']['hangup']['cpu_after_hangup_s']:.2f} s before ({r['before']['hangup']['request']}), "
        f"{r['after']['hangup']['cpu_after_hangup_s']:.2f} s after ({r['after']['hangup']['request']}).",
        "",
        "| body of [],[],... | concurrent | before: statuses, peak over idle MiB, RSS after | after: statuses, "
        "peak over idle MiB, RSS after |",
        "|---|---|---|---|",
    ]

    def cell(x: dict) -> str:
        return f"{x['statuses']}, +{x['peak_over_idle_mib']:.0f}, +{x['rss_after_over_idle_mib']:.0f}" + (
            "" if x["alive"] else " (server died)"
        )

    for b, a in zip(r["before"]["memory"], r["after"]["memory"]):
        lines.append(f"| {b['body_mib']} MiB | {b['concurrent']} | {cell(b)} | {cell(a)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
