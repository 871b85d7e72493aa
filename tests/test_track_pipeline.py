"""``agentr1 track`` end to end: a fresh clone's MLflow store shows what DVC has.

A tiny copy of the real pipeline (the repository's ``dvc.yaml`` with its ``src/`` dependencies
dropped, two named runs, a tiny world, model and budgets) is reproduced with ``dvc repro``, its
stages logging live to one store. Then:

* the fresh-clone situation: the same checkout (outputs present, ``dvc.lock`` written) and an
  empty store. ``agentr1 track`` logs one run per ``dvc.lock`` stage, with the live runs' names,
  params, tags and metrics, nested under the pipeline's parent (Table 3 on it), the evaluated
  episodes as traces (the live sample), the registry's versions with provenance and the aliases
  the gate sets; ``agentr1 compare`` answers; a second ``agentr1 track`` adds nothing and
  ``dvc status`` stays clean;
* after the live ``dvc repro`` itself: ``agentr1 track`` adds nothing (it adopts the first runs,
  which could not tag their outputs), and again nothing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from _tiny_project import TINY_PARAMS, deep_merge, make_project, sh
from agentr1.stages.train import CURVE
from agentr1.tracking.gate import GateStats, gate

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
RUNS = {"ppo": {"estimator": "gae"}, "grpo": {"estimator": "grpo"}}
PARAMS = deep_merge(
    TINY_PARAMS,
    {
        "model": {
            "scratch": {
                "vocab_size": 600,
                "hidden_size": 32,
                "num_layers": 2,
                "num_heads": 2,
                "num_kv_heads": 2,
                "intermediate_size": 64,
                "max_position": 1024,
            }
        },
        "env": {"max_turns": 3},
        "rollout": {"max_turn_tokens": 12, "max_total_tokens": 1024},
        "pretrain": {
            "steps": 3,
            "batch_size": 2,
            "context": 256,
            "warmup_steps": 1,
            "world_families": 2,
            "docs_per_world": 20,
            "tokenizer_docs": 50,
            "log_every": 1,
            "num_threads": 1,
            "gate": {"per_split": 4, "every": 2},
        },
        "sft": {"train_examples": 8, "steps": 3, "batch_size": 4, "warmup_steps": 1, "log_every": 1, "num_threads": 1},
        "train": {
            "steps": 2,
            "batch_questions": 2,
            "group_size": 2,
            "micro_batch_size": 4,
            "mini_batches": 1,
            "dev": {"every": 2, "examples": 2},
            "checkpoint": {"every": 0},
            "num_threads": 1,
            "trace_every": 1,
        },
        "evaluate": {"max_examples": 4, "batch_size": 4, "bootstrap": {"samples": 100}, "num_threads": 1},
        "report": {"bootstrap": {"samples": 100}},
        "tracking": {"trace_sample": 2},
    },
)
PARAMS["runs"] = RUNS
PARAMS["seeds"] = [0]  # one replica per run (train@ppo-0, ...): the mechanics, not the statistics
REPRO_TIMEOUT_S = 2400  # 12 stage processes: ~4 min on 2 idle cores, far more when they are shared
# what a reconstructed run cannot have: wall times no output keeps, the trainer's live metrics beyond curve.csv
LIVE_ONLY = {"prepare": {"prepare/build_s", "prepare/total_s"}, "validate": {"validate/seconds"}}


def tiny_dvc_yaml() -> dict:
    """The repository's stages without their ``src/`` dependencies (the tiny project runs the
    installed agentr1)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for stage in stages.values():
        body = stage.get("do", stage)
        body["deps"] = [d for d in body.get("deps", []) if not str(d).startswith("src/")]
    return stages


def lock_keys(stages: dict) -> list[str]:
    """The ``dvc.lock`` keys ``dvc repro`` of ``stages`` writes (a foreach stage: one per key; the
    runs x seeds matrix: one per replica ``<run>-<seed>``)."""
    keys = []
    for name, stage in stages.items():
        if "matrix" in stage:
            keys += [f"{name}@{r}-{s}" for r in RUNS for s in PARAMS["seeds"]]
            continue
        items = stage.get("foreach")
        keys += [f"{name}@{k}" for k in items] if items else [name]
    return keys


def store(root: Path, name: str) -> dict[str, str]:
    return {
        "MLFLOW_TRACKING_URI": f"sqlite:///{root / name / 'mlflow.db'}",
        "AGENTR1_ARTIFACT_ROOT": str(root / name / "art"),
    }


def client_of(env: dict[str, str]):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    return client, client.get_experiment_by_name("agentr1-nano").experiment_id


def runs_of(env: dict[str, str]) -> list:
    client, exp = client_of(env)
    return client.search_runs([exp], max_results=1000)


def stage_runs(env: dict[str, str]) -> dict:
    """run name -> the FINISHED stage runs of that name."""
    out: dict[str, list] = {}
    for r in runs_of(env):
        if r.data.tags.get("agentr1.role") == "stage" and r.info.status == "FINISHED":
            out.setdefault(r.info.run_name, []).append(r)
    return out


def registry(env: dict[str, str]) -> tuple[list, dict[str, str]]:
    client, _ = client_of(env)
    versions = client.search_model_versions("name = 'agentr1-policy'")
    aliases = dict(client.get_registered_model("agentr1-policy").aliases) if versions else {}
    return sorted(versions, key=lambda v: int(v.version)), {a: str(v) for a, v in aliases.items()}


def traces_of(env: dict[str, str], run_id: str) -> list[tuple[str, str]]:
    import mlflow

    _, exp = client_of(env)
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    found = mlflow.search_traces(locations=[exp], run_id=run_id, return_type="list")
    return sorted((t.info.tags.get("agentr1.split"), t.info.tags["agentr1.qid"]) for t in found)


def agentr1(project: Path, env: dict[str, str], *args: str, check: bool = True):
    return sh(["agentr1", *args], project, extra_env=env, check=check, timeout=REPRO_TIMEOUT_S)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    """The tiny pipeline reproduced by ``dvc repro`` in a git + DVC project, its stages logging
    live to store ``live``; returns ``(root, live store env, dvc.lock keys)``."""
    base = tmp_path_factory.mktemp("track")
    stages = tiny_dvc_yaml()
    root = make_project(
        base / "proj",
        params=PARAMS,
        extra_stages=stages,
        files={"data/raw/README.md": (REPO / "data/raw/README.md").read_text()},
    )  # prepare's dep
    (root / ".gitignore").write_text("timing.json\n")  # wall times, as in the repository
    sh(["git", "add", ".gitignore"], root)
    sh(["git", "commit", "-q", "-m", "ignore timings"], root)
    live = store(base, "live")
    env = {**live, "AGENTR1_PIPELINE_ID": ""}
    sh(["dvc", "repro"], root, extra_env=env, timeout=REPRO_TIMEOUT_S)
    keys = list(yaml.safe_load((root / "dvc.lock").read_text())["stages"])
    assert sorted(keys) == sorted(lock_keys(stages)) and len(keys) >= 12  # every stage ran
    assert {"train@ppo-0", "evaluate@grpo-0", "evaluate_baseline@naive_rag", "report"} <= set(keys)
    return root, env, keys


@pytest.fixture(scope="module")
def fresh(project, tmp_path_factory: pytest.TempPathFactory):
    """The fresh-clone situation: ``agentr1 track`` of the reproduced checkout into an empty store."""
    root, live, _ = project
    env = {**store(tmp_path_factory.mktemp("fresh"), "store"), "AGENTR1_PIPELINE_ID": ""}
    out = agentr1(root, env, "track").stdout
    return env, out


def test_fresh_clone_gets_one_run_per_stage_with_the_live_runs_contents(project, fresh) -> None:
    root, live, keys = project
    env, out = fresh
    assert f"agentr1 track: {len(keys)} stages in dvc.lock: {len(keys)} logged" in out
    got = stage_runs(env)
    assert sorted(got) == sorted(keys) and all(len(v) == 1 for v in got.values())  # one run per stage
    runs = {k: v[0] for k, v in got.items()}
    parents = {r.data.tags["mlflow.parentRunId"] for r in runs.values()}
    assert len(parents) == 1
    client, _ = client_of(env)
    parent = client.get_run(parents.pop())
    assert parent.data.tags["agentr1.role"] == "pipeline" and parent.info.status == "FINISHED"
    assert all(r.data.tags["agentr1.logged_from"] == "dvc.lock" for r in runs.values())
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    for key, run in runs.items():  # keyed by the lock's output hashes
        assert {o["path"]: o["md5"] for o in lock[key]["outs"]} == {
            k[len("dvc.out.") :]: v for k, v in run.data.tags.items() if k.startswith("dvc.out.")
        }, key

    lives = {k: v[0] for k, v in stage_runs(live).items()}
    assert sorted(lives) == sorted(keys)
    same_tags = (
        "agentr1.stage",
        "agentr1.role",
        "agentr1.run_name",
        "agentr1.pipeline_id",
        "agentr1.git_sha",
        "agentr1.params_hash",
        "agentr1.profile",
        "agentr1.seed",
        "agentr1.variant",
        "agentr1.run",
        "agentr1.estimator",
        "agentr1.masks",
        "agentr1.policy",
        "agentr1.policy_kind",
        "agentr1.eval_data",
        "agentr1.checkpoint_sha256",
    )
    for key in keys:
        a, b = lives[key], runs[key]
        assert a.data.params == b.data.params, key  # the effective config
        assert {t: a.data.tags.get(t) for t in same_tags} == {t: b.data.tags.get(t) for t in same_tags}, key
        if key.startswith("train@"):  # the trainer logs more live than curve.csv keeps
            kept = set(CURVE.values())
            live_only = {m for m in a.data.metrics if m not in kept and not m.startswith("summary/")}
        else:
            live_only = LIVE_ONLY.get(key, set())
        assert set(a.data.metrics) - live_only == set(b.data.metrics), key
        for m, v in b.data.metrics.items():
            assert math.isclose(v, a.data.metrics[m], rel_tol=1e-5, abs_tol=1e-6), (key, m)
    for key, metric in (
        ("sft", "sft/loss"),
        ("pretrain", "pretrain/loss"),
        ("pretrain", "gate/dev.one_hop"),
        ("train@grpo-0", "rollout/reward"),
        ("train@grpo-0", "dev/em"),
    ):  # the curves, step by step
        hist = [
            [(m.step, round(m.value, 6)) for m in client_of(e)[0].get_metric_history(r[key].info.run_id, metric)]
            for e, r in ((live, lives), (env, runs))
        ]
        assert hist[0] == hist[1] and len(hist[0]) >= 2, (key, metric)

    # Table 3 on the parent, the evaluated episodes as traces (the live run's sample)
    table3 = {k: v for k, v in runs["report"].data.metrics.items() if k.startswith("table3/")}
    assert table3 and {k: v for k, v in parent.data.metrics.items() if k.startswith("table3/")} == table3
    assert "report/table3.md" in {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    for key in ("evaluate@ppo-0", "evaluate_baseline@naive_rag"):
        rebuilt = traces_of(env, runs[key].info.run_id)
        assert len(rebuilt) == 4 and {s for s, _ in rebuilt} == {"test", "ood"}  # trace_sample 2 per split
        assert rebuilt == traces_of(live, lives[key].info.run_id), key
    table = json.loads(
        Path(
            client.download_artifacts(runs["evaluate@grpo-0"].info.run_id, "eval/test_episodes.json", str(root.parent))
        ).read_text()
    )
    ids = [row[table["columns"].index("id")] for row in table["data"]]
    episodes = [json.loads(x) for x in (root / "data/eval/grpo-0/episodes.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(e["id"] for e in episodes if e["split"] == "test")


def test_fresh_clone_registry_has_the_versions_and_aliases_the_gate_sets(project, fresh) -> None:
    root, _, keys = project
    env, out = fresh
    versions, aliases = registry(env)
    by_variant = {v.tags["agentr1.variant"]: v for v in versions}
    assert (
        sorted(by_variant) == ["cold_start", "grpo-0", "ppo-0"] and len(versions) == 3
    )  # the RL replicas + the cold start
    runs = {k: v[0] for k, v in stage_runs(env).items()}
    for name in (f"{r}-0" for r in RUNS):  # provenance: the train@ run of the same store, the checkpoint digest
        v = by_variant[name]
        assert v.tags["agentr1.train_run_id"] == runs[f"train@{name}"].info.run_id
        assert v.tags["agentr1.checkpoint_sha256"] == runs[f"train@{name}"].data.tags["agentr1.checkpoint_sha256"]
        assert v.run_id == runs[f"evaluate@{name}"].info.run_id and f"[train@{name}](" in v.description
        assert (
            v.tags["agentr1.eval_data"]
            == json.loads((root / f"data/eval/{name}/metrics.json").read_text())["eval_data"]
        )
    # the aliases: the gate replayed over the RL evaluations in dvc.lock's order
    champion = None
    for name in [k.split("@")[1] for k in keys if k.startswith("evaluate@")]:
        m = json.loads((root / f"data/eval/{name}/metrics.json").read_text())
        stats = GateStats("test/em", m["test/em"], m["test/em_ci_lower"], m["test/em_ci_upper"], m["eval_data"], name)
        if gate(stats, champion)[0] == "promote":
            champion = stats
        last = name
    assert aliases == {
        "challenger": str(by_variant[last].version),
        "champion": str(by_variant[champion.version].version),
        "cold_start": str(by_variant["cold_start"].version),
    }
    assert "registry agentr1-policy: 3 versions, aliases " in out
    assert "the RL runs side by side: http://127.0.0.1:5000/#/experiments/" in out  # the shared view's link
    champion = by_variant[champion.version]
    tag = client_of(env)[0].get_registered_model("agentr1-policy").tags["champion"]  # the Models page shows it
    assert tag.startswith(f"v{champion.version} {champion.tags['agentr1.variant']}, test/em 0.")
    assert f"champion (tag `champion` on the Models page): {tag}" in out
    # one step to an RL policy's episode: the champion's trace, opened by its link
    link = next(line for line in out.splitlines() if line.startswith("an episode of the champion ("))
    trace_id = link.rsplit("traceId=", 1)[1]
    assert f"({champion.tags['agentr1.variant']}): http://127.0.0.1:5000/#/experiments/" in link
    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    assert mlflow.get_trace(trace_id).info.tags["agentr1.policy"] == champion.tags["agentr1.variant"]
    assert "?viewStateShareKey=rl&compareRunsMode=CHART" in out

    res = agentr1(root, env, "compare", "--out", str(root / "compare.png"))
    assert "champion (v" in res.stdout and "challenger (v" in res.stdout and (root / "compare.png").is_file()


def test_track_twice_adds_nothing_and_leaves_dvc_clean(project, fresh) -> None:
    root, _, keys = project
    env, _ = fresh
    before = (sorted(r.info.run_id for r in runs_of(env)), registry(env))
    out = agentr1(root, env, "track").stdout
    assert f"agentr1 track: {len(keys)} stages in dvc.lock: {len(keys)} in MLflow" in out
    assert (sorted(r.info.run_id for r in runs_of(env)), registry(env)) == before
    # with nothing to log, the champion's episode is still found in the store, and no other store
    # (MLflow's default ./mlflow.db) appears in the working directory
    assert "an episode of the champion (" in out and not (root / "mlflow.db").exists()
    assert "up to date" in sh(["dvc", "status"], root).stdout


def test_track_after_the_live_repro_adds_nothing(project) -> None:
    """The live runs of a first `dvc repro` had no dvc.lock entry to tag their outputs with:
    track adopts them (adds the tags) instead of logging a second run, then finds them."""
    root, live, keys = project
    before = sorted(r.info.run_id for r in runs_of(live)), registry(live)
    out = agentr1(root, live, "track").stdout
    assert f"agentr1 track: {len(keys)} stages in dvc.lock: {len(keys)} adopted" in out
    out = agentr1(root, live, "track").stdout
    assert f"{len(keys)} in MLflow" in out
    assert (sorted(r.info.run_id for r in runs_of(live)), registry(live)) == before
