"""Which verdicts two reports disagree on: every judged entry of two ``report.json`` files.

Not a test. Usage (e.g. the same commit's report from two machines, or two seed sets)::

    python bench/report_diff.py A/report.json B/report.json [-v]

Walks both files for every entry that carries a verdict (``beyond_noise`` with ``diff``:
``ablations`` and ``vs_baselines``, per split and the average; the ``summary`` is left out, its
sentences are made from these) and prints how many are shared and each one whose verdict
(beyond noise, judged) differs, with both differences and intervals; ``-v`` also prints the
agreeing ablation and cold-start entries off ood.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any


def judged(d: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    """``(path, entry)`` for every dict below ``d`` that holds a verdict."""
    if isinstance(d, dict):
        if "beyond_noise" in d and "diff" in d:
            yield path, d
            return
        for k, v in d.items():
            yield from judged(v, (*path, str(k)))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from judged(v, (*path, str(i)))


def entries(path: str) -> dict[str, dict]:
    report = json.load(open(path))
    return {"/".join(k): v for k, v in judged({k: v for k, v in report.items() if k != "summary"})}


def fmt(v: dict) -> str:
    word = "BEYOND" if v["beyond_noise"] else "within"
    return f"{v['diff']:+.3f} [{v['ci_lower']:+.3f}, {v['ci_upper']:+.3f}] {word}"


def main(argv: list[str]) -> int:
    a, b = entries(argv[0]), entries(argv[1])
    keys = sorted(set(a) & set(b))
    differ = [
        k for k in keys if (a[k]["beyond_noise"], a[k].get("judged")) != (b[k]["beyond_noise"], b[k].get("judged"))
    ]
    print(f"{len(keys)} shared entries ({len(set(a) ^ set(b))} not shared); {len(differ)} verdicts differ")
    for k in differ:
        print(f"  {k}: A {fmt(a[k])} | B {fmt(b[k])}")
    if "-v" in argv:
        for k in keys:
            if k not in differ and not k.endswith("/ood") and ("ablations" in k or "/cold_start/" in k):
                print(f"  = {k}: A {fmt(a[k])} | B {fmt(b[k])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
