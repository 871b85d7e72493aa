"""Asynchronous RL (issue 38): does a rollout worker on one core beside the trainer on the other
beat today's synchronous trainer on both cores?

Not a test. Run from the repository root (it needs ``data/processed``, ``data/index`` and the SFT
cold start ``data/models/sft``), on an otherwise idle machine:

    python bench/async_overlap.py                              # grpo + ppo, 12 steps, 2 rounds (~6-8 min on 2 cores)
    python bench/async_overlap.py --runs grpo --steps 3 --rounds 1 --out /tmp/async_smoke.json   # smoke

Two sides per named run (``--runs``, default ``grpo ppo``), each ``--steps`` steps from the SFT
cold start with the run's settings as ``agentr1/stages/train.py`` builds them (params.yaml,
``train.questions: fresh``: a :class:`~agentr1.rl.sources.FreshWorlds` of the seed, a new world
every ``train.fresh.every`` steps), seed ``--seed``, the dev evaluation, checkpoints and the
collapse guard off (``bench/_rl.py`` ``bench_train_cfg``):

* ``sync2``: today's trainer at ``torch.set_num_threads(--sync-threads)`` (2):
  ``trainer.train_step(s)`` for ``s = 1..N`` (rollout, then prepare, then update, one after the
  other, every phase on both threads);
* ``async1``: the main process at ``--async-threads`` (1) holds the Trainer and only runs
  ``prepare`` (old/ref log-probs, advantages) and ``update``; a worker process
  (``torch.multiprocessing``, ``spawn``, ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` and
  ``torch.set_num_threads`` at 1) builds its own Trainer from the same checkpoint and config and
  only calls ``collect_batch(s)`` (rollouts, scores, rollout metrics). Fixed schedule with
  staleness ``k`` (``--staleness``, 1): the rollout of step ``s`` uses the weights after update
  ``max(0, s - 1 - k)``, so the worker rolls out step ``s + 1`` while the trainer updates on step
  ``s``. After update ``v`` the main process sends the policy's ``state_dict`` (detached clones,
  moved to shared memory, tied tensors once) tagged ``v`` through a queue - only the versions a
  later rollout uses (``v <= N - 1 - k``); before rolling out step ``s`` the worker takes the
  versions in order until it holds ``s - 1 - k`` and loads exactly that one. The worker sends
  ``(s, trajs, scores, metrics)`` back; the main loop is ``receive step s -> prepare -> update ->
  send version s``. The stale episodes are trained with the ordinary recomputed old log-probs:
  this times the overlap, not an off-policy objective. Every loaded version is checked against
  the one sent (a float64 sum of the state_dict on both sides, outside the timed phases).
  ``--staleness 0`` is the correctness check of the hand-over: the worker then waits for every
  update and its episodes are sync2's (the same rewards step by step), with no overlap - and its
  phases are the 1-thread phases without a neighbour on the other core.

Wall time runs from the first step's start to the last update's end; process start and model
loading are excluded (the async side starts its clock when both its trainer and the worker are
ready, then releases the worker with an event). Rounds alternate (``for round: for run: sync2,
async1``) so that both sides see the same machine load; ``--pin`` puts the async trainer on the
first allowed CPU and the worker on the second (off by default: the OS schedules).

Per side and round: steps/min, the steady-state seconds per step (last step end - first step
end over N - 1: no pipeline fill), per-phase means (sync: rollout / prepare / update; async
trainer: wait for the worker / prepare / update / weight send; worker: wait for weights / load /
rollout), rewards per step. Per run: the ratio async1/sync2 of steps/min per round and its
median (the issue asks for >= 1.5), and two bounds from the async side's own 1-thread phases
(measured while both processes run, so with their contention):

* overlap bound: a pipelined step takes at least ``max(worker work, trainer work)`` with worker
  work = rollout + weight load and trainer work = prepare + update + send, so
  ratio <= sync2 s/step / max(...);
* perfect balance: the one-thread work of a step (rollout + prepare + update) split evenly over
  the two cores, ratio <= sync2 s/step / (total_1thread / 2).

Results: ``bench/results/async_overlap.json`` (``--out``) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import queue
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rl  # noqa: E402
from peak import _cpu_name  # noqa: E402

_rl.quiet()

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


# ----------------------------------------------------------------------------- shared pieces
def build_trainer(run: str, seed: int, params: str, world=None, corpus=None):
    """A Trainer of the named run as the train stage builds it (fresh worlds of ``seed``), from
    the SFT cold start; ``world``/``corpus`` loaded here when not given. Returns ``(trainer, world, corpus)``."""
    from agentr1.data.schema import read_dataset
    from agentr1.rl.sampling import Episodes
    from agentr1.rl.trainer import Trainer
    from agentr1.stages.train import fresh_source
    from agentr1.tracking.logger import NullLogger

    if world is None:
        world = _rl.load_world(params)
    cfg = world.cfg
    if corpus is None:
        corpus = read_dataset(cfg.data.processed_dir).corpus
    tcfg = _rl.bench_train_cfg(cfg, run)
    model, tok, _ = _rl.load_model("nano", cfg)
    episodes = Episodes(world.env, world.train_q, world.dev_q, fresh_source(cfg, tcfg, corpus, seed))
    trainer = Trainer(model, tok, tcfg, cfg.rollout, cfg.reward, episodes=episodes, logger=NullLogger(), seed=seed)
    return trainer, world, corpus


def checksum(sd: dict) -> float:
    """A float64 sum over a state_dict (tied tensors once): the weight version's fingerprint."""
    seen, total = set(), 0.0
    for t in sd.values():
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += float(t.detach().double().sum())
    return total


def snapshot(model) -> dict:
    """Detached clones of ``model``'s state_dict in shared memory (a tensor tied to another is cloned once)."""
    clones: dict[int, torch.Tensor] = {}
    out = {}
    for k, t in model.state_dict().items():
        ptr = t.data_ptr()
        if ptr not in clones:
            clones[ptr] = t.detach().clone().share_memory_()
        out[k] = clones[ptr]
    return out


def get_alive(q, alive, what: str, timeout: float | None = None):
    """``q.get()`` that gives up when ``alive()`` turns false (the other process died) or after ``timeout``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=0.5)
        except queue.Empty:
            if not alive():
                raise RuntimeError(f"{what}: the other process is gone") from None
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{what}: nothing after {timeout:.0f}s") from None


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _r(x, n: int = 4):
    return None if x is None else round(float(x), n)


# ----------------------------------------------------------------------------- worker process
def worker(spec: dict, batches, weights, go) -> None:
    """The rollout worker (module docstring): ready -> wait for ``go`` -> for s in 1..N: take weight
    version ``max(0, s-1-k)``, ``collect_batch(s)``, send it. Errors go back as ``("error", tb)``."""
    try:
        for k in THREAD_VARS:
            os.environ[k] = str(spec["threads"])
        torch.set_num_threads(spec["threads"])
        if spec.get("cpu") is not None:
            os.sched_setaffinity(0, {spec["cpu"]})
        parent = mp.parent_process()
        alive = (lambda: parent.is_alive()) if parent is not None else (lambda: True)
        t0 = time.perf_counter()
        tr, _, _ = build_trainer(spec["run"], spec["seed"], spec["params"])
        batches.put(
            ("ready", {"build_s": time.perf_counter() - t0, "pid": os.getpid(), "threads": torch.get_num_threads()})
        )
        while not go.wait(0.5):
            if not alive():
                return
        have, k, n = 0, spec["staleness"], spec["steps"]
        have_sum = checksum(tr.policy.state_dict())
        for s in range(1, n + 1):
            need = max(0, s - 1 - k)
            wait = load = 0.0
            while have < need:
                tw = time.perf_counter()
                item = get_alive(weights, alive, f"worker step {s}")
                wait += time.perf_counter() - tw
                if item is None:
                    return
                v, sd = item
                if v == need:
                    tl = time.perf_counter()
                    tr.policy.load_state_dict(sd)
                    load += time.perf_counter() - tl
                    have_sum = checksum(tr.policy.state_dict())
                have = v
                del item, sd
            tc = time.perf_counter()
            trajs, scores, metrics = tr.collect_batch(s)
            t_end = time.perf_counter()
            batches.put(
                (
                    "batch",
                    s,
                    trajs,
                    scores,
                    metrics,
                    {
                        "wait_weights_s": wait,
                        "load_s": load,
                        "rollout_s": t_end - tc,
                        "version": have,
                        "checksum": have_sum,
                        "rollout_start": tc,
                        "rollout_end": t_end,
                    },
                )
            )
        batches.put(("done", {}))
    except BaseException:  # noqa: BLE001 - everything goes back to the main process
        try:
            batches.put(("error", traceback.format_exc()))
        except Exception:  # noqa: BLE001
            pass


# ----------------------------------------------------------------------------- the two sides
def side_sync(run: str, args, world, corpus) -> dict:
    torch.set_num_threads(args.sync_threads)
    tb = time.perf_counter()
    tr, _, _ = build_trainer(run, args.seed, args.params, world, corpus)
    build_s = time.perf_counter() - tb
    load0 = os.getloadavg()[0]
    steps, ends = [], []
    t0 = time.perf_counter()
    for s in range(1, args.steps + 1):
        m = tr.train_step(s)
        ends.append(time.perf_counter() - t0)
        if m is None:  # a non-finite loss or gradient: the step was skipped
            m = tr.history[-1] if tr.history else {}
        steps.append(
            {
                "step": s,
                "rollout_s": _r(m.get("time/rollout_s")),
                "prepare_s": _r(m.get("time/prepare_s")),
                "update_s": _r(m.get("time/update_s")),
                "step_s": _r(m.get("time/step_s")),
                "end_s": _r(ends[-1]),
                "reward": _r(m.get("rollout/reward")),
                "em": _r(m.get("rollout/em")),
                "kl_ref": _r(m.get("train/kl_ref"), 6),
                "skipped": bool(m.get("train/skipped", 0.0)),
            }
        )
    out = {"side": "sync2", "threads": args.sync_threads, "build_s": _r(build_s, 2), "loadavg_1m_before": load0}
    out.update(summarize_side(steps, ends, ("rollout_s", "prepare_s", "update_s")))
    del tr
    gc.collect()
    return out


def side_async(run: str, args, world, corpus) -> dict:
    from agentr1.rl.collapse import Collapse

    torch.set_num_threads(args.async_threads)
    cpus = sorted(os.sched_getaffinity(0))
    pin = args.pin and len(cpus) >= 2
    k, n = args.staleness, args.steps
    ctx = mp.get_context("spawn")
    batches, weights, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    spec = {
        "run": run,
        "seed": args.seed,
        "params": args.params,
        "steps": n,
        "staleness": k,
        "threads": args.async_threads,
        "cpu": cpus[1] if pin else None,
    }
    saved = {v: os.environ.get(v) for v in THREAD_VARS}
    os.environ.update({v: str(args.async_threads) for v in THREAD_VARS})  # the child's OpenMP reads them at start
    proc = ctx.Process(target=worker, args=(spec, batches, weights, go), name=f"rollout-worker-{run}", daemon=True)
    t_spawn = time.perf_counter()
    try:
        proc.start()
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old
    try:
        if pin:
            os.sched_setaffinity(0, {cpus[0]})
        tr, _, _ = build_trainer(run, args.seed, args.params, world, corpus)
        main_build_s = time.perf_counter() - t_spawn
        msg = get_alive(batches, proc.is_alive, "worker start", timeout=args.start_timeout)
        if msg[0] == "error":
            raise RuntimeError(f"rollout worker failed:\n{msg[1]}")
        assert msg[0] == "ready", msg[0]
        worker_ready_s = time.perf_counter() - t_spawn
        worker_info = msg[1]
        sums = {0: checksum(tr.policy.state_dict())}
        load0 = os.getloadavg()[0]
        steps, ends, mismatches = [], [], []
        t0 = time.perf_counter()
        go.set()
        for s in range(1, n + 1):
            tw = time.perf_counter()
            msg = get_alive(batches, proc.is_alive, f"trainer step {s}")
            wait = time.perf_counter() - tw
            if msg[0] == "error":
                raise RuntimeError(f"rollout worker failed at step {s}:\n{msg[1]}")
            _, s_got, trajs, scores, metrics, w = msg
            if s_got != s:
                raise RuntimeError(f"expected step {s}'s batch, got step {s_got}'s")
            need = max(0, s - 1 - k)
            if w["version"] != need or w["checksum"] != sums.get(need):
                mismatches.append(
                    {
                        "step": s,
                        "need": need,
                        "version": w["version"],
                        "checksum": w["checksum"],
                        "sent": sums.get(need),
                    }
                )
            skipped = False
            tp = time.perf_counter()
            batch = tr.prepare(trajs, scores)
            tu = time.perf_counter()
            try:
                tr.update(batch, s)
            except Collapse:
                skipped = True
            tr.step = s
            t_upd = time.perf_counter()
            send = 0.0
            if s <= n - 1 - k:  # version s is the weights of step s + 1 + k's rollout
                sd = snapshot(tr.policy)
                weights.put((s, sd))
                send = time.perf_counter() - t_upd
                sums[s] = checksum(sd)  # verification, outside the send timer
                del sd
            ends.append(time.perf_counter() - t0)
            steps.append(
                {
                    "step": s,
                    "wait_s": _r(wait),
                    "prepare_s": _r(tu - tp),
                    "update_s": _r(t_upd - tu),
                    "send_s": _r(send),
                    "end_s": _r(ends[-1]),
                    "rollout_s": _r(w["rollout_s"]),
                    "worker_wait_weights_s": _r(w["wait_weights_s"]),
                    "load_s": _r(w["load_s"]),
                    "rollout_start_s": _r(w["rollout_start"] - t0),
                    "rollout_end_s": _r(w["rollout_end"] - t0),
                    "weights_version": w["version"],
                    "reward": _r(metrics.get("rollout/reward")),
                    "em": _r(metrics.get("rollout/em")),
                    "kl_ref": _r(batch["stats"].get("train/kl_ref"), 6),
                    "skipped": skipped,
                }
            )
            del batch, trajs, scores
        msg = get_alive(batches, proc.is_alive, "worker end", timeout=60)
        if msg[0] != "done":
            raise RuntimeError(f"rollout worker: expected done, got {msg[0]}: {msg[1] if len(msg) > 1 else ''}")
        proc.join(timeout=30)
        out = {
            "side": "async1",
            "threads": args.async_threads,
            "staleness": k,
            "pinned": pin,
            "main_build_s": _r(main_build_s, 2),
            "worker_ready_after_spawn_s": _r(worker_ready_s, 2),
            "worker_build_s": _r(worker_info["build_s"], 2),
            "worker_threads": worker_info["threads"],
            "loadavg_1m_before": load0,
            "weights_verified": not mismatches,
            "weight_mismatches": mismatches,
        }
        out.update(
            summarize_side(
                steps,
                ends,
                ("wait_s", "prepare_s", "update_s", "send_s", "rollout_s", "worker_wait_weights_s", "load_s"),
            )
        )
        del tr
        gc.collect()
        return out
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
        weights.cancel_join_thread()
        batches.close()
        weights.close()
        if pin:
            os.sched_setaffinity(0, set(cpus))


def summarize_side(steps: list[dict], ends: list[float], phases) -> dict:
    n, wall = len(steps), ends[-1]
    steady = (ends[-1] - ends[0]) / (n - 1) if n > 1 else None
    return {
        "steps": n,
        "wall_s": _r(wall, 3),
        "steps_per_min": _r(60.0 * n / wall, 3),
        "s_per_step": _r(wall / n),
        "steady_s_per_step": _r(steady),
        "phase_means_s": {p: _r(_mean(st[p] for st in steps)) for p in phases},
        "reward_mean": _r(_mean(st["reward"] for st in steps)),
        "skipped": sum(st["skipped"] for st in steps),
        "per_step": steps,
    }


# ----------------------------------------------------------------------------- summary
def summarize_run(run: str, rows: list[dict]) -> dict:
    sync = [r for r in rows if r["side"] == "sync2"]
    asy = [r for r in rows if r["side"] == "async1"]
    ratios = [a["steps_per_min"] / s["steps_per_min"] for s, a in zip(sync, asy)]
    sync_step = statistics.median(r["s_per_step"] for r in sync)

    def ph(side, p):
        return statistics.median(r["phase_means_s"][p] for r in side)

    worker_work = ph(asy, "rollout_s") + ph(asy, "load_s")
    trainer_work = ph(asy, "prepare_s") + ph(asy, "update_s") + ph(asy, "send_s")
    total_1t = ph(asy, "rollout_s") + ph(asy, "prepare_s") + ph(asy, "update_s")
    return {
        "ratio_per_round": [_r(x, 3) for x in ratios],
        "ratio_median": _r(statistics.median(ratios), 3),
        "steady_ratio_per_round": [
            _r(s["steady_s_per_step"] / a["steady_s_per_step"], 3)
            for s, a in zip(sync, asy)
            if s["steady_s_per_step"] and a["steady_s_per_step"]
        ],
        "sync2": {
            "steps_per_min_median": _r(statistics.median(r["steps_per_min"] for r in sync), 3),
            "s_per_step_median": _r(sync_step),
            "phases_s": {p: _r(ph(sync, p)) for p in ("rollout_s", "prepare_s", "update_s")},
            "reward_mean": _r(_mean(r["reward_mean"] for r in sync)),
        },
        "async1": {
            "steps_per_min_median": _r(statistics.median(r["steps_per_min"] for r in asy), 3),
            "s_per_step_median": _r(statistics.median(r["s_per_step"] for r in asy)),
            "phases_s": {
                p: _r(ph(asy, p))
                for p in ("wait_s", "prepare_s", "update_s", "send_s", "rollout_s", "worker_wait_weights_s", "load_s")
            },
            "reward_mean": _r(_mean(r["reward_mean"] for r in asy)),
            "weights_verified": all(r["weights_verified"] for r in asy),
            "worker_ready_after_spawn_s": _r(statistics.median(r["worker_ready_after_spawn_s"] for r in asy), 2),
        },
        "bounds": {
            "worker_work_s": _r(worker_work),
            "trainer_work_s": _r(trainer_work),
            "overlap_step_s": _r(max(worker_work, trainer_work)),
            "overlap_ratio": _r(sync_step / max(worker_work, trainer_work), 3),
            "total_1thread_s": _r(total_1t),
            "perfect_balance_step_s": _r(total_1t / 2),
            "perfect_balance_ratio": _r(sync_step / (total_1t / 2), 3),
            "note": "1-thread phases of the async side (medians over rounds of per-step means), measured "
            "with both processes running; sync2 s/step = wall / steps (median over rounds)",
        },
    }


def table(results: dict) -> str:
    lines = [
        "| run | side | steps/min | s/step | steady s/step | rollout | prepare | update | wait | send / load | reward |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        p = row["phase_means_s"]
        wait = p.get("wait_s")
        sl = f"{p['send_s']:.3f} / {p['load_s']:.3f}" if "send_s" in p else ""
        lines.append(
            f"| {row['run']} r{row['round']} | {row['side']} | {row['steps_per_min']:.2f} | {row['s_per_step']:.3f} | "
            f"{row['steady_s_per_step'] or float('nan'):.3f} | {p['rollout_s']:.3f} | {p['prepare_s']:.3f} | "
            f"{p['update_s']:.3f} | {'' if wait is None else f'{wait:.3f}'} | {sl} | {row['reward_mean']:.3f} |"
        )
    lines += [
        "",
        "| run | async1/sync2 (median) | per round | steady per round | overlap bound | perfect-balance bound | "
        "worker / trainer work s | weights verified |",
        "|---|---:|---|---|---:|---:|---|---|",
    ]
    for run, s in results["summary"].items():
        b = s["bounds"]
        lines.append(
            f"| {run} | {s['ratio_median']:.3f} | {s['ratio_per_round']} | {s['steady_ratio_per_round']} | "
            f"{b['overlap_ratio']:.3f} | {b['perfect_balance_ratio']:.3f} | "
            f"{b['worker_work_s']:.3f} / {b['trainer_work_s']:.3f} | {s['async1']['weights_verified']} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", default=["grpo", "ppo"], help="named runs of params.yaml")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--staleness", type=int, default=1, help="k: step s rolls out with the weights after update s-1-k")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sync-threads", type=int, default=2)
    ap.add_argument("--async-threads", type=int, default=1, help="torch threads of the trainer and of the worker each")
    ap.add_argument(
        "--pin", action="store_true", help="async side: trainer on the first allowed CPU, worker on the second"
    )
    ap.add_argument("--start-timeout", type=float, default=300.0, help="seconds to wait for the worker to be ready")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=str(_rl.ROOT / "bench/results/async_overlap.json"))
    args = ap.parse_args()
    if args.steps < 1 or args.staleness < 0:
        ap.error("--steps >= 1 and --staleness >= 0")

    t_all = time.perf_counter()
    world = _rl.load_world(args.params)
    from agentr1.data.schema import read_dataset

    corpus = read_dataset(world.cfg.data.processed_dir).corpus
    rows = []
    for rnd in range(args.rounds):
        for run in args.runs:
            for side in (side_sync, side_async):
                row = side(run, args, world, corpus)
                row = {"run": run, "round": rnd, **row}
                rows.append(row)
                print(
                    f"round {rnd} {run} {row['side']}: {row['steps_per_min']:.2f} steps/min "
                    f"({row['s_per_step']:.3f} s/step), reward {row['reward_mean']:.3f}"
                    + (
                        f", worker ready {row['worker_ready_after_spawn_s']:.1f}s after spawn"
                        if row["side"] == "async1"
                        else ""
                    ),
                    flush=True,
                )
    summary = {run: summarize_run(run, [r for r in rows if r["run"] == run]) for run in args.runs}
    results = {
        "bench": "async_overlap",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu": _cpu_name(),
            "cpus": os.cpu_count(),
            "allowed_cpus": len(os.sched_getaffinity(0)),
            "torch": torch.__version__,
        },
        "settings": {
            "runs": args.runs,
            "steps": args.steps,
            "rounds": args.rounds,
            "staleness": args.staleness,
            "seed": args.seed,
            "sync_threads": args.sync_threads,
            "async_threads": args.async_threads,
            "pin": args.pin,
            "params": args.params,
            "model": "nano (data/models/sft)",
            "questions": "train.questions of the run (fresh worlds in params.yaml)",
            "dev_eval": False,
            "checkpoints": False,
            "mp_start": "spawn",
            "sharing_strategy": mp.get_sharing_strategy(),
        },
        "rows": rows,
        "summary": summary,
        "total_s": _r(time.perf_counter() - t_all, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table(results))
    print(f"\n-> {out}")
    ok = all(s["async1"]["weights_verified"] for s in summary.values())
    if not ok:
        print(
            "WEIGHT VERSION MISMATCH: the worker rolled out with weights other than the scheduled version",
            file=sys.stderr,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
