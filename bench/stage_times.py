"""Where a `make run` spent its time, read from its log (`make run > run.log 2>&1`).

Not a test. Usage::

    python bench/stage_times.py run.log [-v]

Per kind of stage (``train``, ``evaluate``, ...): how many ran, the time inside them (first to
last timestamped log line of the stage) and the gap before each (from the previous stage's last
line to this one's first: the stage process starting - imports, MLflow set-up - the previous
one exiting and DVC between them; ``bench/stage_gap.py`` splits it). Then, over the train stages
of 16 steps, the median plain step (its rollout and update as the trainer logs them) and what
the steps that also evaluate on dev (step 1: the step-0 dev evaluation; every ``train.dev.every``
= 4th step) take beyond it. ``-v`` prints every stage.
"""

from __future__ import annotations

import collections
import datetime as dt
import re
import statistics as st
import sys

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
MLFLOW_STAMP = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) ")
STEP = re.compile(r"^(\S+ \S+) INFO agentr1.rl.trainer: step (\d+)/(\d+) .*rollout ([\d.]+)s update ([\d.]+)s")
TRAIN_START = re.compile(r"^(\S+ \S+) INFO agentr1.stages.train: (train@\S+): \w+, ")
TRAIN_DONE = re.compile(r"^(\S+ \S+) INFO agentr1.stages.train: (train@\S+): reward")


def stamp(line: str) -> dt.datetime | None:
    if m := STAMP.match(line):
        return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
    if m := MLFLOW_STAMP.match(line):
        return dt.datetime.strptime(m.group(1), "%Y/%m/%d %H:%M:%S")
    return None


def stages(lines: list[str], verbose: bool) -> None:
    found, cur = [], None
    for line in lines:
        if m := re.match(r"Running stage '([^']+)'", line):
            cur = {"stage": m.group(1), "first": None, "last": None}
            found.append(cur)
        elif cur is not None and (t := stamp(line)):
            cur["first"] = cur["first"] or t
            cur["last"] = t
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    prev = None
    for s in (s for s in found if s["first"]):
        gap = (s["first"] - prev).total_seconds() if prev else 0.0
        inside = (s["last"] - s["first"]).total_seconds()
        prev = s["last"]
        k = kinds[s["stage"].split("@")[0]]
        k[0] += 1
        k[1] += gap
        k[2] += inside
        if verbose:
            print(f"{s['stage']:40s} gap {gap:6.1f} s  inside {inside:7.1f} s")
    for name, (n, gap, inside) in kinds.items():
        print(
            f"{name:20s} n={n:3d}  inside {inside / 60:5.1f} min ({inside / n:5.1f} s each)  gap {gap / 60:4.1f} min ({gap / n:4.1f} s each)"
        )
    print(
        f"all stages: inside {sum(k[2] for k in kinds.values()) / 60:.1f} min, gaps {sum(k[1] for k in kinds.values()) / 60:.1f} min"
    )


def steps(lines: list[str]) -> None:
    parse = lambda s: dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f")  # noqa: E731
    runs, cur, prev = {}, None, None
    for line in lines:
        if m := TRAIN_START.match(line):
            cur = runs.setdefault(m.group(2), {"steps": {}, "t0": parse(m.group(1))})
            prev = cur["t0"]
        elif cur is not None and (m := STEP.match(line)):
            t = parse(m.group(1))
            cur["steps"][int(m.group(2))] = ((t - prev).total_seconds(), float(m.group(4)), float(m.group(5)))
            prev = t
        elif cur is not None and (m := TRAIN_DONE.match(line)):
            cur["end"] = parse(m.group(1))
    full = [r for r in runs.values() if len(r["steps"]) == 16 and "end" in r]
    if not full:
        return
    plain, extra, first, roll, upd, total = [], [], [], [], [], []
    for r in full:
        s = r["steps"]
        base = st.median([s[k][0] for k in s if k % 4 and k != 1])
        plain.append(base)
        extra += [s[k][0] - base for k in (4, 8, 12, 16)]
        first.append(s[1][0] - base)
        roll += [v[1] for v in s.values()]
        upd += [v[2] for v in s.values()]
        total.append((r["end"] - r["t0"]).total_seconds())
    dev = 4 * st.mean(extra) + st.mean(first)
    print(
        f"{len(full)} train stages of 16 steps: {st.mean(total):.1f} s each from the first log line; plain step "
        f"{st.median(plain):.2f} s (rollout {st.median(roll):.2f} s, update {st.median(upd):.2f} s); the steps with a "
        f"dev evaluation {st.mean(extra):.2f} s longer (step 1: {st.mean(first):.2f} s), {dev:.1f} s a run"
    )


def main(argv: list[str]) -> int:
    lines = open(argv[0], errors="replace").read().splitlines()
    stages(lines, "-v" in argv)
    steps(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
