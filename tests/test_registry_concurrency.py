"""The model registry under interruption and concurrency (issue 31, items 5 and 6).

Item 5, a registration interrupted by ``kill -9`` (a forked child killed at a chosen point of
:func:`agentr1.tracking.registry.register_evaluation`, then the same registration again): the
registry ends as after one uninterrupted registration - one version per evaluation, complete
(digest, variant, description, ``agentr1.registration = complete``), the same aliases and gate
decision; an unfinished version is deleted, a complete one reused.

Item 6, commands at once (the fast part of the concurrency suite; ``bench/concurrency.py`` runs
each 10 times): two ``agentr1 track``, two ``agentr1 promote``, and an evaluation's registration
and gate beside an ``agentr1 promote``, started together (a barrier) in separate processes with
their own MLflow clients on one SQLite store, leave the registry that the same commands leave run
one after the other (for the last pair: in one order or the other), with no traceback.

The project is a tiny one made without ``dvc repro``: ``agentr1 prepare`` (tracking off), a
scratch checkpoint per policy, hand-written evaluation outputs (``metrics.json`` with fixed EM
and CIs, ``episodes.jsonl``) and the ``dvc.lock`` entries ``evaluate@ppo``, ``evaluate@grpo``
and ``evaluate_baseline@cold_start`` that hash them. Workers are forked from a forkserver that
imported agentr1 and MLflow once (a fresh process per command, without paying the imports).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_project import TINY_PARAMS, deep_merge, sh  # noqa: E402

MODEL = "agentr1-policy"
RUNS = {"ppo": {"estimator": "gae"}, "grpo": {"estimator": "grpo"}}
# test/em and its CI per policy: grpo beats ppo beyond the CI, so the gate promotes it over ppo
EM = {"ppo": (0.25, 0.10, 0.40), "grpo": (0.75, 0.60, 0.90), "cold_start": (0.10, 0.00, 0.20)}
KEYS = {"ppo": "evaluate@ppo", "grpo": "evaluate@grpo", "cold_start": "evaluate_baseline@cold_start"}
PARAMS = deep_merge(TINY_PARAMS, {"evaluate": {"splits": ["test"], "max_examples": 2}, "tracking": {"trace_sample": 0}})
PARAMS["runs"] = RUNS
PRELOAD = [
    "agentr1.cli",
    "agentr1.stages.track",
    "agentr1.stages.evaluate",
    "agentr1.tracking.registry",
    "agentr1.tracking.compare",
    "mlflow.pyfunc",
]
WORKER_TIMEOUT_S = 600


# ------------------------------------------------------------------------------------ project
def _checkpoint(path: Path) -> Path:
    from tracking_helpers import make_checkpoint

    return make_checkpoint(path)


def make_eval_project(root: Path) -> Path:
    """The tiny project of the module docstring at ``root`` (a git repository); returns it.
    ``dvc.lock`` holds the three evaluations, ``dvc.base.lock`` only ppo's and the cold start's."""
    from agentr1.config import load_config
    from agentr1.data.schema import read_dataset
    from agentr1.eval.splits import eval_data_fingerprint, select_questions
    from agentr1.tracking.provenance import dvc_hash

    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(PARAMS, sort_keys=False))
    sh(["agentr1", "--set", "tracking.enabled=false", "prepare"], root)
    cfg = load_config(root / "params.yaml")
    questions = select_questions(
        read_dataset(root / cfg.data.processed_dir), cfg.evaluate.splits, cfg.evaluate.max_examples
    )
    ckpts = {
        "ppo": root / cfg.train.out_dir / "ppo" / "checkpoint",
        "grpo": root / cfg.train.out_dir / "grpo" / "checkpoint",
        "cold_start": root / cfg.sft.out_dir,
    }
    _checkpoint(ckpts["ppo"])
    shutil.copytree(ckpts["ppo"], ckpts["grpo"])
    shutil.copytree(ckpts["ppo"], ckpts["cold_start"])
    stages = {}
    for policy, (em, lo, hi) in EM.items():
        out = root / cfg.evaluate.out_dir / policy
        out.mkdir(parents=True)
        rows = [
            {
                "id": str(q["id"]),
                "split": split,
                "question": q["question"],
                "type": q.get("type"),
                "hops": q.get("hops"),
                "em": 0.0,
                "f1": 0.0,
                "subem": 0.0,
                "format_ok": 1.0,
                "answered": 1.0,
                "tool_calls": 1.0,
                "turns": 2.0,
                "reward": 0.0,
                "answer": "x",
                "golds": [str(a) for a in q["answers"]],
                "reason": "answer",
                "early_answer": 0.0,
            }
            for split, qs in questions.items()
            for q in qs
        ]
        (out / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        summary = {"n": len(rows), "em": em, "em_ci_lower": lo, "em_ci_upper": hi}
        metrics = {
            "policy": policy,
            "kind": "rl" if policy in RUNS else policy,
            "checkpoint": str(ckpts[policy].relative_to(root)),
            "overrides": RUNS.get(policy),
            "eval_data": eval_data_fingerprint(questions),
            "seed": cfg.seed,
            "bootstrap": {"samples": 100, "ci": 0.95},
            "splits": {"test": summary},
            "test/em": em,
            "test/em_ci_lower": lo,
            "test/em_ci_upper": hi,
            "test/n": float(len(rows)),
        }
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        dep = str(ckpts[policy].relative_to(root))
        stages[KEYS[policy]] = {
            "cmd": f"agentr1 evaluate --policy {policy}",
            "deps": [{"path": dep, "hash": "md5", "md5": dvc_hash(root / dep)}],
            "outs": [
                {"path": str(p.relative_to(root)), "hash": "md5", "md5": dvc_hash(p)}
                for p in (out / "episodes.jsonl", out / "metrics.json")
            ],
        }
    (root / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}, sort_keys=False))
    base = {k: v for k, v in stages.items() if k != KEYS["grpo"]}
    (root / "dvc.base.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": base}, sort_keys=False))
    (root / ".gitignore").write_text("stores/\n")
    sh(["git", "init", "-q", "-b", "main"], root)
    sh(
        ["git", "-c", "user.email=t@agentr1.invalid", "-c", "user.name=t", "-c", "commit.gpgsign=false", "add", "-A"],
        root,
    )
    sh(
        [
            "git",
            "-c",
            "user.email=t@agentr1.invalid",
            "-c",
            "user.name=t",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "-m",
            "tiny evaluations",
        ],
        root,
    )
    return root


def store_env(store: Path) -> dict[str, str]:
    """The environment pointing every command at the SQLite store in folder ``store``."""
    return {
        "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}",
        "AGENTR1_ARTIFACT_ROOT": str(store / "art"),
        "AGENTR1_PIPELINE_ID": "concurrency",
    }


def copy_store(src: Path, dst: Path) -> Path:
    """A copy of the SQLite database of store ``src`` in ``dst`` (the artifacts stay shared: the
    commands run on a copy write new artifacts only, under new ids)."""
    dst.mkdir(parents=True)
    shutil.copy2(src / "mlflow.db", dst / "mlflow.db")
    return dst


# ------------------------------------------------------------------------------------ workers
def _work(kind: str, project: str, env: dict[str, str], arg: Any, log_path: str, barrier: Any) -> None:
    """One command in this (forked) process, its stdout and stderr to ``log_path``: ``cli`` (argv
    ``arg`` of ``agentr1``), ``register`` (the evaluate stage's MLflow phase for policy ``arg``:
    what ``agentr1 evaluate`` does after its rollouts), ``base`` (``agentr1 track`` of ``dvc.base.lock``).
    Waits on ``barrier`` (when given) to start with the others; exits with the command's status."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(project)
    os.environ.update(env)
    if barrier is not None:
        barrier.wait(timeout=120)
    if kind == "cli":
        from agentr1.cli import main

        sys.exit(main(list(arg)))
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from agentr1.config import load_config

    cfg = load_config("params.yaml")
    if kind == "base":
        from agentr1.stages.track import track

        track(cfg, "dvc.base.lock")
    elif kind == "register":
        from agentr1.stages import evaluate
        from agentr1.stages.context import open_stage

        with open_stage(cfg, "evaluate", run_name=KEYS[arg], variant=arg if arg in RUNS else None) as ctx:
            evaluate.log_outputs(ctx, argparse.Namespace(policy=arg))
    else:
        raise ValueError(kind)
    sys.exit(0)


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def run_together(
    project: Path, env: dict[str, str], commands: list[tuple[str, Any]], logs: Path, together: bool = True
) -> list[tuple[int, str]]:
    """Run ``commands`` (``(kind, arg)`` of :func:`_work`) at once (a barrier) or, with
    ``together=False``, one after the other; returns each one's ``(exit code, output)``."""
    ctx = _context()
    logs.mkdir(parents=True, exist_ok=True)
    barrier = ctx.Barrier(len(commands)) if together and len(commands) > 1 else None
    paths = [logs / f"{i}-{kind}.log" for i, (kind, _) in enumerate(commands)]
    procs = [
        ctx.Process(target=_work, args=(kind, str(project), env, arg, str(path), barrier))
        for (kind, arg), path in zip(commands, paths)
    ]
    results = []
    if together:
        for p in procs:
            p.start()
        for p in procs:
            p.join(WORKER_TIMEOUT_S)
    else:
        for p in procs:
            p.start()
            p.join(WORKER_TIMEOUT_S)
    for p, path in zip(procs, paths):
        if p.is_alive():
            p.kill()
            p.join()
        results.append((p.exitcode, path.read_text() if path.exists() else ""))
    return results


# ------------------------------------------------------------------------------------ registry
def registry_state(env: dict[str, str]) -> dict[str, Any]:
    """What must be the same after concurrent and serial commands, independent of version numbers
    (a deleted orphan's number is not reused): per version (by variant) its kind, registration
    state and gate decision; each alias's variant; the number of FINISHED runs per stage run name
    and of runs left RUNNING."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    versions = client.search_model_versions(f"name = '{MODEL}'")
    variant = {str(v.version): v.tags.get("agentr1.variant") for v in versions}
    try:
        aliases = dict(client.get_registered_model(MODEL).aliases)
    except Exception:  # noqa: BLE001 - no model at all
        aliases = {}
    exp = client.get_experiment_by_name("agentr1-nano")
    runs = client.search_runs([exp.experiment_id], max_results=1000) if exp else []
    finished: dict[str, int] = {}
    for r in runs:
        if r.data.tags.get("agentr1.role") == "stage" and r.info.status == "FINISHED":
            finished[r.info.run_name] = finished.get(r.info.run_name, 0) + 1
    return {
        "versions": sorted(
            (
                str(v.tags.get("agentr1.variant")),
                str(v.tags.get("agentr1.policy_kind")),
                str(v.tags.get("agentr1.registration")),
                bool(v.tags.get("agentr1.artifact_sha256")),
                str(v.tags.get("agentr1.gate.decision")),
            )
            for v in versions
        ),
        "aliases": {a: variant.get(str(v)) for a, v in sorted(aliases.items())},
        "finished_runs": dict(sorted(finished.items())),
        "running": sum(r.info.status == "RUNNING" for r in runs),
    }


def problems(results: list[tuple[int, str]]) -> list[str]:
    """The commands that failed or printed a traceback (their output's tail)."""
    return [f"exit {rc}: {out[-1500:]}" for rc, out in results if rc != 0 or "Traceback" in out]


def make_base_store(project: Path, store: Path) -> Path:
    """A store holding ppo (champion and challenger) and the cold start, by ``agentr1 track`` of
    ``dvc.base.lock``: grpo's evaluation is still to be registered."""
    results = run_together(project, store_env(store), [("base", None)], store / "logs", together=False)
    assert not problems(results), problems(results)
    return store


def make_full_store(project: Path, store: Path) -> Path:
    """A store after ``agentr1 track`` of the whole lock, with ``champion`` set back to ppo by hand
    (a champion rolled back): the challenger, grpo, awaits ``agentr1 promote``."""
    from mlflow import MlflowClient

    results = run_together(project, store_env(store), [("cli", ["track"])], store / "logs", together=False)
    assert not problems(results), problems(results)
    client = MlflowClient(tracking_uri=store_env(store)["MLFLOW_TRACKING_URI"])
    ppo = [v for v in client.search_model_versions(f"name = '{MODEL}'") if v.tags.get("agentr1.variant") == "ppo"]
    client.set_registered_model_alias(MODEL, "champion", ppo[0].version)
    client.set_model_version_tag(MODEL, ppo[0].version, "agentr1.gate.decision", "promote")
    return store


# ------------------------------------------------------------------------------------ fixtures
STORE_ENV = ("MLFLOW_TRACKING_URI", "AGENTR1_ARTIFACT_ROOT")


@pytest.fixture(scope="module", autouse=True)
def _own_stores():
    """Each test names its own store (the session's isolated store in the environment would win
    over ``tracking.uri``)."""
    patch = pytest.MonkeyPatch()
    for name in STORE_ENV:
        patch.delenv(name, raising=False)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_eval_project(tmp_path_factory.mktemp("concurrency") / "proj")


@pytest.fixture(scope="module")
def base_store(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_base_store(project, tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def full_store(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_full_store(project, tmp_path_factory.mktemp("full"))


REPS = int(os.environ.get("AGENTR1_CONCURRENCY_REPS", "2"))


# ------------------------------------------------------------------------------------ item 6
def test_two_tracks_at_once_log_each_stage_once(project: Path, tmp_path: Path) -> None:
    """Two ``agentr1 track`` on a fresh store at once: one logs, the other waits for the writer
    lock, plans again and adds nothing - 3 versions (not 6), each stage once, no alembic or other
    traceback; the same registry as ``track`` then ``track``."""
    serial = tmp_path / "serial"
    assert not problems(
        run_together(project, store_env(serial), [("cli", ["track"])] * 2, serial / "logs", together=False)
    )
    expected = registry_state(store_env(serial))
    assert len(expected["versions"]) == 3 and set(expected["finished_runs"].values()) == {1}
    for rep in range(REPS):
        store = tmp_path / f"together{rep}"
        results = run_together(project, store_env(store), [("cli", ["track"])] * 2, store / "logs")
        assert not problems(results)
        assert registry_state(store_env(store)) == expected, f"repetition {rep}"
        assert sum("3 logged" in out for _, out in results) == 1  # the other one: every stage "in MLflow"


def test_two_promotes_at_once_decide_as_one_after_the_other(project: Path, full_store: Path, tmp_path: Path) -> None:
    """Two ``agentr1 promote`` at once: the first promotes grpo, the second finds it champion
    already (keep), as when run one after the other - never both "promote" on a stale champion."""
    serial = copy_store(full_store, tmp_path / "serial")
    assert not problems(
        run_together(project, store_env(serial), [("cli", ["promote"])] * 2, serial / "logs", together=False)
    )
    expected = registry_state(store_env(serial))
    assert expected["aliases"]["champion"] == "grpo"
    for rep in range(REPS):
        store = copy_store(full_store, tmp_path / f"together{rep}")
        results = run_together(project, store_env(store), [("cli", ["promote"])] * 2, store / "logs")
        assert not problems(results)
        assert registry_state(store_env(store)) == expected, f"repetition {rep}"
        decisions = sorted(json.loads(out.strip().splitlines()[-1])["decision"] for _, out in results)
        assert decisions == ["keep", "promote"]


def test_an_evaluation_registering_beside_a_promote(project: Path, base_store: Path, tmp_path: Path) -> None:
    """grpo's evaluation registers and gates its version while ``agentr1 promote`` runs: the
    registry is the one of the two run one after the other, in one order or the other."""
    orders = []
    for name, commands in (
        ("register-first", [("register", "grpo"), ("cli", ["promote"])]),
        ("promote-first", [("cli", ["promote"]), ("register", "grpo")]),
    ):
        store = copy_store(base_store, tmp_path / name)
        assert not problems(run_together(project, store_env(store), commands, store / "logs", together=False))
        orders.append(registry_state(store_env(store)))
    assert orders[0] != orders[1] and all(o["aliases"]["champion"] == "grpo" for o in orders)
    for rep in range(REPS):
        store = copy_store(base_store, tmp_path / f"together{rep}")
        results = run_together(project, store_env(store), [("register", "grpo"), ("cli", ["promote"])], store / "logs")
        assert not problems(results)
        assert registry_state(store_env(store)) in orders, f"repetition {rep}"


def test_the_writer_lock_names_its_holder_and_the_fix(tmp_path: Path) -> None:
    """A command that cannot get the lock within its timeout fails naming the lock file, the
    holder's pid and command and the fix; the lock is re-entrant in one thread and is freed when
    its holder is killed."""
    from agentr1.errors import StageError
    from agentr1.tracking.writelock import lock_file, writer_lock

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()

    def hold() -> None:
        with writer_lock(uri, "agentr1 track"):
            ready.set()
            release.wait(60)

    holder = ctx.Process(target=hold)
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(StageError) as err:
            with writer_lock(uri, "agentr1 promote", timeout_s=0.2):
                pass
        text = str(err.value)
        assert f"pid {holder.pid}" in text and "agentr1 track" in text and str(lock_file(uri)) in text
        assert "tracking.lock_timeout_s" in text and "wait for it to finish" in text
    finally:
        holder.kill()  # kill -9: the kernel frees the lock
        holder.join()
    with writer_lock(uri, "agentr1 promote", timeout_s=5) as path, writer_lock(uri, "evaluate@ppo registration"):
        assert path == tmp_path / "mlflow.db.writer-lock"
    server = lock_file("http://user:secret@tracking.example:5000")
    assert server == lock_file("http://other:pw@tracking.example:5000") and "secret" not in str(server)


# ------------------------------------------------------------------------------------ item 5
def _register_until(kill_at: str | None, cfg_args: tuple, policy: str, checkpoint: str) -> None:
    """In a forked child: the registration (and gate) of ``policy``'s evaluation in an evaluate
    run, the process killed (SIGKILL) at ``kill_at``: ``created`` (right after the version is
    created), ``gate`` (before the gate writes its decision) or ``champion`` (after the decision,
    before ``champion`` moves)."""
    from mlflow import MlflowClient

    cfg = _cfg(*cfg_args)
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    if kill_at == "created":
        original = MlflowClient._create_model_version

        def created(self, *a, **kw):
            mv = original(self, *a, **kw)
            die()
            return mv

        MlflowClient._create_model_version = created
    elif kill_at in ("gate", "champion"):
        tag, alias = MlflowClient.set_model_version_tag, MlflowClient.set_registered_model_alias

        def set_tag(self, name, version, key, value):
            if kill_at == "gate" and key == "agentr1.gate.decision":
                die()
            return tag(self, name, version, key, value)

        def set_alias(self, name, alias_, version):
            if kill_at == "champion" and alias_ == "champion":
                die()
            return alias(self, name, alias_, version)

        MlflowClient.set_model_version_tag, MlflowClient.set_registered_model_alias = set_tag, set_alias
    _register(cfg, policy, checkpoint)
    os._exit(0)


def _cfg(uri: str, art: str):
    from tracking_helpers import tracking_cfg

    cfg = tracking_cfg(uri, Path(art), parent_run=False)
    cfg.runs = dict(RUNS)
    return cfg


def _register(cfg, policy: str, checkpoint: str) -> dict:
    from agentr1.tracking import stage_run
    from agentr1.tracking.registry import register_evaluation

    for name in STORE_ENV:  # mlflow.set_tracking_uri exports the previous store's URI, which would win over cfg's
        os.environ.pop(name, None)
    em, lo, hi = EM[policy]
    flat = {"test/em": em, "test/em_ci_lower": lo, "test/em_ci_upper": hi}
    kind = "rl" if policy in RUNS else policy
    with stage_run(cfg, "evaluate", run_name=KEYS[policy], variant=policy if kind == "rl" else None) as run:
        return register_evaluation(run, checkpoint, policy, kind, flat, "test:abc", MODEL, "test/em")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("ckpt") / "policy")


@pytest.fixture(scope="module")
def uninterrupted(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The registry after ppo's, the cold start's and grpo's registrations, none interrupted."""
    store = tmp_path_factory.mktemp("uninterrupted")
    cfg = _cfg(f"sqlite:///{store / 'mlflow.db'}", str(store / "art"))
    for policy in ("ppo", "cold_start", "grpo"):
        _register(cfg, policy, str(checkpoint))
    return registry_state({"MLFLOW_TRACKING_URI": cfg.tracking.uri})


@pytest.mark.parametrize("kill_at", ["created", "gate", "champion"])
def test_a_registration_killed_then_run_again_leaves_the_uninterrupted_registry(
    kill_at: str, checkpoint: Path, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """``kill -9`` of grpo's registration right after its version is created (an orphan: no
    digest, description, alias, gate decision), before the gate decides, or after the decision
    but before ``champion`` moves; then the registration again: no orphan and no duplicate (the
    unfinished version deleted, a complete one reused), the uninterrupted run's aliases and
    decisions."""
    from mlflow import MlflowClient

    uri, art = f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "art")
    cfg = _cfg(uri, art)
    for policy in ("ppo", "cold_start"):
        _register(cfg, policy, str(checkpoint))
    # a fresh process (forkserver), not a fork of this one: it must not share this one's open SQLite connections
    child = _context().Process(target=_register_until, args=(kill_at, (uri, art), "grpo", str(checkpoint)))
    child.start()
    child.join(300)
    assert child.exitcode == -signal.SIGKILL
    client = MlflowClient(tracking_uri=uri)
    assert len(client.search_model_versions(f"name = '{MODEL}'")) == 3  # the interrupted registration left its version

    info = _register(cfg, "grpo", str(checkpoint))  # the re-run
    assert registry_state({"MLFLOW_TRACKING_URI": uri}) | {"finished_runs": None, "running": None} == uninterrupted | {
        "finished_runs": None,
        "running": None,
    }
    grpo = [v for v in client.search_model_versions(f"name = '{MODEL}'") if v.tags.get("agentr1.variant") == "grpo"]
    assert len(grpo) == 1 and grpo[0].tags["agentr1.registration"] == "complete"
    assert grpo[0].tags["agentr1.artifact_sha256"] and grpo[0].description.startswith("grpo: ")
    assert info["version"] == str(grpo[0].version) and info["promotion"]["decision"] == "promote"
    assert info.get("reused", False) == (kill_at != "created")  # complete: reused, not registered again


def test_the_same_evaluation_registered_twice_is_one_version(checkpoint: Path, tmp_path: Path) -> None:
    """A finished registration run again (``agentr1 track`` after an interrupted stage, a
    re-run): no new version, the gate's recorded decision kept; other metrics are another
    evaluation, another version."""
    from mlflow import MlflowClient

    cfg = _cfg(f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "art"))
    first = _register(cfg, "ppo", str(checkpoint))
    again = _register(cfg, "ppo", str(checkpoint))
    assert again["version"] == first["version"] and again["reused"] is True
    assert again["promotion"]["decision"] == first["promotion"]["decision"] == "promote"
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    assert len(client.search_model_versions(f"name = '{MODEL}'")) == 1
    assert client.get_model_version(MODEL, first["version"]).tags["agentr1.gate.decision"] == "promote"
    from agentr1.tracking import stage_run
    from agentr1.tracking.registry import register_evaluation

    with stage_run(cfg, "evaluate", run_name="evaluate@ppo", variant="ppo") as run:
        other = register_evaluation(
            run,
            str(checkpoint),
            "ppo",
            "rl",
            {"test/em": 0.3, "test/em_ci_lower": 0.15, "test/em_ci_upper": 0.45},
            "test:abc",
            MODEL,
            "test/em",
        )
    assert other["version"] != first["version"] and "reused" not in other
    assert len(client.search_model_versions(f"name = '{MODEL}'")) == 2
