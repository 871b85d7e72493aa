"""A profile as a pipeline of its own (:mod:`agentr1.pipelines`, issue 49): the committed
``pipelines/<name>/`` files are what the generator writes from ``dvc.yaml``, ``params.yaml`` and the
profile; every output lands under ``data/<name>/`` or ``reports/<name>/`` (never over the default's);
a stage run from that params file finds that pipeline's lock; ``agentr1 track`` reads it with the
paths relative to the project root."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentr1.config import Config, load_config
from agentr1.pipelines import pipeline_dvc, pipeline_files, relocate, relocated_params
from agentr1.profiles import load_profile
from agentr1.tracking import provenance

COMMITTED = ["smol"]  # the profiles whose pipeline is committed beside the default's


@pytest.mark.parametrize("name", COMMITTED)
def test_the_committed_pipeline_is_what_the_generator_writes(repo_root: Path, monkeypatch, name: str) -> None:
    """Editing ``dvc.yaml``, ``params.yaml`` or the profile without `agentr1 pipeline NAME` fails here."""
    monkeypatch.chdir(repo_root)
    files = pipeline_files(load_profile(name))
    assert sorted(files) == [f"pipelines/{name}/dvc.yaml", f"pipelines/{name}/params.yaml"]
    for rel, text in files.items():
        assert (repo_root / rel).read_text(encoding="utf-8") == text, (
            f"{rel} is stale: run `agentr1 pipeline {name}` and commit it"
        )


def test_the_check_names_a_stale_file_and_the_command_rewrites_it(
    tmp_path: Path, repo_root: Path, monkeypatch, capsys
) -> None:
    from agentr1.cli import main

    for rel in ("params.yaml", "dvc.yaml", "profiles/smol.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((repo_root / rel).read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["pipeline", "smol", "--check"]) == 1
    assert (
        "pipelines/smol/params.yaml, pipelines/smol/dvc.yaml not what `agentr1 pipeline smol` writes"
        in capsys.readouterr().err
    )
    assert main(["pipeline", "smol"]) == 0
    assert main(["pipeline", "smol", "--check"]) == 0
    assert "pipelines/smol/ is up to date" in capsys.readouterr().out
    (tmp_path / "pipelines/smol/dvc.yaml").write_text("stages: {}\n")  # a hand edit
    assert main(["pipeline", "smol", "--check"]) == 1
    assert capsys.readouterr().err.count("pipelines/smol/dvc.yaml") == 1


def test_relocate_moves_outputs_and_keeps_sources_and_raw_data() -> None:
    assert relocate("data/processed", "smol") == "data/smol/processed"
    assert (
        relocate("data/runs/${item.run}-${item.seed}/curve.csv", "smol")
        == "data/smol/runs/${item.run}-${item.seed}/curve.csv"
    )
    assert relocate("reports", "smol") == "reports/smol"
    assert relocate("reports/plots/em_bars.png", "smol") == "reports/smol/plots/em_bars.png"
    assert relocate("data/raw", "smol") == "data/raw"
    assert relocate("data/raw/hotpot.json", "smol") == "data/raw/hotpot.json"
    assert relocate("src/agentr1/rl", "smol") == "src/agentr1/rl"
    assert relocate("database/x", "smol") == "database/x"  # a folder named like data is no output folder


def _paths(entries: list) -> list[str]:
    return [e if isinstance(e, str) else next(iter(e)) for e in entries or []]


def _bodies(dvc: dict) -> dict[str, dict]:
    return {k: s.get("do", s) for k, s in dvc["stages"].items()}


@pytest.mark.parametrize("name", COMMITTED)
def test_every_output_lies_beside_the_defaults_and_every_input_is_one_of_the_pipeline(
    repo_root: Path, name: str
) -> None:
    """No output of the profile's pipeline is (or lies inside, or holds) an output of the default's,
    so neither `dvc repro` can write over the other's results; a dep is a source, the shared raw
    data, or an output of the pipeline itself; every stage runs from the project root on the
    pipeline's params file."""
    root_dvc = yaml.safe_load((repo_root / "dvc.yaml").read_text())
    dvc = yaml.safe_load((repo_root / "pipelines" / name / "dvc.yaml").read_text())
    params_file = f"pipelines/{name}/params.yaml"
    default_outs = {
        p for b in _bodies(root_dvc).values() for f in ("outs", "metrics", "plots") for p in _paths(b.get(f))
    }
    outs = {p for b in _bodies(dvc).values() for f in ("outs", "metrics", "plots") for p in _paths(b.get(f))}
    assert outs and all(p.startswith((f"data/{name}/", f"reports/{name}/")) for p in outs)
    for p in outs:
        for q in default_outs:
            assert not (p == q or p.startswith(q + "/") or q.startswith(p + "/")), (p, q)
    foreach_items = {
        v for s in dvc["stages"].values() if isinstance(s.get("foreach"), dict) for v in s["foreach"].values()
    }
    for stage, body in _bodies(dvc).items():
        assert body["wdir"] == "../.."
        assert body["cmd"].startswith(f"agentr1 --params {params_file} ")
        assert [next(iter(p)) for p in body.get("params", [])] in ([], [params_file])
        for dep in _paths(body.get("deps")):
            ok = (
                dep.startswith("src/")
                or dep == "data/raw"
                or dep == "${item}"
                and all(v.startswith(f"data/{name}/") for v in foreach_items)
                or any(dep == o or o.startswith(dep + "/") or dep.startswith(o + "/") for o in outs)
            )
            assert ok, f"{stage}: dep {dep} is neither a source nor an output of the pipeline"
    for plot in dvc.get("plots", []):
        for spec in plot.values():
            assert all(p in outs for p in spec["y"])


def test_a_downloaded_models_reference_is_cached_and_a_trained_base_committed(repo_root: Path) -> None:
    """The smol base is a reference to a converted download git does not hold (cached: a fresh clone
    converts again); a scratch model's trained base stays committed (``cache: false``) as in ``dvc.yaml``."""
    root_dvc = yaml.safe_load((repo_root / "dvc.yaml").read_text())
    downloaded = pipeline_dvc(root_dvc, "x", downloaded=True)["stages"]["pretrain"]["outs"]
    trained = pipeline_dvc(root_dvc, "x", downloaded=False)["stages"]["pretrain"]["outs"]
    assert downloaded == ["data/x/models/init"]
    assert trained == [{"data/x/models/init": {"cache": False}}]


def test_every_folder_param_moves_and_nothing_else(repo_root: Path) -> None:
    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    moved = relocated_params(raw, "x")
    flat_before, flat_after = _flat(raw), _flat(moved)
    changed = {k for k in flat_before if flat_before[k] != flat_after[k]}
    assert changed and all(k.endswith("_dir") for k in changed)
    assert {"sft.out_dir", "report.out_dir", "model.cache_dir", "evaluate.out_dir"} <= changed
    assert flat_after["tracking.uri"] == flat_before["tracking.uri"]  # one MLflow store for every pipeline


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_a_config_knows_the_lock_beside_its_params_file(repo_root: Path, monkeypatch) -> None:
    monkeypatch.chdir(repo_root)
    cfg = load_config("pipelines/smol/params.yaml")
    assert cfg.lock_path == Path("pipelines/smol/dvc.lock")
    assert cfg.for_run("grpo-1").lock_path == Path("pipelines/smol/dvc.lock")  # a run's config keeps it
    assert load_config().lock_path == Path("dvc.lock")
    assert Config().lock_path == Path("dvc.lock")


def _project(tmp_path: Path) -> Path:
    (tmp_path / ".dvc").mkdir()
    pipe = tmp_path / "pipelines" / "x"
    pipe.mkdir(parents=True)
    out = tmp_path / "data" / "x" / "processed"
    out.mkdir(parents=True)
    (out / "manifest.json").write_text("{}\n")
    (pipe / "params.yaml").write_text("seed: 0\nprofile: smol\ndata: {processed_dir: data/x/processed}\n")
    lock = {
        "schema": "2.0",
        "stages": {
            "prepare": {
                "cmd": "agentr1 --params pipelines/x/params.yaml prepare",
                "params": {"pipelines/x/params.yaml": {"seed": 0}},
                "outs": [{"path": "data/x/processed", "hash": "md5", "md5": provenance.dvc_hash(out)}],
            }
        },
    }
    (pipe / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    return pipe / "dvc.lock"


def test_a_pipeline_locks_paths_are_relative_to_the_project_root(tmp_path: Path, monkeypatch) -> None:
    lock = _project(tmp_path)
    assert provenance.project_root(lock) == tmp_path.resolve()
    assert provenance.project_root(tmp_path / "dvc.lock") == tmp_path
    monkeypatch.chdir(tmp_path)
    assert provenance.pipeline_outputs("pipelines/x/dvc.lock") == ["pipelines/x/dvc.lock", "data/x/processed"]
    assert provenance.dvc_dep_hashes("prepare", "pipelines/x/dvc.lock") == {}


def test_track_reads_the_pipeline_of_its_params_file(tmp_path: Path, monkeypatch, capsys) -> None:
    """``agentr1 --params pipelines/x/params.yaml track --dry-run`` plans from ``pipelines/x/dvc.lock``,
    its outputs found from the project root (read from the lock's own folder they were missing)."""
    from agentr1.cli import main

    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    monkeypatch.setenv("AGENTR1_ARTIFACT_ROOT", str(tmp_path / "store" / "artifacts"))
    assert main(["--params", "pipelines/x/params.yaml", "track", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "prepare" in out and "would log" in out and "missing" not in out


def test_the_make_target_runs_the_pipeline_and_tracks_it(repo_root: Path) -> None:
    text = (repo_root / "Makefile").read_text()
    assert "dvc repro pipelines/$*/dvc.yaml" in text
    assert "agentr1 --params pipelines/$*/params.yaml track" in text
    assert COMMITTED == [p.name for p in sorted((repo_root / "pipelines").iterdir()) if p.is_dir()]
