"""The same GRPO step in agentr1's Trainer and in TRL's GRPOTrainer, alternated in one process.

Not a test. Needs TRL (``make bench`` installs the ``bench`` extra). Run from the repository root:

    python bench/trl_grpo.py                        # nano, 1 warm-up + 3 alternations, ~3-4 min
    python bench/trl_grpo.py --alternations 5
    python bench/trl_grpo.py --model smol --alternations 3   # slow: ~3 min per alternation

What is compared (both sides start from the same checkpoint, one copy each):

* agentr1: :class:`agentr1.rl.trainer.Trainer` built as in bench/_rl.py (params.yaml, run
  ``grpo``): ``batch_questions`` x ``group_size`` multi-turn episodes through the RolloutEngine +
  ToolEnv (BM25 over the synthetic world), rewards, old and reference log-probs (no-grad passes),
  GRPO advantages, ``mini_batches`` PPO-clip optimizer steps with the k3 KL in the loss.
* TRL: ``GRPOTrainer`` with ``num_generations = group_size``, ``per_device_train_batch_size`` =
  micro-batch, ``gradient_accumulation_steps`` = mini-batch / micro-batch, ``steps_per_generation``
  = ``mini_batches`` x that (so a generation batch is agentr1's batch and TRL computes old
  log-probs too),
  ``num_iterations = ppo_epochs``, ``loss_type="bnpo"`` (token mean over the mini-batch = agentr1's
  ``token-mean``), ``beta = kl.coef`` (TRL's KL is k3), ``epsilon``/``epsilon_high`` = the clip
  range, ``scale_rewards="group"`` (GRPO's std normalization), AdamW with agentr1's betas
  (0.9, 0.95), constant lr, no weight decay, grad clip = ``grad_clip``, temperature 1, top-p 1.
  TRL's own generation is single-turn and its ``tools=`` / ``environment_factory`` support needs
  a chat template with JSON tool calling (``parse_response`` + a response schema), which the nano
  tokenizer and its ``<search>`` tag format do not have; so TRL gets a ``rollout_func`` that runs
  agentr1's RolloutEngine + the same ToolEnv on TRL's model (its documented hook for custom
  multi-turn rollouts) and returns ``prompt_ids``, ``completion_ids``, sampling ``logprobs`` and
  ``env_mask`` (= agentr1's ``action_mask``, TRL's tool mask: observation tokens get no loss), plus
  agentr1's outcome reward, which TRL's reward function passes through. The prompts are the same
  chat prompts (system + user from the ToolEnv), the questions are the ones agentr1 samples at the
  same step, and the rollout seed is agentr1's, so at the first step both sides sample the very
  same episodes; after that the weights differ slightly and so do the episodes (tokens per step
  are reported for both).

Timing: one ``trainer.train()`` of TRL for ``2 * mini_batches * (warm-up + alternations)``
optimizer steps; a callback runs one agentr1 step each time TRL finishes one generation batch
(= one RL step), so the order is TRL, agentr1, TRL, agentr1, ... in one process, one thread
setting, sharing whatever load the machine has. TRL's step time is the wall time between its step
boundaries minus the agentr1 step run inside the callback. Reported: per-step seconds of each
side, the ratio agentr1/TRL per alternation (mean, stdev, min, max) and both sides' phase split
(rollout / old+ref log-probs and rewards / update).

Results: a table on stdout and ``bench/results/trl_grpo.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rl  # noqa: E402

_rl.quiet()
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("ACCELERATE_USE_CPU", "true")

import torch  # noqa: E402


def build(args):
    world = _rl.load_world(args.params, _rl.smol_world_overrides(args.model, args))
    cfg = world.cfg
    cache = _rl.default_smol_cache(cfg)
    tcfg, rcfg = _rl.step_configs(args.model, cfg, args)
    model_a, tok_a, source = _rl.load_model(args.model, cfg, smol_cache=cache)
    model_t, tok_t, _ = _rl.load_model(args.model, cfg, smol_cache=cache)
    return world, tcfg, rcfg, (model_a, tok_a), (model_t, tok_t), source


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--model", default="nano", choices=["nano", "smol"])
    ap.add_argument("--run", default="grpo")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1, help="alternations not measured")
    ap.add_argument("--alternations", type=int, default=3, help="measured (TRL step, agentr1 step) pairs")
    _rl.add_smol_args(ap)
    ap.add_argument("--out", default="bench/results/trl_grpo.json")
    args = ap.parse_args(argv)

    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentr1.env.rewards import score_episode
    from agentr1.lm.schedule import BETAS
    from agentr1.rl.sampling import seed_key as _key
    from agentr1.rollout import RolloutEngine
    from agentr1.rollout.hf import HFBackend

    torch.set_num_threads(args.threads)
    world, tcfg, rcfg, (model_a, tok_a), (model_t, tok_t), source = build(args)
    cfg, env = world.cfg, world.env
    n_rl_steps = args.warmup + args.alternations

    # ---------------------------------------------------------------- agentr1 side
    trainer_a = _rl.make_trainer(model_a, tok_a, world, tcfg, rcfg)
    timer = _rl.PhaseTimer(trainer_a)

    # ---------------------------------------------------------------- TRL side
    # the questions agentr1 samples at steps 1..n, in order (TRL's sampler walks the dataset in order)
    by_prompt: dict[str, dict] = {}
    rows = []
    for s in range(1, n_rl_steps + 1):
        for q in trainer_a.sample_questions(s):
            user = env.user_prompt(q["question"])
            by_prompt[user] = q
            rows.append(
                {"prompt": [{"role": "system", "content": env.system_prompt()}, {"role": "user", "content": user}]}
            )
    dataset = Dataset.from_list(rows)
    tok_t.padding_side = "left"
    gen_counter = {"k": 0}
    trl_times: dict[str, float] = defaultdict(float)
    trl_tokens: dict[str, int] = {}

    def rollout_func(prompts, trainer):
        """agentr1's RolloutEngine + ToolEnv on TRL's model; one trajectory per (repeated) prompt."""
        gen_counter["k"] += 1
        k = gen_counter["k"]
        g = trainer.num_generations
        users = [p[-1]["content"] for p in prompts]
        questions = [by_prompt[u] for u in users[::g]]
        assert all(users[i] == users[(i // g) * g] for i in range(len(users))), "prompts are not grouped"
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            engine = RolloutEngine(HFBackend(model, tok_t), env, tok_t, rcfg)
            trajs = engine.rollout(questions, g, seed=_key(cfg.seed, k, 2, 0))
        trl_times["rollout"] += time.perf_counter() - t0
        model.train(was_training)
        trl_tokens.update(
            gen=sum(t.num_action_tokens for t in trajs),
            tokens=sum(len(t.prompt_ids) + len(t.response_ids) for t in trajs),
        )
        return {
            "prompt_ids": [list(t.prompt_ids) for t in trajs],
            "completion_ids": [list(t.response_ids) for t in trajs],
            "logprobs": [list(t.logprobs) for t in trajs],
            "env_mask": [list(t.action_mask) for t in trajs],
            "agentr1_reward": [score_episode(t, cfg.reward).reward for t in trajs],
        }

    def agentr1_reward(prompts, completions, agentr1_reward, **kw):
        return list(agentr1_reward)

    M = tcfg.batch_questions * tcfg.group_size // tcfg.mini_batches  # mini-batch (episodes per optimizer step)
    micro = min(tcfg.micro_batch_size, M)
    gas = max(M // micro, 1)  # micro-batches accumulated per optimizer step
    tmp = tempfile.mkdtemp(prefix="bench-trl-")
    gcfg = GRPOConfig(
        output_dir=tmp,
        report_to="none",
        save_strategy="no",
        logging_steps=10_000,
        disable_tqdm=True,
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=cfg.seed,
        data_seed=cfg.seed,
        dataloader_num_workers=0,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=gas,
        steps_per_generation=tcfg.mini_batches * gas,
        num_generations=tcfg.group_size,
        num_iterations=tcfg.ppo_epochs,
        max_steps=tcfg.mini_batches * tcfg.ppo_epochs * n_rl_steps,
        learning_rate=tcfg.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=tcfg.weight_decay,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        optim="adamw_torch",
        max_grad_norm=tcfg.grad_clip or 1e9,
        beta=tcfg.kl.coef,
        epsilon=tcfg.clip_low,
        epsilon_high=tcfg.clip_high,
        loss_type="bnpo",
        scale_rewards="group" if tcfg.norm_by_std else "none",
        temperature=rcfg.temperature,
        top_p=rcfg.top_p,
        top_k=0,
        max_completion_length=rcfg.max_total_tokens,
        shuffle_dataset=False,
        log_completions=False,
    )
    trainer_t = GRPOTrainer(
        model=model_t,
        reward_funcs=agentr1_reward,
        args=gcfg,
        train_dataset=dataset,
        processing_class=tok_t,
        rollout_func=rollout_func,
    )
    torch.set_num_threads(args.threads)  # accelerate / Trainer init may touch it

    # TRL phase timers (instance attributes; TRL's code is not changed)
    gen_score = trainer_t._generate_and_score_completions
    logps = trainer_t._get_per_token_logps_and_entropies

    def t_gas(inputs):
        t0 = time.perf_counter()
        out = gen_score(inputs)
        trl_times["generate_and_score"] += time.perf_counter() - t0
        return out

    def t_logps(model, *a, **kw):
        t0 = time.perf_counter()
        out = logps(model, *a, **kw)
        if not torch.is_grad_enabled():
            trl_times["ref_logp" if model is trainer_t.ref_model else "old_logp"] += time.perf_counter() - t0
        return out

    trainer_t._generate_and_score_completions = t_gas
    trainer_t._get_per_token_logps_and_entropies = t_logps

    opt_per_rl_step = tcfg.mini_batches * tcfg.ppo_epochs
    records: list[dict] = []

    class Alternate(TrainerCallback):
        def __init__(self):
            self.t_start = None

        def on_train_begin(self, a, state, control, **kw):
            torch.set_num_threads(args.threads)
            self.t_start = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            if state.global_step % opt_per_rl_step:
                return
            k = state.global_step // opt_per_rl_step
            trl_s = time.perf_counter() - self.t_start
            trl_phase = dict(trl_times)
            trl_tok = dict(trl_tokens)
            trl_times.clear()
            st = timer.step(k)  # the agentr1 step with the same questions and rollout seed
            a_tokens = {
                "gen": sum(t.num_action_tokens for t in timer.trajs),
                "tokens": int(timer.batch["attention_mask"].sum()),
            }
            rec = {
                "rl_step": k,
                "warmup": k <= args.warmup,
                "trl_s": trl_s,
                "agentr1_s": st["seconds"]["total"],
                "ratio_agentr1_over_trl": st["seconds"]["total"] / trl_s,
                "trl_phases": {
                    "rollout": trl_phase.get("rollout", 0.0),
                    "old_ref_logp": trl_phase.get("old_logp", 0.0) + trl_phase.get("ref_logp", 0.0),
                    "old_logp": trl_phase.get("old_logp", 0.0),
                    "ref_logp": trl_phase.get("ref_logp", 0.0),
                    "rewards_advantages_other": trl_phase.get("generate_and_score", 0.0)
                    - trl_phase.get("rollout", 0.0)
                    - trl_phase.get("old_logp", 0.0)
                    - trl_phase.get("ref_logp", 0.0),
                    "update": trl_s - trl_phase.get("generate_and_score", 0.0),
                },
                "agentr1_phases": {
                    "rollout": st["seconds"]["rollout"],
                    "old_ref_logp": st["seconds"].get("old_logp", 0.0) + st["seconds"].get("ref_logp", 0.0),
                    "old_logp": st["seconds"].get("old_logp", 0.0),
                    "ref_logp": st["seconds"].get("ref_logp", 0.0),
                    "rewards_advantages_other": st["seconds"]["rewards_advantages_other"] + st["seconds"]["step_other"],
                    "update": st["seconds"]["update"],
                },
                "trl_tokens": trl_tok,
                "agentr1_tokens": a_tokens,
            }
            records.append(rec)
            print(
                f"[alt {k}{' warm-up' if rec['warmup'] else ''}] TRL {trl_s:.2f}s ({trl_tok.get('tokens')} tok, "
                f"{trl_tok.get('gen')} gen) | agentr1 {rec['agentr1_s']:.2f}s ({a_tokens['tokens']} tok, "
                f"{a_tokens['gen']} gen) | ratio {rec['ratio_agentr1_over_trl']:.3f}",
                file=sys.stderr,
                flush=True,
            )
            self.t_start = time.perf_counter()

    trainer_t.add_callback(Alternate())
    print(
        f"[{args.model}] {source}; TRL {trl.__version__}; {n_rl_steps} RL steps each side "
        f"({opt_per_rl_step} optimizer steps per RL step)",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    try:
        trainer_t.train()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - t0

    measured = [r for r in records if not r["warmup"]]
    ratios = [r["ratio_agentr1_over_trl"] for r in measured]

    def mean(key, side):
        return statistics.mean(r[f"{side}_phases"][key] for r in measured) if measured else None

    summary = {
        "alternations": len(measured),
        "agentr1_s_mean": statistics.mean(r["agentr1_s"] for r in measured),
        "trl_s_mean": statistics.mean(r["trl_s"] for r in measured),
        "ratio_agentr1_over_trl": {
            "mean": statistics.mean(ratios),
            "stdev": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
            "min": min(ratios),
            "max": max(ratios),
        },
        "speedup_trl_over_agentr1": statistics.mean(r["trl_s"] / r["agentr1_s"] for r in measured),
        "phases_s_mean": {
            side: {k: mean(k, side) for k in ("rollout", "old_ref_logp", "rewards_advantages_other", "update")}
            for side in ("agentr1", "trl")
        },
        "tokens_per_step_mean": {
            "agentr1": statistics.mean(r["agentr1_tokens"]["tokens"] for r in measured),
            "trl": statistics.mean(r["trl_tokens"].get("tokens", 0) for r in measured),
        },
        "time_per_token_ratio_agentr1_over_trl": statistics.mean(
            (r["agentr1_s"] / r["agentr1_tokens"]["tokens"]) / (r["trl_s"] / r["trl_tokens"]["tokens"])
            for r in measured
        ),
    }
    result = {
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "trl_version": trl.__version__,
        "model": args.model,
        "source": source,
        "settings": {
            "batch_questions": tcfg.batch_questions,
            "group_size": tcfg.group_size,
            "mini_batches": tcfg.mini_batches,
            "micro_batch_size": tcfg.micro_batch_size,
            "ppo_epochs": tcfg.ppo_epochs,
            "lr": tcfg.lr,
            "kl_coef": tcfg.kl.coef,
            "kl_estimator": tcfg.kl.estimator,
            "clip": [tcfg.clip_low, tcfg.clip_high],
            "max_turn_tokens": rcfg.max_turn_tokens,
            "max_total_tokens": rcfg.max_total_tokens,
            "temperature": rcfg.temperature,
            "top_p": rcfg.top_p,
            "trl_config": {
                k: getattr(gcfg, k)
                for k in (
                    "per_device_train_batch_size",
                    "gradient_accumulation_steps",
                    "steps_per_generation",
                    "num_generations",
                    "num_iterations",
                    "loss_type",
                    "beta",
                    "epsilon",
                    "epsilon_high",
                    "scale_rewards",
                    "learning_rate",
                    "lr_scheduler_type",
                    "max_grad_norm",
                    "optim",
                )
            },
        },
        "differences": [
            "TRL rolls out through rollout_func = agentr1's RolloutEngine + ToolEnv (TRL's built-in generation is "
            "single-turn; its tools=/environment_factory need a JSON tool-calling chat template)",
            "TRL pads the whole generation batch to one width (prompts left-padded to the longest prompt, completions "
            "right-padded to the longest completion) for old/ref/policy passes; agentr1 trims each micro-batch to its "
            "longest row",
            "TRL's LM head (fused, tiled) runs on every completion token incl. observation tokens, and computes entropy; "
            "agentr1 projects only the loss-mask (action) tokens (entropy there too)",
            "TRL logs per-step metrics and runs Trainer callbacks; agentr1 records its metrics dict",
            "GRPO std: TRL nanstd + 1e-4, agentr1 unbiased std + 1e-6 (same for timing)",
        ],
        "summary": summary,
        "records": records,
        "wall_s": round(wall, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")

    print(f"{'alt':>4}{'agentr1 s':>11}{'TRL s':>9}{'ratio a/T':>11}{'a tokens':>10}{'T tokens':>10}")
    for r in records:
        print(
            f"{r['rl_step']:>4}{r['agentr1_s']:>11.2f}{r['trl_s']:>9.2f}{r['ratio_agentr1_over_trl']:>11.3f}"
            f"{r['agentr1_tokens']['tokens']:>10}{r['trl_tokens'].get('tokens', 0):>10}{'  (warm-up)' if r['warmup'] else ''}"
        )
    rr = summary["ratio_agentr1_over_trl"]
    print(
        f"ratio agentr1/TRL over {len(measured)} alternations: mean {rr['mean']:.3f} (stdev {rr['stdev']:.3f}, "
        f"min {rr['min']:.3f}, max {rr['max']:.3f}); TRL/agentr1 speed-up {summary['speedup_trl_over_agentr1']:.2f}x"
    )
    print(f"{'phase (s/step)':<26}{'agentr1':>9}{'TRL':>9}")
    for k in ("rollout", "old_ref_logp", "rewards_advantages_other", "update"):
        print(f"{k:<26}{summary['phases_s_mean']['agentr1'][k]:>9.2f}{summary['phases_s_mean']['trl'][k]:>9.2f}")
    print(f"TRL {trl.__version__}; wrote {out}")
    return result


if __name__ == "__main__":
    main()
