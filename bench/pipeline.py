"""Overhead of the tooling around training: DVC no-op status/repro, MLflow logging per step, Prefect.

Not a test. Run from the repository root:

    python bench/pipeline.py                  # ~4-5 min on the shared 2-core machine
    python bench/pipeline.py --no-clone --repeats 2 --steps 2
    python bench/pipeline.py --clone-rev aaa6770   # a commit whose dvc.lock matches its code

1. DVC (subprocesses, each timed for wall clock and child CPU seconds; repeated ``--repeats``
   times, the commands alternated round-robin):
   * in the working tree: ``dvc status`` and ``dvc status validate``; a no-op
     ``dvc repro validate`` only when ``dvc status validate`` reports it up to date (the working
     tree is shared with people editing src/: a stale stage would really run);
   * in a temporary ``git clone --shared`` of HEAD (``--clone-rev``) with its own DVC cache pulled from the
     repository's cache (used as a local remote; ~85 MB copied, ~15 s): when HEAD's ``dvc.lock``
     matches HEAD (``dvc status`` up to date), ``dvc status``, ``dvc repro validate`` and
     ``dvc repro`` (the whole pipeline) are true no-ops and are timed; otherwise only
     ``dvc status`` is (a repro would run stages). Skip the clone with ``--no-clone``.
2. MLflow: a temporary sqlite store; ``stage_run`` start + end for a stage (connect, migrations,
   experiment, provenance tags, ~200 params, config.json), then the nano RL step of
   bench/rl_step.py run with the stage's :class:`MLflowLogger` as the trainer's logger (the
   trainer calls ``logger.log(metrics, step)`` once per step, ~30 metrics); the log call is timed
   inside the same steps, so the overhead is a ratio measured side by side:
   ``log seconds / (step seconds - log seconds)``.
3. Prefect (one subprocess with its own ``PREFECT_HOME``, analytics off, no API URL = ephemeral
   mode): Python start-up alone, ``import flows.pipeline``, a trivial flow called twice with
   ``return_state=True`` (the first call starts Prefect's temporary local server), and - with the
   clone - the real ``pipeline`` flow for ``targets=["validate"]`` (a no-op ``dvc repro
   validate`` plus metrics/MLflow look-ups and the report artifacts).

Results: a table on stdout and ``bench/results/pipeline.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rl  # noqa: E402

_rl.quiet()
ROOT = _rl.ROOT
BIN = ROOT / ".venv" / "bin"
PY = str(BIN / "python") if (BIN / "python").exists() else sys.executable
DVC = str(BIN / "dvc") if (BIN / "dvc").exists() else "dvc"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env.update(extra)
    return env


def run(cmd: list[str], cwd: Path, timeout: float = 300, env: dict | None = None) -> dict:
    """Wall seconds, child CPU seconds, exit code and the output's last lines of one command."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out = (p.stdout + p.stderr).strip().splitlines()
    return {"wall_s": wall, "cpu_s": cpu, "rc": p.returncode, "tail": out[-3:]}


def summarize(samples: list[dict]) -> dict:
    walls = [s["wall_s"] for s in samples]
    return {
        "wall_s_median": statistics.median(walls),
        "wall_s_min": min(walls),
        "wall_s_max": max(walls),
        "cpu_s_median": statistics.median(s["cpu_s"] for s in samples),
        "rc": [s["rc"] for s in samples],
        "samples_wall_s": [round(w, 2) for w in walls],
        "last_output": samples[-1]["tail"],
    }


def alternate(cmds: dict[str, list[str]], cwd: Path, repeats: int) -> dict:
    """Each command ``repeats`` times, round-robin (a, b, c, a, b, c, ...)."""
    samples: dict[str, list[dict]] = {k: [] for k in cmds}
    for _ in range(repeats):
        for name, cmd in cmds.items():
            samples[name].append(run(cmd, cwd))
    return {k: summarize(v) for k, v in samples.items()}


def up_to_date(res: dict) -> bool:
    return res["rc"] == 0 and any("up to date" in line for line in res["tail"])


# ----------------------------------------------------------------------------- 1. DVC
def bench_dvc(args) -> tuple[dict, Path | None]:
    out: dict = {"working_tree": {}, "clone": None}
    version = run([DVC, "--version"], ROOT)
    out["dvc_version"] = version["tail"][-1] if version["tail"] else None
    out["dvc_version_cmd_s"] = version["wall_s"]  # CLI start-up alone (imports)
    st = run([DVC, "status", "validate"], ROOT)
    out["working_tree"]["validate_up_to_date"] = up_to_date(st)
    out["working_tree"]["status_validate_output"] = st["tail"]
    cmds = {"dvc status": [DVC, "status"], "dvc status validate": [DVC, "status", "validate"]}
    if out["working_tree"]["validate_up_to_date"]:
        cmds["dvc repro validate (no-op)"] = [DVC, "repro", "validate"]
    else:
        out["working_tree"]["repro_skipped"] = "dvc status validate reports changes: a repro would really run the stage"
    out["working_tree"]["commands"] = alternate(cmds, ROOT, args.repeats)
    print(
        f"dvc (working tree): {json.dumps({k: round(v['wall_s_median'], 2) for k, v in out['working_tree']['commands'].items()})}",
        file=sys.stderr,
        flush=True,
    )
    if args.no_clone:
        return out, None
    clone = Path(tempfile.mkdtemp(prefix="bench-dvc-clone-")) / "repo"
    t0 = time.perf_counter()
    # The clone gets its own cache, filled from the repository's cache used as a read-only local
    # remote (DVC 3 keeps both in the same files/md5 layout): nothing the clone does can write
    # into the repository's cache, even if a stage were to run.
    setup = [
        ["git", "clone", "-q", "--shared", str(ROOT), str(clone)],
        ["git", "checkout", "-q", args.clone_rev],
        [DVC, "remote", "add", "--local", "-d", "benchsrc", str(ROOT / ".dvc" / "cache")],
        [DVC, "pull", "-q", "-r", "benchsrc"],
    ]
    for i, cmd in enumerate(setup):
        r = run(cmd, ROOT if i == 0 else clone)
        if r["rc"] != 0 and i < 3:
            out["clone"] = {"error": f"{' '.join(cmd)} failed: {r['tail']}"}
            return out, None
    c: dict = {"setup_s": time.perf_counter() - t0, "head": run(["git", "rev-parse", "--short", "HEAD"], clone)["tail"]}
    st = run([DVC, "status"], clone)
    c["up_to_date"] = up_to_date(st)
    c["status_output"] = st["tail"]
    cmds = {"dvc status": [DVC, "status"]}
    if c["up_to_date"]:  # only then is a repro a no-op; otherwise it would really train
        cmds.update(
            {"dvc repro validate (no-op)": [DVC, "repro", "validate"], "dvc repro (all stages, no-op)": [DVC, "repro"]}
        )
    else:
        c["repro_skipped"] = (
            "HEAD's dvc.lock does not match HEAD (dvc status reports changes): a repro would run stages"
        )
    c["commands"] = alternate(cmds, clone, args.repeats)
    out["clone"] = c
    if not c["up_to_date"]:  # the Prefect part runs `dvc repro validate` in the clone: only as a no-op
        print(f"dvc (clone at {c['head']}): not up to date, no repro timed", file=sys.stderr, flush=True)
        return out, None
    print(
        f"dvc (clone): {json.dumps({k: round(v['wall_s_median'], 2) for k, v in c['commands'].items()})}",
        file=sys.stderr,
        flush=True,
    )
    return out, clone


# ----------------------------------------------------------------------------- 2. MLflow
class TimedLogger:
    def __init__(self, inner):
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0
        self.metrics = 0

    def log(self, metrics, step):
        t0 = time.perf_counter()
        self.inner.log(metrics, step)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self.metrics += len(metrics)


def bench_mlflow(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="bench-mlflow-"))
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    world = _rl.load_world(args.params)
    cfg = world.cfg.model_copy(deep=True)
    cfg.tracking.artifact_root = str(tmp / "artifacts")
    cfg.tracking.enabled = True
    import mlflow  # noqa: F401

    from agentr1.tracking.mlflow_adapter import stage_run

    out: dict = {"store": "temporary sqlite", "mlflow_version": mlflow.__version__}
    # a throw-away stage run first: the sqlite schema migrations happen once per store
    t0 = time.perf_counter()
    with stage_run(cfg, "bench-first", run_name="bench-first"):
        pass
    out["first_stage_run_s (new store: migrations)"] = time.perf_counter() - t0

    model, tok, source = _rl.load_model("nano", cfg)
    trainer = _rl.make_trainer(model, tok, world, _rl.bench_train_cfg(cfg, args.run), cfg.rollout)
    timer = _rl.PhaseTimer(trainer)
    t0 = time.perf_counter()
    cm = stage_run(cfg, "train", run_name="train@bench")
    srun = cm.__enter__()
    out["stage_run_start_s"] = time.perf_counter() - t0
    try:
        logger = TimedLogger(srun.logger)
        trainer.logger = logger
        steps = []
        for k in range(1, args.warmup + args.steps + 1):
            before = logger.seconds
            st = timer.step(k)
            log_s = logger.seconds - before
            rec = {
                "step": k,
                "step_s": st["seconds"]["total"],
                "log_s": log_s,
                "metrics": len(st["metrics"]),
                "overhead": log_s / max(st["seconds"]["total"] - log_s, 1e-9),
                "warmup": k <= args.warmup,
            }
            steps.append(rec)
            print(
                f"mlflow step {k}{' (warm-up)' if rec['warmup'] else ''}: step {rec['step_s']:.2f}s, "
                f"log {1000 * log_s:.1f} ms ({rec['metrics']} metrics)",
                file=sys.stderr,
                flush=True,
            )
    finally:
        t0 = time.perf_counter()
        cm.__exit__(None, None, None)
        out["stage_run_end_s"] = time.perf_counter() - t0
    m = [s for s in steps if not s["warmup"]]
    out.update(
        {
            "model": source,
            "steps": steps,
            "log_s_per_step_mean": statistics.mean(s["log_s"] for s in m),
            "step_s_mean": statistics.mean(s["step_s"] for s in m),
            "metrics_per_step": statistics.mean(s["metrics"] for s in m),
            "overhead_mean": statistics.mean(s["overhead"] for s in m),
            "overhead_max": max(s["overhead"] for s in m),
            "stage_run_overhead_per_step_if_amortized_over_train_steps": (
                out["stage_run_start_s"] + out["stage_run_end_s"]
            )
            / max(cfg.train.steps, 1)
            / statistics.mean(s["step_s"] for s in m),
        }
    )
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------- 3. Prefect
PREFECT_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
from flows import pipeline as P
t1 = time.perf_counter()
from prefect import flow

@flow(name="bench-noop")
def noop():
    return 1

res = {"import_flows_pipeline_s": t1 - t0}
t = time.perf_counter(); s = noop(return_state=True); res["first_flow_call_s"] = time.perf_counter() - t
res["first_state"] = s.type.value
t = time.perf_counter(); s = noop(return_state=True); res["second_flow_call_s"] = time.perf_counter() - t
clone = sys.argv[1] if len(sys.argv) > 1 else ""
if clone:
    t = time.perf_counter()
    s = P.pipeline(project_dir=clone, targets=["validate"], return_state=True)
    res["pipeline_flow_validate_noop_s"] = time.perf_counter() - t
    res["pipeline_state"] = s.type.value
print("BENCH_JSON " + json.dumps(res))
"""


def bench_prefect(args, clone: Path | None) -> dict:
    home = Path(tempfile.mkdtemp(prefix="bench-prefect-home-"))
    env = _env(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="240",
        PREFECT_LOGGING_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    env.pop("PREFECT_API_URL", None)
    base = run([PY, "-c", "pass"], ROOT, env=env)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(
        [PY, "-c", PREFECT_SCRIPT] + ([str(clone)] if clone else []),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(home, ignore_errors=True)
    line = [x for x in p.stdout.splitlines() if x.startswith("BENCH_JSON ")]
    if p.returncode != 0 or not line:
        return {"error": (p.stdout + p.stderr)[-2000:], "rc": p.returncode}
    res = json.loads(line[-1][len("BENCH_JSON ") :])
    res["python_startup_s"] = base["wall_s"]
    res["process_wall_s"] = wall
    res["process_cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    res["prefect_version"] = run([PY, "-c", "import prefect; print(prefect.__version__)"], ROOT, env=env)["tail"][-1]
    return res


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--run", default="grpo")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each DVC command (alternated)")
    ap.add_argument("--no-clone", action="store_true", help="skip the no-op repro in a temporary clone of HEAD")
    ap.add_argument("--clone-rev", default="HEAD", help="commit the clone checks out (one whose dvc.lock matches it)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1, help="nano RL steps before the measured ones (MLflow part)")
    ap.add_argument("--steps", type=int, default=3, help="measured nano RL steps with MLflow logging")
    ap.add_argument("--skip", nargs="*", default=[], choices=["dvc", "mlflow", "prefect"])
    ap.add_argument("--out", default="bench/results/pipeline.json")
    args = ap.parse_args(argv)

    out = Path(args.out)
    results: dict = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    clone = None
    try:
        if "dvc" not in args.skip:
            results["dvc"], clone = bench_dvc(args)
        if "mlflow" not in args.skip:
            results["mlflow"] = bench_mlflow(args)
        if "prefect" not in args.skip:
            results["prefect"] = bench_prefect(args, clone)
    finally:
        if clone is not None:
            shutil.rmtree(clone.parent, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")

    print(f"{'what':<52}{'median s':>10}{'min s':>8}{'cpu s':>8}")
    d = results.get("dvc")
    if d:
        print(f"{'dvc --version (CLI start-up)':<52}{d['dvc_version_cmd_s']:>10.2f}")
        for where, block in (("tree", d["working_tree"]), ("clone", d.get("clone") or {})):
            for name, r in (block.get("commands") or {}).items():
                print(
                    f"{f'[{where}] {name}':<52}{r['wall_s_median']:>10.2f}{r['wall_s_min']:>8.2f}{r['cpu_s_median']:>8.2f}"
                )
        if d["working_tree"].get("repro_skipped"):
            print(f"[tree] dvc repro validate skipped: {d['working_tree']['repro_skipped']}")
        if (d.get("clone") or {}).get("repro_skipped"):
            print(f"[clone {d['clone']['head']}] dvc repro skipped: {d['clone']['repro_skipped']}")
    m = results.get("mlflow")
    if m:
        print(
            f"{'[mlflow] first stage_run on a new store (migrations)':<52}{m['first_stage_run_s (new store: migrations)']:>10.2f}"
        )
        print(f"{'[mlflow] stage_run start / end':<52}{m['stage_run_start_s']:>10.2f}{m['stage_run_end_s']:>8.2f}")
        print(
            f"{'[mlflow] log per step (' + str(m['metrics_per_step']) + ' metrics)':<52}{m['log_s_per_step_mean']:>10.4f}"
        )
        print(f"{'[mlflow] nano RL step (same steps)':<52}{m['step_s_mean']:>10.2f}")
        print(
            f"[mlflow] logging overhead per step: {100 * m['overhead_mean']:.2f}% (max {100 * m['overhead_max']:.2f}%)"
        )
    p = results.get("prefect")
    if p and "error" not in p:
        for k in (
            "python_startup_s",
            "import_flows_pipeline_s",
            "first_flow_call_s",
            "second_flow_call_s",
            "pipeline_flow_validate_noop_s",
        ):
            if k in p:
                print(f"{'[prefect] ' + k:<52}{p[k]:>10.2f}")
    elif p:
        print(f"[prefect] failed: {p['error'][-300:]}")
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main()
