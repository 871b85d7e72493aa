"""Kill -9 at random moments, then run the command again: does the tracking store survive?

The fault-injection suite of issue 31, the long part (the fast part is in ``tests/``). It builds
the tiny pipeline of ``tests/test_track_pipeline.py`` once (``dvc repro`` with tracking to a
throwaway store), records what uninterrupted commands leave in a fresh store (the *reference*),
then, ``--n`` times for each kind of fault, on a fresh store:

* ``create``: ``agentr1 track`` on an empty store, killed 0-1.5 s after ``mlflow.db`` appears
  (the store's first creation), then ``agentr1 track`` again;
* ``track``: ``agentr1 track``, killed at a uniformly random moment of its reference duration,
  then ``agentr1 track`` again;
* ``evaluate``: ``agentr1 track``, then ``agentr1 evaluate --policy ppo`` killed at a random
  moment of its duration, then ``agentr1 evaluate --policy ppo`` again;
* ``train``: ``agentr1 train --run ppo`` (a checkpoint every step) killed at a random moment,
  then ``agentr1 train --run ppo --resume`` (without ``--resume`` when it died before its first
  checkpoint).

A fault is *survived* when, after the second command: the store opens; the registry has the
reference's versions (variant, policy kind, gate decision), no orphan (a version without its
artifact digest or variant) and no duplicate; the aliases point at the reference's variants; no
stage run is left RUNNING; each run name has as many FINISHED runs as in the reference (no
duplicate, none missing); for ``train``, the FINISHED
``train@ppo`` run holds the whole curve, each step once, with the reference's values, and the
outputs are the reference's bytes. *Lost* lists what was not.

    python bench/fault_injection.py --n 5                 # every kind, 5 faults each
    python bench/fault_injection.py --n 2 --kinds create,train

Writes ``bench/results/fault_injection.json`` and prints the table; exit 1 when a fault was not
survived. Runs one command at a time (the machine's 2 cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _tiny_project import deep_merge, make_project, sh  # noqa: E402
from _tiny_project import env as base_env  # noqa: E402

KINDS = ("create", "track", "evaluate", "train")
TRAIN_METRIC = "rollout/reward"


def project(work: Path) -> Path:
    """The tiny pipeline of tests/test_track_pipeline.py, reproduced once (a checkpoint every
    train step, so a kill lands between checkpoints)."""
    import yaml

    from test_track_pipeline import PARAMS, tiny_dvc_yaml

    if (work / "proj" / "dvc.lock").is_file():  # --work of an earlier run: already reproduced
        return work / "proj"
    params = deep_merge(PARAMS, {"train": {"steps": 4, "checkpoint": {"every": 1}}})
    root = make_project(work / "proj", params=params, extra_stages=tiny_dvc_yaml())
    (root / ".gitignore").write_text("timing.json\n")
    sh(["git", "add", ".gitignore"], root)
    sh(["git", "commit", "-q", "-m", "ignore timings"], root)
    sh(["dvc", "repro"], root, extra_env=store(work, "build"), timeout=3600)
    assert yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    return root


def store(work: Path, name: str) -> dict[str, str]:
    return {
        "MLFLOW_TRACKING_URI": f"sqlite:///{work / name / 'mlflow.db'}",
        "AGENTR1_ARTIFACT_ROOT": str(work / name / "art"),
        "AGENTR1_PIPELINE_ID": "",
    }


def run(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return sh(["agentr1", *args], root, extra_env=env, check=False, timeout=1800)


def killed(root: Path, env: dict[str, str], args: list[str], delay: float, after: Path | None = None) -> float:
    """Start ``agentr1 args``; SIGKILL it ``delay`` s after it starts (after ``after`` exists, when
    given). Returns when, in seconds from the start, it was killed (or ended by itself)."""
    proc = subprocess.Popen(
        ["agentr1", *args], cwd=root, env={**base_env(), **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    t0 = time.monotonic()
    if after is not None:
        while not after.exists() and proc.poll() is None:
            time.sleep(0.01)
    start = time.monotonic()
    while proc.poll() is None and time.monotonic() - start < delay:
        time.sleep(0.01)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    return round(time.monotonic() - t0, 2)


def state(env: dict[str, str]) -> dict:
    """What the store holds, in comparable form (versions by variant, aliases by variant, runs)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("agentr1-nano")
    runs = client.search_runs([exp.experiment_id], max_results=5000) if exp else []
    stage = [r for r in runs if r.data.tags.get("agentr1.role") == "stage"]
    finished: dict[str, int] = {}
    for r in stage:
        if r.info.status == "FINISHED":
            finished[r.info.run_name] = finished.get(r.info.run_name, 0) + 1
    try:
        versions = client.search_model_versions("name = 'agentr1-policy'")
        aliases = dict(client.get_registered_model("agentr1-policy").aliases) if versions else {}
    except Exception:  # noqa: BLE001 - no registered model yet
        versions, aliases = [], {}
    variant = {str(v.version): v.tags.get("agentr1.variant", "?") for v in versions}
    return {
        "versions": sorted(
            (
                v.tags.get("agentr1.variant", "?"),
                v.tags.get("agentr1.policy_kind", "?"),
                v.tags.get("agentr1.gate.decision", "-"),
            )
            for v in versions
        ),
        "orphans": sorted(
            str(v.version)
            for v in versions
            if not v.tags.get("agentr1.artifact_sha256") or not v.tags.get("agentr1.variant")
        ),
        "aliases": {a: variant.get(str(n), "?") for a, n in sorted(aliases.items())},
        "running": sorted(r.info.run_name for r in stage if r.info.status == "RUNNING"),
        "finished": dict(sorted(finished.items())),
        "curve": curve(client, [r for r in stage if r.info.run_name == "train@ppo" and r.info.status == "FINISHED"]),
    }


def curve(client, runs) -> list[tuple[int, float]] | None:
    if len(runs) != 1:
        return None
    hist = client.get_metric_history(runs[0].info.run_id, TRAIN_METRIC)
    return sorted((m.step, round(m.value, 6)) for m in hist)


DVC_OUTS = (
    "checkpoint",
    "curve.csv",
    "metrics.json",
)  # a train run's DVC outputs (not state/, timing, mlflow_run.json)


def digest(root: Path, rel: str) -> str:
    h = hashlib.sha256()
    files = [
        p
        for out in DVC_OUTS
        for p in ([root / rel / out] if (root / rel / out).is_file() else (root / rel / out).rglob("*"))
    ]
    for f in sorted(p for p in files if p.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def lost(got: dict, ref: dict, keys: tuple[str, ...]) -> list[str]:
    """What of ``ref`` the store ``got`` lacks or has wrong (empty: survived)."""
    out = [f"{k}: {got[k]} != {ref[k]}" for k in keys if got[k] != ref[k]]
    out += [f"orphan versions {got['orphans']}"] if got["orphans"] else []
    out += [f"runs left RUNNING {got['running']}"] if got["running"] else []
    extra = {k: n for k, n in got["finished"].items() if n > ref["finished"].get(k, 0)}
    out += [f"duplicate FINISHED runs {extra}"] if extra else []
    missing = sorted(set(ref["finished"]) - set(got["finished"]))
    out += [f"runs missing {missing}"] if missing else []
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=5, help="faults per kind")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a new temporary one)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/fault_injection.json")
    a = ap.parse_args(argv)
    kinds = [k for k in a.kinds.split(",") if k]
    rng = random.Random(a.seed)
    work = a.work or Path(tempfile.mkdtemp(prefix="agentr1-faults-"))
    t0 = time.monotonic()
    root = project(work)
    print(f"tiny pipeline reproduced in {time.monotonic() - t0:.0f} s ({root})", flush=True)

    # references: uninterrupted commands on fresh stores, and their durations
    for name in ("ref", "ref_train"):  # an earlier run's (--work)
        shutil.rmtree(work / name, ignore_errors=True)
    ref_env = store(work, "ref")
    t = time.monotonic()
    res = run(root, ref_env, "track")
    t_track = time.monotonic() - t
    assert res.returncode == 0, res.stderr[-2000:]
    ref = state(ref_env)
    t = time.monotonic()
    res = run(root, ref_env, "evaluate", "--policy", "ppo")
    t_eval = time.monotonic() - t
    assert res.returncode == 0, res.stderr[-2000:]
    ref_eval = state(ref_env)
    tr_env = store(work, "ref_train")
    t = time.monotonic()
    res = run(root, tr_env, "train", "--run", "ppo")
    t_train = time.monotonic() - t
    assert res.returncode == 0, res.stderr[-2000:]
    ref_train = state(tr_env)
    ref_bytes = digest(root, "data/runs/ppo")
    print(
        f"reference: track {t_track:.0f} s, evaluate {t_eval:.0f} s, train {t_train:.0f} s; "
        f"{len(ref['versions'])} versions ({len(ref_eval['versions'])} after evaluate), aliases {ref['aliases']}, curve {len(ref_train['curve'] or [])} steps",
        flush=True,
    )

    rows = []
    for kind in kinds:
        for i in range(a.n):
            env = store(work, f"{kind}{i}")
            db = Path(env["MLFLOW_TRACKING_URI"][len("sqlite:///") :])
            if kind == "create":
                at = killed(root, env, ["track"], rng.uniform(0.0, 1.5), after=db)
                second = run(root, env, "track")
                keys, want = ("versions", "aliases"), ref
            elif kind == "track":
                at = killed(root, env, ["track"], rng.uniform(0.1, 1.0) * t_track)
                second = run(root, env, "track")
                keys, want = ("versions", "aliases"), ref
            elif kind == "evaluate":
                assert run(root, env, "track").returncode == 0
                at = killed(root, env, ["evaluate", "--policy", "ppo"], rng.uniform(0.1, 1.0) * t_eval)
                second = run(root, env, "evaluate", "--policy", "ppo")
                keys, want = ("versions", "aliases"), ref_eval
            else:
                at = killed(root, env, ["train", "--run", "ppo"], rng.uniform(0.1, 1.0) * t_train)
                second = run(root, env, "train", "--run", "ppo", "--resume")
                if second.returncode != 0 and "nothing to resume" in second.stderr:
                    second = run(root, env, "train", "--run", "ppo")
                keys, want = ("curve",), ref_train
            try:
                got = state(env)
                miss = lost(got, want, keys)
            except Exception as exc:  # noqa: BLE001 - the store does not open: that is the finding
                miss = [f"store does not open: {type(exc).__name__}: {str(exc)[:200]}"]
            if second.returncode != 0:
                miss.insert(0, f"second command exit {second.returncode}: {second.stderr.strip().splitlines()[-1:]}")
            if kind == "train" and digest(root, "data/runs/ppo") != ref_bytes:
                miss.append("train outputs differ from the uninterrupted run's")
            row = {"kind": kind, "trial": i, "killed_at_s": at, "survived": not miss, "lost": miss}
            if miss:  # what the second command said, to find out why
                row["second_log_tail"] = (second.stdout + second.stderr).strip().splitlines()[-15:]
            rows.append(row)
            print(
                f"{kind:<9} #{i} killed at {at:6.2f} s: {'survived' if not miss else 'LOST ' + '; '.join(miss)}",
                flush=True,
            )
            shutil.rmtree(db.parent, ignore_errors=True)

    table = []
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        table.append(
            {
                "kind": kind,
                "injected": len(mine),
                "survived": sum(r["survived"] for r in mine),
                "lost": sorted({x for r in mine for x in r["lost"]}),
            }
        )
    print("\n| fault (kill -9 during) | injected | survived | lost |\n|---|---:|---:|---|")
    for t_ in table:
        print(f"| {t_['kind']} | {t_['injected']} | {t_['survived']} | {'; '.join(t_['lost']) or 'nothing'} |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "n": a.n,
                "seed": a.seed,
                "durations_s": {"track": round(t_track, 1), "evaluate": round(t_eval, 1), "train": round(t_train, 1)},
                "reference": ref | {"train_curve_steps": len(ref_train["curve"] or [])},
                "table": table,
                "trials": rows,
                "wall_s": round(time.monotonic() - t0),
            },
            indent=1,
        )
        + "\n"
    )
    shutil.rmtree(work, ignore_errors=True) if a.work is None else None
    return 0 if all(r["survived"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
