"""Which cold start and which RL make the nano agent beat its cold start on test? (issue 37)

Three commands, each one CLI call of the pipeline plus an evaluation, tracking off, into
``--work`` (default ``/tmp/lr``); one JSON line per call appended to
``bench/results/learning_round.jsonl``:

* ``sft NAME --set KEY=VALUE ...``: ``agentr1 sft`` with the overrides into ``WORK/NAME/model``,
  then :func:`evaluate` of the cold start;
* ``rl NAME --from COLD --set KEY=VALUE ...``: ``agentr1 train --run grpo`` (or ``--run``) from
  the cold start ``WORK/COLD/model``, its dev curve, then :func:`evaluate` of the final policy;
* ``eval NAME``: :func:`evaluate` of ``WORK/NAME/model`` (a cold start) again with other settings.

:func:`evaluate`: greedy EM, tool calls per episode and the early-answer share on the first
``--dev`` dev questions and (``--test``) on the test split; with ``--k K`` also K samples per
dev question at ``--temperature`` (sampled EM, pass@K and the share of questions a sample
solves and greedy does not). Usage (one at a time: two trainings side by side on 2 cores run
~10x slower, unless each gets ``--threads 1``)::

    python bench/learning_round.py sft A600 --set sft.steps=600
    python bench/learning_round.py rl A600_fresh --from A600 --set train.questions=fresh train.steps=100
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from pathlib import Path

from cold_start_rl import agentr1

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "learning_round.jsonl"


def evaluate(model_dir: Path, a) -> dict:
    """Greedy dev (and test) metrics of the policy in ``model_dir``; sampled ones with ``a.k``."""
    import torch

    from agentr1.config import load_config
    from agentr1.data.schema import read_dataset
    from agentr1.env.load import load_env
    from agentr1.eval.episodes import tool_policy_batch
    from agentr1.eval.quick import sample_policy
    from agentr1.eval.setup import EvalSetup
    from agentr1.models import load_checkpoint
    from agentr1.rollout import make_backend

    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = load_config(ROOT / "params.yaml")
    ds = read_dataset(ROOT / cfg.data.processed_dir)
    env = load_env(cfg)
    model, tok = load_checkpoint(model_dir, cfg.model.dtype)
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    rollout = cfg.rollout.model_copy(update={"batch_size": 64})
    setup = EvalSetup(make_backend(rollout, model=model, tokenizer=tok), tok, env, rollout, cfg.reward, seed=cfg.seed)
    out: dict = {}
    splits = [("dev", ds.split("dev")[: a.dev])] + ([("test", ds.split("test"))] if a.test else [])
    greedy_em: dict[str, list[float]] = {}
    for split, qs in splits:
        rows, _ = tool_policy_batch(setup, qs, split)
        n = len(rows)
        greedy_em[split] = [r["em"] for r in rows]
        out[split] = {
            "n": n,
            "em": round(sum(r["em"] for r in rows) / n, 4),
            "tool_calls": round(sum(r["tool_calls"] for r in rows) / n, 3),
            "early_answer": round(sum(r["early_answer"] for r in rows) / n, 3),
            "types": {
                t: round(sum(r["em"] for r in rows if r["type"] == t) / max(1, sum(r["type"] == t for r in rows)), 3)
                for t in sorted({r["type"] for r in rows})
            },
        }
    if a.k:
        qs = ds.split("dev")[: a.dev]
        sampling = rollout.model_copy(update={"temperature": a.temperature, "top_p": a.top_p})
        ems = sample_policy(EvalSetup(setup.backend, tok, env, sampling, cfg.reward, seed=cfg.seed + 1), qs, a.k)
        g = greedy_em["dev"]
        out["dev_sampled"] = {
            "k": a.k,
            "temperature": a.temperature,
            "top_p": a.top_p,
            "sampled_em": round(sum(sum(r) / len(r) for r in ems) / len(ems), 4),
            "pass_at_k": round(sum(max(r) >= 1 for r in ems) / len(ems), 4),
            "sample_not_greedy": round(sum(max(r) >= 1 and not gi for r, gi in zip(ems, g)) / len(ems), 4),
            "informative": round(sum(0 < sum(r) < len(r) for r in ems) / len(ems), 4),
        }
    return out


def curve(run_dir: Path) -> dict:
    rows = list(csv.DictReader((run_dir / "curve.csv").open()))
    steps = [r for r in rows if r["reward"]]

    def mean(key, part):
        vals = [float(r[key]) for r in part if r.get(key)]
        return round(sum(vals) / len(vals), 3) if vals else None

    return {
        "dev_em": [[int(r["step"]), round(float(r["dev_em"]), 4)] for r in rows if r["dev_em"]],
        "reward_first10": mean("reward", steps[:10]),
        "reward_last10": mean("reward", steps[-10:]),
        "tool_calls_first10": mean("tool_calls", steps[:10]),
        "tool_calls_last10": mean("tool_calls", steps[-10:]),
        "informative_groups": mean("informative_groups", steps),
        "steps": len(steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=["sft", "rl", "eval"])
    ap.add_argument("name")
    ap.add_argument("--set", nargs="*", default=[], dest="sets", help="overrides KEY=VALUE")
    ap.add_argument("--from", dest="cold", help="rl: the cold start's name")
    ap.add_argument("--run", default="grpo", help="rl: named run of params `runs`")
    ap.add_argument("--work", default="/tmp/lr")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dev", type=int, default=200, help="dev questions evaluated")
    ap.add_argument("--test", action="store_true", help="evaluate the test split too")
    ap.add_argument("--k", type=int, default=0, help="samples per dev question (0 = none)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=1.0)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    work = Path(a.work)
    d = work / a.name
    d.mkdir(parents=True, exist_ok=True)
    rec: dict = {"cmd": a.cmd, "name": a.name, "sets": a.sets, "date": time.strftime("%Y-%m-%d %H:%M")}
    if a.cmd == "sft":
        rec["wall_s"] = round(
            agentr1(
                ["sft"], a.sets + [f"sft.out_dir={d}/model", f"sft.report_dir={d}/report"], d / "sft.log", a.threads
            ),
            1,
        )
        m = json.loads((d / "report" / "metrics.json").read_text())
        rec["sft"] = {
            "loss": m["train"]["final_loss"],
            "epochs": m["train"]["epochs"],
            "oracle_em": m["oracle"]["em"],
            "copy": {k: m["copy"]["cold_start"][k]["top1"] for k in ("start", "continue")},
        }
        model = d / "model"
    elif a.cmd == "rl":
        rec["from"] = a.cold
        rec["run"] = a.run
        cold = work / a.cold / "model"
        rec["wall_s"] = round(
            agentr1(
                ["train", "--run", a.run],
                a.sets + [f"sft.out_dir={cold}", f"train.out_dir={d}"],
                d / "train.log",
                a.threads,
            ),
            1,
        )
        rec["curve"] = curve(d / a.run)
        model = d / a.run / "checkpoint"
    else:
        model = d / "model"
    rec["eval"] = evaluate(model, a)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
