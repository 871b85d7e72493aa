"""Calculator fuzz timing: adversarial expressions through ``CalculatorTool`` (validate + execute).

    python bench/calculator_fuzz.py [--seed 0] [--per-category 150] [--out bench/results/calculator_fuzz.json]

:func:`adversarial_expressions` (seeded; also used by ``tests/test_calculator.py``) builds the
cases in categories: huge exponents, deep nesting, names, attributes, lambdas/calls/statements,
unicode digits, division by zero, big literals and magnitudes, malformed syntax and random
well-formed arithmetic. Each call is timed with ``time.perf_counter`` (validate, then execute as
the environment would); the JSON holds count, successes and median / p99 / max milliseconds per
category and overall.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

SENTINEL = "agentr1_calculator_fuzz_sentinel"
UNICODE_DIGITS = "٠١٢٣٤٥٦٧٨٩۰۱۲۳٤۵۶۷۸۹०१२३४५६७८९০১২৩৪৫৬৭৮৯０１２３４５６７８９²³¹⁴½¼Ⅻ𝟎𝟏𝟐𝟗"
ALLOWED = "0123456789.eE_+-*/%() "


def _arith(rng: random.Random, depth: int) -> str:
    """A random well-formed arithmetic expression."""
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([str(rng.randint(0, 10 ** rng.randint(1, 6))), f"{rng.uniform(-100, 100):.3f}", "0", "1e3"])
    op = rng.choice(["+", "-", "*", "/", "//", "%", "**"])
    left, right = _arith(rng, depth - 1), _arith(rng, depth - 1)
    if op == "**":
        right = str(rng.randint(-3, 80))
    return f"({left} {op} {right})" if rng.random() < 0.5 else f"{left}{op}{right}"


def adversarial_expressions(seed: int = 0, per_category: int = 150) -> list[tuple[str, str]]:
    """``(category, expression)`` pairs, ``per_category`` random ones per category after the
    fixed ones; deterministic for a seed."""
    rng = random.Random(seed)
    fixed: dict[str, list[str]] = {
        "huge_exponent": [
            "9**9**9",
            "2**100000",
            "10**10**10",
            "(10**15)**(10**15)",
            "10.0**400",
            "2**-100000",
            "(-8)**0.5",
            "1e-300**-64",
            "0**-1",
            "(2**64)**64",
            "-(9**9)**9",
            "2.5**1e10",
        ],
        "deep_nesting": [
            "(" * 99 + "1" + ")" * 99,
            "-" * 199 + "1",
            "+-" * 99 + "1",
            "1" + "+1" * 99,
            "2" + "**1" * 99,
            "((((2**2)**2)**2)**2)**2",
            "(" * 150 + "1",
            "1" + ")" * 150,
            "(" * 2000 + "1" + ")" * 2000,
        ],
        "names": ["x", "e", "E", "ee", "pi", "True", "None", "__builtins__", "inf", "nan", "e+1", "1+e", "_", "__"],
        "attributes": [
            "(1).__class__",
            "().__class__.__bases__[0].__subclasses__()",
            "1 .real",
            "'a'.upper()",
            "1 .e",
            "(1).__add__(2)",
            "1..e",
            "[].__class__",
        ],
        "lambdas_calls_statements": [
            "lambda: 1",
            "(lambda x: x)(1)",
            "[x for x in range(10**9)]",
            f"__import__('os').system('touch {SENTINEL}')",
            f"open('{SENTINEL}', 'w')",
            "exec('1')",
            "eval('1')",
            "1; 2",
            "x = 1",
            "import os",
            "del x",
            "1 if 1 else 2",
            "1 < 2",
            "not 1",
            "1 and 2",
            "~1",
            "1 << 1000",
            "1 & 3",
            "{}",
            "[1]",
            "'1'",
            "b'1'",
            "1j",
            "f'{1}'",
            "...",
            "yield 1",
            "await 1",
            "(x := 1)",
            "1 @ 2",
        ],
        "unicode_digits": ["١+١", "１＋１", "2²", "½*2", "Ⅻ", "३*३", "𝟗𝟗", "1 ÷ 2", "3 × 4", "1,000 * 2", "2^3", "1−1"],
        "division_by_zero": [
            "1/0",
            "1//0",
            "1%0",
            "0**-1",
            "1/(2-2)",
            "5.0/0.0",
            "1 % (3-3)",
            "0/0",
            "-1//0.0",
            "2**-1/0",
        ],
        "big_magnitude": [
            "9" * 199,
            "1e308*10",
            "1e999",
            "-1e999",
            "99999999999999999*99999999999999999",
            "1e15+1",
            "1000000000000000 * 10",
            "1e16",
            "2**53",
            "0.1**64",
        ],
        "malformed": ["", " ", "+", "1+", "*1", "1+*2", "((1)", "1)", "()", "1..2", "1e", "1__0", "012", "1 2", "..."],
    }
    out = [(cat, e) for cat, exprs in fixed.items() for e in exprs]
    letters = "abcdefghijklmnopqrstuvwxyz_"
    for _ in range(per_category):
        out.append(("huge_exponent", f"{rng.randint(2, 10**6)}**{rng.randint(65, 10**9)}"))
        out.append(("huge_exponent", "**".join(str(rng.randint(2, 99)) for _ in range(rng.randint(2, 6)))))
        k = rng.randint(1, 3000)
        out.append(
            ("deep_nesting", rng.choice(["(" * k + "1" + ")" * k, "-" * k + "1", "1" + "*1" * k, "(" * k + "1"]))
        )
        name = "".join(rng.choice(letters) for _ in range(rng.randint(1, 8)))
        out.append(("names", rng.choice([name, f"{name}+1", f"2*{name}", f"{name}({rng.randint(0, 9)})"])))
        out.append(("attributes", f"({rng.randint(0, 99)}).{name}" + rng.choice(["", "()", ".__class__"])))
        out.append(
            (
                "lambdas_calls_statements",
                rng.choice(
                    [
                        f"lambda {name}: {name}",
                        f"{name} = 1",
                        f"({name} := 2)",
                        f"[{name} for {name} in range(9)]",
                        f"{name}.{name}()",
                    ]
                ),
            )
        )
        s = "".join(rng.choice(UNICODE_DIGITS + "+-*/ 12") for _ in range(rng.randint(1, 12)))
        out.append(("unicode_digits", s))
        k = rng.randint(1, 9)
        out.append(
            ("division_by_zero", f"{_arith(rng, 2)} {rng.choice(['/', '//', '%'])} ({k} - {k}) * {_arith(rng, 1)}")
        )
        out.append(
            (
                "big_magnitude",
                rng.choice(
                    [
                        str(rng.randint(10**15, 10**199)),
                        f"{rng.randint(1, 9)}e{rng.randint(16, 400)}",
                        f"{10 ** rng.randint(8, 15)} * {10 ** rng.randint(8, 15)}",
                    ]
                ),
            )
        )
        out.append(("malformed", "".join(rng.choice(ALLOWED) for _ in range(rng.randint(1, 40)))))
        out.append(("random_arithmetic", _arith(rng, rng.randint(1, 5))))
    return out


def time_calls(tool, cases: list[tuple[str, str]]) -> list[dict]:
    """validate + execute per case as the environment runs them; one row per case."""
    rows = []
    for cat, expr in cases:
        t0 = time.perf_counter()
        problems = tool.validate({"expression": expr})
        result = tool.execute({"expression": expr})
        ms = (time.perf_counter() - t0) * 1000
        rows.append({"category": cat, "ms": ms, "valid": not problems, "success": result.success})
    return rows


def summarize(rows: list[dict]) -> dict:
    def stats(rs: list[dict]) -> dict:
        ms = sorted(r["ms"] for r in rs)
        return {
            "count": len(rs),
            "valid": sum(r["valid"] for r in rs),
            "success": sum(r["success"] for r in rs),
            "median_ms": round(statistics.median(ms), 4),
            "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 4),
            "max_ms": round(ms[-1], 4),
        }

    cats = sorted({r["category"] for r in rows})
    return {"overall": stats(rows), "categories": {c: stats([r for r in rows if r["category"] == c]) for c in cats}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-category", type=int, default=150)
    ap.add_argument("--out", default="bench/results/calculator_fuzz.json")
    args = ap.parse_args(argv)
    from agentr1.env.calculator import CalculatorTool

    tool = CalculatorTool()
    cases = adversarial_expressions(args.seed, args.per_category)
    time_calls(tool, cases[:50])  # warm-up (first-call imports, caches)
    summary = summarize(time_calls(tool, cases))
    summary |= {"seed": args.seed, "random_per_category": args.per_category, "python": sys.version.split()[0]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{'category':26s} {'count':>6s} {'valid':>6s} {'ok':>6s} {'median ms':>10s} {'p99 ms':>8s} {'max ms':>8s}")
    for cat, st in [*summary["categories"].items(), ("overall", summary["overall"])]:
        print(
            f"{cat:26s} {st['count']:6d} {st['valid']:6d} {st['success']:6d} {st['median_ms']:10.4f} {st['p99_ms']:8.4f} {st['max_ms']:8.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
