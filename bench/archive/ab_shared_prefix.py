"""A/B for an optimization proposed for src/: the shared system-prompt prefix in the RL passes.

Not a test. Run from the repository root:

    python bench/archive/ab_shared_prefix.py            # nano, ~1.5 min
    python bench/archive/ab_shared_prefix.py --model smol --rounds 2   # slow

``agentr1.lm.sft`` already computes the prefix that every row of an SFT batch shares (the system
prompt and chat header) once and repeats its KV cache for the rows (``shared_prefix_length`` +
``hidden_states``); the RL trainer's :class:`agentr1.models.forward.PolicyLogProbs` does not, so the
old-log-prob, reference and update passes recompute it for every episode. This script takes a
real batch (one nano RL step of bench/rl_step.py's trainer), and on the same micro-batches as the
trainer (``micro_batch_size`` rows, columns trimmed to the longest row) times, alternating
``--rounds`` times:

* A = ``PolicyLogProbs.forward`` as in src/ (no grad: old/ref passes; with grad: forward +
  backward of ``sum(logp * w)`` with fixed random per-token weights ``w``, as in the update);
* B = the same log-probs with the shared prefix computed once per micro-batch
  (``hidden_states(model, ids, attn, shared_prefix_length(mb))``), head on the loss-mask tokens.

It checks that B's log-probs (and gradients) match A's, and reports the time ratio B/A.
Results: a table on stdout and ``bench/results/ab_shared_prefix.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: _rl
import _rl  # noqa: E402

_rl.quiet()

import torch  # noqa: E402


def prefix_logprobs(model, ids, attn, target_mask, temperature: float = 1.0):
    """``PolicyLogProbs.forward``'s logp with the shared prefix run once (variant B)."""
    from agentr1.models.forward import hidden_states, scatter_targets, shared_prefix_length

    P = shared_prefix_length({"input_ids": ids, "attention_mask": attn, "action_mask": target_mask})
    targets, sel = ids[:, 1:], target_mask[:, 1:].bool()
    hidden = hidden_states(model, ids, attn, P)  # positions P .. L-1
    # position t's token is predicted from hidden at t-1: rows of sel at columns >= P - 1 ... only
    # columns >= P are available (P <= first action position - 1 guarantees no target needs t-1 < P)
    h = hidden[:, :-1]
    logits = model.get_output_embeddings()(h[sel[:, P:]]).float() / temperature
    picked = torch.log_softmax(logits, -1).gather(-1, targets[sel].unsqueeze(-1)).squeeze(-1)
    return scatter_targets(picked, sel), P


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--model", default="nano", choices=["nano", "smol"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/ab_shared_prefix.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    over = {"max_turns": 2, "observation_max_chars": 800} if args.model == "smol" else None
    world = _rl.load_world(args.params, over)
    cfg = world.cfg
    model, tok, source = _rl.load_model(args.model, cfg, smol_cache=_rl.default_smol_cache(cfg))
    if args.model == "nano":
        tcfg, rcfg = _rl.bench_train_cfg(cfg), cfg.rollout
    else:
        tcfg = _rl.bench_train_cfg(cfg, batch_questions=2, group_size=2, mini_batches=2, micro_batch_size=2)
        rcfg = cfg.rollout.model_copy(update={"max_turn_tokens": 32, "max_total_tokens": 1024})
    trainer = _rl.make_trainer(model, tok, world, tcfg, rcfg)
    timer = _rl.PhaseTimer(trainer)
    timer.step(1)
    batch = timer.batch
    actor = trainer.actor
    B, mb = batch["input_ids"].shape[0], tcfg.micro_batch_size
    micro = []
    gen = torch.Generator().manual_seed(0)
    # per-token loss weights: random on the loss mask (the batch's GRPO advantages can all be 0, e.g.
    # when every episode of a group gets the same reward, which would make the gradient check vacuous)
    weights = torch.randn(batch["input_ids"].shape, generator=gen) * batch["loss_mask"]
    for i in range(0, B, mb):
        w = int(batch["attention_mask"][i : i + mb].sum(-1).max())
        micro.append({k: batch[k][i : i + mb, :w] for k in ("input_ids", "attention_mask", "loss_mask")})
        micro[-1]["weights"] = weights[i : i + mb, :w]

    def run_a(grad: bool):
        out = []
        for m in micro:
            with torch.set_grad_enabled(grad):
                logp, _ = actor(m["input_ids"], m["attention_mask"], m["loss_mask"])
                if grad:
                    (logp * m["weights"]).sum().backward()
            out.append(logp.detach())
        return out

    def run_b(grad: bool):
        out, ps = [], []
        for m in micro:
            with torch.set_grad_enabled(grad):
                logp, P = prefix_logprobs(model, m["input_ids"], m["attention_mask"], m["loss_mask"], actor.temperature)
                if grad:
                    (logp * m["weights"]).sum().backward()
            out.append(logp.detach())
            ps.append(P)
        return out, ps

    def grads():
        g = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        return g

    model.eval()
    # correctness first
    la = run_a(False)
    lb, prefixes = run_b(False)
    max_diff = max(float((a - b).abs().max()) for a, b in zip(la, lb))
    run_a(True)
    ga = grads()
    run_b(True)
    gb = grads()
    grad_rel = max(float((ga[n] - gb[n]).norm() / (ga[n].norm() + 1e-12)) for n in ga)

    times = {("A", False): [], ("B", False): [], ("A", True): [], ("B", True): []}
    for _ in range(args.rounds):
        for grad in (False, True):
            for name, fn in (("A", run_a), ("B", run_b)):
                t0 = time.perf_counter()
                fn(grad)
                times[(name, grad)].append(time.perf_counter() - t0)
                model.zero_grad(set_to_none=True)
    tokens = int(batch["attention_mask"].sum())
    res = {
        "model": source,
        "episodes": B,
        "micro_batch_size": mb,
        "tokens": tokens,
        "shared_prefix_per_micro_batch": prefixes,
        "prefix_token_share": sum(p * len(m["input_ids"]) for p, m in zip(prefixes, micro)) / tokens,
        "max_abs_logp_diff": max_diff,
        "max_rel_grad_diff": grad_rel,
        "no_grad": {
            "A_s": statistics.median(times[("A", False)]),
            "B_s": statistics.median(times[("B", False)]),
            "ratio_B_over_A": statistics.median(b / a for a, b in zip(times[("A", False)], times[("B", False)])),
        },
        "fwd_bwd": {
            "A_s": statistics.median(times[("A", True)]),
            "B_s": statistics.median(times[("B", True)]),
            "ratio_B_over_A": statistics.median(b / a for a, b in zip(times[("A", True)], times[("B", True)])),
        },
        "samples": {f"{k[0]}_{'grad' if k[1] else 'nograd'}": [round(x, 3) for x in v] for k, v in times.items()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(
        f"{source}: {B} episodes, {tokens} tokens, shared prefix {prefixes} per micro-batch "
        f"({100 * res['prefix_token_share']:.0f}% of the tokens)"
    )
    print(f"correctness: max |logp A - logp B| = {max_diff:.2e}, max relative gradient difference = {grad_rel:.2e}")
    print(f"{'pass':<28}{'A (src) s':>11}{'B (prefix) s':>14}{'B/A':>7}")
    for k, label in (("no_grad", "old/ref log-probs (no grad)"), ("fwd_bwd", "update fwd+bwd")):
        print(f"{label:<28}{res[k]['A_s']:>11.3f}{res[k]['B_s']:>14.3f}{res[k]['ratio_B_over_A']:>7.2f}")
    print(f"wrote {args.out}")
    return res


if __name__ == "__main__":
    main()
