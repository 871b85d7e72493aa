"""Profile one nano RL step of agentr1's Trainer: cProfile (Python call tree) + torch.profiler (ops).

Not a test. Run from the repository root:

    python bench/profile_step.py            # 1 warm-up step, then step 2 under cProfile, step 3 under torch.profiler (~2 min)

The trainer is the one of bench/rl_step.py (nano SFT checkpoint, params ``grpo`` run, BM25
ToolEnv over the synthetic world, 1 thread). Step 2 runs under cProfile (which slows Python-heavy
code, so its phase seconds are higher than an unprofiled step; compare shares, not absolutes);
step 3 runs under ``torch.profiler`` (CPU activities) for the operator table.

Writes ``bench/results/profile.json`` (phase split, top functions by cumulative and own time,
hand-picked hot spots, top torch ops), ``bench/results/profile_cprofile.txt`` and
``bench/results/profile_torch_ops.txt``; prints the hot-spot table.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

# (label, substring of "file:line(function)" in pstats) - the costs the optimization notes talk about
HOT = [
    ("rollout: RolloutEngine.rollout", "engine.py", "rollout"),
    ("rollout: HF model.generate (all turns)", "generation/utils.py", "generate"),
    ("rollout: HFBackend.generate", "rollout/hf.py", "generate"),
    ("rollout: GeneratedStopStrings (decode per token)", "rollout/hf.py", "__call__"),
    ("rollout: char_ends (decode every prefix)", "engine.py", "char_ends"),
    ("rollout: ToolEnv.step_batch (parse + BM25 + render)", "toolenv.py", "step_batch"),
    ("rollout: BM25 search", "bm25.py", "search"),
    ("rollout: tokenizer decode", "tokenization_utils_base.py", "decode"),
    ("prepare: Trainer.prepare (old+ref log-probs, adv.)", "trainer.py", "prepare"),
    ("prepare+update: PolicyLogProbs.forward", "models/forward.py", "forward"),
    ("update: Trainer.update", "trainer.py", "update"),
    ("update: loss.backward", "torch/_tensor.py", "backward"),
    ("update: AdamW step", "optim/adamw.py", "step"),
    ("update: clip_grad_norm_", "clip_grad.py", "clip_grad_norm_"),
    ("rollout: generate prefill (whole context, every turn)", "generation/utils.py", "_prefill"),
    ("model: LlamaModel.forward (all passes, no backward)", "modeling_llama.py", "LlamaModel"),
    ("model: LlamaAttention.forward (proj + rope + sdpa)", "modeling_llama.py", "LlamaAttention"),
    ("model: sdpa_attention_forward", "sdpa_attention.py", "sdpa_attention_forward"),
    ("model: LlamaMLP.forward", "modeling_llama.py", "LlamaMLP"),
    ("model: causal mask creation", "masking_utils.py", "create_causal_mask"),
]


def _line_of(cls_name: str) -> int | None:
    """First line of ``<cls>.forward`` in transformers' Llama module (decorators unwrapped)."""
    import inspect

    from transformers.models.llama import modeling_llama

    cls = getattr(modeling_llama, cls_name, None)
    return inspect.unwrap(cls.forward).__code__.co_firstlineno if cls is not None else None


def hot_spots(stats: pstats.Stats) -> list[dict]:
    rows = []
    for label, file_part, func in HOT:
        best = None
        line_wanted = _line_of(func) if func.startswith("Llama") else None
        for (fname, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():  # noqa: B007
            match = (fn == "forward" and line == line_wanted) if line_wanted else fn == func
            if match and file_part in fname:
                if best is None or ct > best["cumulative_s"]:
                    best = {
                        "label": label,
                        "where": f"{Path(fname).name}:{line}({fn})",
                        "calls": nc,
                        "own_s": tt,
                        "cumulative_s": ct,
                    }
        if best:
            rows.append(best)
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--run", default="grpo")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out", default="bench/results/profile.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    world = _rl.load_world(args.params)
    model, tok, source = _rl.load_model("nano", world.cfg)
    trainer = _rl.make_trainer(model, tok, world, _rl.bench_train_cfg(world.cfg, args.run), world.cfg.rollout)
    timer = _rl.PhaseTimer(trainer)
    warm = timer.step(1)["seconds"]
    print(f"warm-up step: {json.dumps({k: round(v, 2) for k, v in warm.items()})}", file=sys.stderr, flush=True)

    prof = cProfile.Profile()
    prof.enable()
    prof_step = timer.step(2)["seconds"]
    prof.disable()
    stats = pstats.Stats(prof)
    total = prof_step["total"]

    def top(sort: str) -> tuple[list[dict], str]:
        buf = io.StringIO()
        s = pstats.Stats(prof, stream=buf)
        s.sort_stats(sort).print_stats(args.top)
        rows = []
        for (fname, line, fn), (cc, nc, tt, ct, callers) in sorted(  # noqa: B007
            stats.stats.items(), key=lambda kv: kv[1][3 if sort == "cumulative" else 2], reverse=True
        )[: args.top]:
            rows.append(
                {
                    "where": f"{fname.split('site-packages/')[-1].split('src/')[-1]}:{line}({fn})",
                    "calls": nc,
                    "own_s": round(tt, 4),
                    "cumulative_s": round(ct, 4),
                }
            )
        return rows, buf.getvalue()

    by_cum, txt_cum = top("cumulative")
    by_own, txt_own = top("tottime")
    hot = hot_spots(stats)

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as tp:
        torch_step = timer.step(3)["seconds"]
    ops = tp.key_averages()
    op_rows = sorted(ops, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    op_total = sum(e.self_cpu_time_total for e in ops) / 1e6
    torch_ops = [
        {
            "op": e.key,
            "calls": e.count,
            "self_cpu_s": round(e.self_cpu_time_total / 1e6, 4),
            "share_of_op_time": round(e.self_cpu_time_total / 1e6 / op_total, 4) if op_total else None,
        }
        for e in op_rows
    ]

    res_dir = Path(args.out).parent
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / "profile_cprofile.txt").write_text(
        "# sorted by cumulative\n" + txt_cum + "\n# sorted by own time\n" + txt_own
    )
    (res_dir / "profile_torch_ops.txt").write_text(ops.table(sort_by="self_cpu_time_total", row_limit=args.top))
    result = {
        "model": source,
        "threads": args.threads,
        "warmup_step_s": warm,
        "cprofile_step_s": prof_step,
        "torch_profiler_step_s": torch_step,
        "hot_spots_cprofile": [{**h, "share_of_step": round(h["cumulative_s"] / total, 4)} for h in hot],
        "top_cumulative": by_cum,
        "top_own_time": by_own,
        "torch_ops_self_cpu": torch_ops,
        "torch_op_time_total_s": op_total,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    print(
        f"step under cProfile: {total:.2f}s (unprofiled warm-up step {warm['total']:.2f}s); phases: "
        + ", ".join(f"{k} {prof_step.get(k, 0):.2f}s" for k in ("rollout", "old_logp", "ref_logp", "update"))
    )
    print(f"{'hot spot (cProfile, step 2)':<52}{'calls':>8}{'own s':>8}{'cum s':>8}{'share':>8}")
    for h in hot:
        print(
            f"{h['label']:<52}{h['calls']:>8}{h['own_s']:>8.2f}{h['cumulative_s']:>8.2f}{100 * h['cumulative_s'] / total:>7.1f}%"
        )
    print(f"\n{'torch op (self CPU, step 3)':<52}{'calls':>8}{'self s':>8}{'share':>8}")
    for r in torch_ops[:15]:
        print(f"{r['op'][:50]:<52}{r['calls']:>8}{r['self_cpu_s']:>8.2f}{100 * (r['share_of_op_time'] or 0):>7.1f}%")
    print(f"wrote {args.out}, {res_dir / 'profile_cprofile.txt'}, {res_dir / 'profile_torch_ops.txt'}")
    return result


if __name__ == "__main__":
    main()
