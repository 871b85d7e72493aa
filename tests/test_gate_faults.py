"""The promotion gate under faults, races and tampered inputs (issue 31, items 1-3).

1. Only MLflow's "alias not set" / "registered model does not exist" mean "no champion"; a store
   error on the champion lookup (``database is locked``, an ``OperationalError``) aborts
   ``promote`` - no alias moved, no tag written, ``agentr1 promote`` exits 1 with one line.
2. An evaluation gates the version it registered, by its number, even while another writer
   moves ``challenger``.
3. ``agentr1 track`` checks every file it would replay before anything is written (NaN, Infinity,
   1e400, -0.5, ``true``, a swapped CI, broken JSON: one line naming the file, nothing in the
   store); the gate refuses out-of-range values and a baseline aliased as challenger.

Versions are registered the fast way (a run with metrics, ``create_model_version``), not by
logging a model; the SQLite store is shared by the module, each test has its own model name.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentr1.errors import StageError

GOOD = {"test/em": 0.5, "test/em_ci_lower": 0.4, "test/em_ci_upper": 0.6}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    """``(uri, client, experiment id)`` of a SQLite store for the module."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("gate-store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("gate", artifact_location=(root / "art").as_uri())
    return uri, client, exp_id


@pytest.fixture
def use_store(store, monkeypatch: pytest.MonkeyPatch):
    """``store``, also as the default tracking URI of ``MlflowClient()`` for this test."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store[0])
    monkeypatch.setattr("mlflow.tracking._tracking_service.utils._tracking_uri", None)
    return store


def register(store, name: str, metrics: dict, *, kind: str | None = "rl", alias: str | None = None) -> str:
    """A version of ``name`` whose run holds ``metrics`` (tagged ``agentr1.policy_kind`` = ``kind``)."""
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    _, client, exp_id = store
    run = client.create_run(exp_id)
    client.log_batch(run.info.run_id, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()])
    client.set_terminated(run.info.run_id)
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        assert exc.error_code == "RESOURCE_ALREADY_EXISTS"
    tags = {"agentr1.eval_data": "test:abc", **({"agentr1.policy_kind": kind} if kind else {})}
    mv = client.create_model_version(name, f"runs:/{run.info.run_id}/policy", run_id=run.info.run_id, tags=tags)
    if alias:
        client.set_registered_model_alias(name, alias, mv.version)
    return str(mv.version)


def _ours(err: str) -> str:
    """stderr without MLflow's own log lines (``2026/01/01 12:00:00 INFO mlflow...``)."""
    assert "Traceback" not in err, err
    return "\n".join(line for line in err.strip().splitlines() if not line[:4].isdigit())


def aliases(client, name: str) -> dict[str, str]:
    return {a: str(v) for a, v in client.get_registered_model(name).aliases.items()}


def gate_tags(client, name: str, version: str) -> dict[str, str]:
    return {k: v for k, v in client.get_model_version(name, version).tags.items() if k.startswith("agentr1.gate.")}


# ------------------------------------------------------------------ 1. the champion lookup
def test_no_alias_is_mlflows_own_answer_on_a_sqlite_store(store) -> None:
    """The codes MLflow 3 raises on a SQLite store for a model that does not exist
    (RESOURCE_DOES_NOT_EXIST) and an alias that is not set (INVALID_PARAMETER_VALUE): "none"."""
    from mlflow.exceptions import MlflowException

    from agentr1.tracking.registry import alias_unset, version_by_alias

    _, client, _ = store
    codes = []
    for step in ("no model", "no alias"):
        with pytest.raises(MlflowException) as err:
            client.get_model_version_by_alias("lookup-policy", "champion")
        codes.append(err.value.error_code)
        assert alias_unset(err.value)
        assert version_by_alias(client, "lookup-policy", "champion") is None
        if step == "no model":
            register(store, "lookup-policy", GOOD, alias="challenger")
    assert codes == ["RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"]
    assert str(version_by_alias(client, "lookup-policy", "challenger").version) == "1"
    assert not alias_unset(MlflowException("database is locked"))
    assert not alias_unset(MlflowException("Parameter 'alias' is invalid", error_code="INVALID_PARAMETER_VALUE"))


def _locked(kind: str) -> Exception:
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import OperationalError

    return {
        "mlflow": MlflowException("database is locked"),
        "unavailable": MlflowException(
            "(sqlite3.OperationalError) database is locked", error_code="TEMPORARILY_UNAVAILABLE"
        ),
        "sqlalchemy": OperationalError("SELECT ...", {}, sqlite3.OperationalError("database is locked")),
        "sqlite3": sqlite3.OperationalError("disk I/O error"),
    }[kind]


def _fail_lookup(monkeypatch: pytest.MonkeyPatch, alias: str, exc: Exception) -> None:
    from mlflow import MlflowClient

    real = MlflowClient.get_model_version_by_alias

    def lookup(self, name, which):
        if which == alias:
            raise exc
        return real(self, name, which)

    monkeypatch.setattr(MlflowClient, "get_model_version_by_alias", lookup)


@pytest.mark.parametrize("kind", ["mlflow", "unavailable", "sqlalchemy", "sqlite3"])
def test_a_store_error_on_the_champion_lookup_aborts_promote(store, monkeypatch, kind: str) -> None:
    """A champion that cannot be read is not "no champion": StageError naming the model and the
    alias, the challenger not crowned, no tag written."""
    from agentr1.tracking.registry import promote

    _, client, _ = store
    name = f"locked-{kind}"
    v = register(store, name, GOOD, alias="challenger")
    _fail_lookup(monkeypatch, "champion", _locked(kind))
    with pytest.raises(
        StageError, match=rf"registered model '{name}': reading alias 'champion' failed .*no alias moved"
    ):
        promote(name, "test/em", client=client)
    monkeypatch.undo()
    assert aliases(client, name) == {"challenger": v} and gate_tags(client, name, v) == {}


def test_agentr1_promote_exits_1_with_one_line_when_the_store_is_locked(store, monkeypatch, repo_root, capsys) -> None:
    from agentr1.cli import main

    uri, client, _ = store
    name = "cli-locked"
    v = register(store, name, GOOD, alias="challenger")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # the environment wins over tracking.uri
    _fail_lookup(monkeypatch, "champion", _locked("mlflow"))
    code = main(["--params", str(repo_root / "params.yaml"), "promote", "--model", name])
    err = _ours(capsys.readouterr().err)
    monkeypatch.undo()
    assert code == 1
    assert err.startswith("agentr1 promote: registered model 'cli-locked': reading alias 'champion' failed"), err
    assert "\n" not in err and "database is locked" in err
    assert aliases(client, name) == {"challenger": v}


# ------------------------------------------------------------------ 2. gate this run's version
class _Evaluation:
    """What :func:`register_evaluation` needs of a stage run, registering the fast way; right
    after the registration another writer registers its own version and moves ``challenger``."""

    def __init__(self, store, other_metrics: dict) -> None:
        self.store, self.other_metrics, self.other = store, other_metrics, None
        self.experiment_id = store[2]

    def client(self):
        return self.store[1]

    def log_model(self, checkpoint, metrics, *, registered_name, alias=None, tags=None, **_):
        client = self.store[1]
        version = register(
            self.store, registered_name, dict(metrics), kind=(tags or {}).get("agentr1.policy_kind"), alias=alias
        )
        for key, value in (tags or {}).items():
            client.set_model_version_tag(registered_name, version, key, value)
        self.other = register(self.store, registered_name, self.other_metrics, alias="challenger")  # the race
        return client.get_model_version(registered_name, version)


def test_an_evaluation_gates_the_version_it_registered_while_challenger_moves(use_store, tmp_path: Path) -> None:
    from agentr1.tracking.registry import register_evaluation

    _, client, _ = use_store
    name = "race-policy"
    champion = register(
        use_store, name, {"test/em": 0.2, "test/em_ci_lower": 0.1, "test/em_ci_upper": 0.3}, alias="champion"
    )
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}\n")
    run = _Evaluation(use_store, {"test/em": 0.25, "test/em_ci_lower": 0.15, "test/em_ci_upper": 0.35})
    ours = {"test/em": 0.8, "test/em_ci_lower": 0.7, "test/em_ci_upper": 0.9}
    info = register_evaluation(run, ckpt, "ppo", "rl", ours, "test:abc", name, "test/em")
    mine = info["version"]
    assert mine not in (champion, run.other)
    # the Promotion (what evaluate writes to timing.json) names this run's version, which beat the champion
    assert info["promotion"]["challenger"] == mine and info["promotion"]["decision"] == "promote"
    assert info["promotion"]["previous_champion"] == champion and info["promotion"]["champion"] == mine
    assert aliases(client, name) == {"champion": mine, "challenger": run.other}
    assert gate_tags(client, name, mine)["agentr1.gate.decision"] == "promote"
    assert gate_tags(client, name, run.other) == {}  # the other writer's version is its own run's to gate


def test_promote_by_number_gates_that_version_and_names_it(use_store) -> None:
    from agentr1.tracking.registry import promote

    _, client, _ = use_store
    name = "number-policy"
    first = register(use_store, name, GOOD, alias="champion")
    target = register(use_store, name, {"test/em": 0.9, "test/em_ci_lower": 0.8, "test/em_ci_upper": 0.95})
    moved = register(use_store, name, GOOD, alias="challenger")
    result = promote(name, "test/em", version=target, client=client, dry_run=True)
    assert (result.challenger, result.decision, result.champion) == (target, "promote", first)  # dry run
    result = promote(name, "test/em", version=int(target), client=client)
    assert (result.challenger, result.previous_champion, result.champion) == (target, first, target)
    assert aliases(client, name) == {"champion": target, "challenger": moved}
    with pytest.raises(StageError, match=rf"'{name}' has no version '99'.*gate the 'challenger' alias"):
        promote(name, "test/em", version="99", client=client)


# ------------------------------------------------------------------ 3. out-of-range gate inputs
@pytest.mark.parametrize(
    ("case", "metrics", "words"),
    [
        (
            "huge",
            {"test/em": 1e308, "test/em_ci_lower": 0.0, "test/em_ci_upper": 1e308},
            r"test/em: value 1e\+308 is outside \[0, 1\]",
        ),
        (
            "negative",
            {"test/em": -0.5, "test/em_ci_lower": -0.6, "test/em_ci_upper": -0.4},
            r"test/em: value -0.5 is outside \[0, 1\]",
        ),
        (
            "swapped",
            {"test/em": 0.5, "test/em_ci_lower": 0.6, "test/em_ci_upper": 0.4},
            r"test/em: CI \[0.6, 0.4\] does not contain the value 0.5",
        ),
    ],
)
def test_promote_refuses_gate_values_out_of_range(store, case: str, metrics: dict, words: str) -> None:
    from agentr1.tracking.registry import promote

    _, client, _ = store
    name = f"range-{case}"
    v = register(store, name, metrics, alias="challenger")
    with pytest.raises(StageError, match=rf"{name} version {v}: {words}.*no alias moved: evaluate it again"):
        promote(name, "test/em", client=client)
    assert aliases(client, name) == {"challenger": v} and gate_tags(client, name, v) == {}
    # the same values on the champion's side: refused too, the challenger not crowned over it
    name2 = name + "-champion"
    register(store, name2, metrics, alias="champion")
    good = register(store, name2, GOOD, alias="challenger")
    with pytest.raises(StageError, match="outside|does not contain"):
        promote(name2, "test/em", client=client)
    assert gate_tags(client, name2, good) == {}


def test_promote_refuses_a_baseline_aliased_as_challenger(store) -> None:
    from agentr1.tracking.registry import promote

    _, client, _ = store
    name = "baseline-policy"
    v = register(store, name, GOOD, kind="cold_start", alias="challenger")
    with pytest.raises(
        StageError,
        match=rf"{name} version {v} is a 'cold_start' policy \(agentr1.policy_kind\), not a "
        r"trained one \('rl'\).*no alias moved",
    ):
        promote(name, "test/em", client=client)
    assert aliases(client, name) == {"challenger": v} and gate_tags(client, name, v) == {}
    with pytest.raises(StageError, match="'cold_start' policy"):
        promote(name, "test/em", version=v, client=client)


def test_gate_stats_check_range_and_the_share_list_matches_the_evaluation() -> None:
    from agentr1.eval.metrics import MEANS, SCORES
    from agentr1.tracking.gate import PROPORTIONS, GateStats, is_proportion

    with pytest.raises(ValueError, match="outside"):
        GateStats("test/em", 1e308, 0.0, 1e308)
    with pytest.raises(ValueError, match="must be a number"):
        GateStats("test/em", True, 0.0, 1.0)  # type: ignore[arg-type]
    assert GateStats("test/reward", 3.0, 2.0, 4.0).value == 3.0  # not a share: any finite value
    assert set(SCORES) <= set(PROPORTIONS) and set(MEANS) - {"tool_calls", "turns", "reward"} <= set(PROPORTIONS)
    assert is_proportion("test/pass_at_8_ci_lower") and is_proportion("ood/sampled_em") and is_proportion("em")
    assert not is_proportion("test/n") and not is_proportion("test/tool_calls") and not is_proportion("test/reward")


# ------------------------------------------------------------------ 3. the files track replays
def _eval_metrics() -> dict:
    """An evaluation's metrics.json as the evaluate stage writes it (the keys that matter here)."""
    flat = {}
    for split in ("test", "ood"):
        flat.update(
            {
                f"{split}/n": 4,
                f"{split}/em": 0.5,
                f"{split}/em_ci_lower": 0.25,
                f"{split}/em_ci_upper": 0.75,
                f"{split}/f1": 0.5,
                f"{split}/f1_ci_lower": 0.25,
                f"{split}/f1_ci_upper": 0.75,
                f"{split}/format_ok": 1.0,
                f"{split}/reward": -0.25,
                f"{split}/tool_calls": 2.0,
            }
        )
    return {
        "policy": "ppo",
        "kind": "rl",
        "eval_data": "test+ood:abc",
        "overrides": None,
        "seed": 0,
        "splits": {"test": {"em": 0.5, "reasons": {"answer": 4}}},
        "test/sampled_em": 0.5,
        "test/pass_at_4": 0.75,
        **flat,
    }


def _text(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


TAMPERED = {  # name -> (edit of the metrics.json text, what the error says)
    "nan": (lambda t: t.replace('"test/em": 0.5', '"test/em": NaN'), "test/em is NaN, not a finite number"),
    "infinity": (lambda t: t.replace('"ood/f1": 0.5', '"ood/f1": Infinity'), "ood/f1 is Infinity, not a finite number"),
    "-infinity": (lambda t: t.replace('"seed": 0', '"seed": -Infinity'), "seed is -Infinity, not a finite number"),
    "1e400": (lambda t: t.replace('"test/em": 0.5', '"test/em": 1e400'), "test/em is 1e400, not a finite number"),
    "negative": (lambda t: t.replace('"test/em": 0.5', '"test/em": -0.5'), r"test/em is -0.5, outside [0, 1]"),
    "pass@k": (
        lambda t: t.replace('"test/pass_at_4": 0.75', '"test/pass_at_4": 1.5'),
        "test/pass_at_4 is 1.5, outside",
    ),
    "true": (lambda t: t.replace('"test/em": 0.5', '"test/em": true'), "test/em is true (a boolean), not a number"),
    "string": (lambda t: t.replace('"test/em": 0.5', '"test/em": "0.5"'), 'test/em is "0.5" (str), not a number'),
    "swapped CI": (
        lambda t: t.replace('"test/em_ci_lower": 0.25', '"test/em_ci_lower": 0.75').replace(
            '"test/em_ci_upper": 0.75', '"test/em_ci_upper": 0.25'
        ),
        "test/em 0.5 is not inside its CI",
    ),
    "broken": (lambda t: t[: len(t) // 2], "broken JSON"),
    "duplicate": (lambda t: t.replace('"seed": 0', '"seed": 0, "test/em": 0.9'), "key 'test/em' appears twice"),
    "list": (lambda t: "[" + t + "]", "the document is a JSON list, not an object"),
}


def test_a_sound_evaluation_passes_and_every_tampering_is_named() -> None:
    from agentr1.tracking.replaycheck import Bad, check_flat_metrics, parse_json

    good = _text(_eval_metrics())
    check_flat_metrics(parse_json(good))
    for name, (edit, words) in TAMPERED.items():
        bad = edit(good)
        assert bad != good, name
        with pytest.raises(Bad) as err:
            doc = parse_json(bad)
            if not isinstance(doc, dict):
                raise Bad(f"the document is a JSON {type(doc).__name__}, not an object")
            check_flat_metrics(doc)
        assert words in str(err.value), (name, str(err.value))
    with pytest.raises(Bad, match=r"line 3 column \d+: broken JSON"):
        parse_json('{\n "a": 1,\n "b": }\n')
    with pytest.raises(Bad, match="nested too deep"):
        parse_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(Bad, match=r"splits.test.em is NaN"):
        parse_json('{"splits": {"test": {"n": 3, "em": NaN}}}')


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("curve.csv", "step,reward,dev_em\n0,,0.5\n1,0.25,\n", None),
        ("curve.csv", "step,reward,dev_em\n0,,0.5\n1,nan,\n", "curve.csv: line 3: reward is nan, not a finite number"),
        ("loss.csv", "step,loss\n1,inf\n", "line 2: loss is inf, not a finite number"),
        ("loss.csv", "step,loss\n1,1e400\n", "loss is 1e400, not a finite number"),
        ("loss.csv", "step,loss\n1,high\n", "line 2: loss is 'high', not a number"),
        ("loss.csv", "step,loss\n1.5,0.3\n", "step is '1.5', not a whole number"),
        ("loss.csv", "step,loss\n1,0.3,9\n", "line 2 has 3 cells, the header 2"),
        ("table3.csv", "method,test_mean\nppo,0.5\nNo Loss Mask,\n", None),  # not a curve: text is fine
        ("table3.csv", "method,test_mean\nppo,-Infinity\n", "test_mean is -Infinity, not a finite number"),
        ("episodes.jsonl", '{"id": "q1", "em": 1.0}\n\n{"id": "q2", "em": 0.0}\n', None),
        ("episodes.jsonl", '{"id": "q1", "em": 1.0}\n{"id": "q2", "em": NaN}\n', "episodes.jsonl: line 2: em is NaN"),
        ("episodes.jsonl", '{"id": "q1"}\n{"id": \n', "line 2 column 8: broken JSON"),
        ("episodes.jsonl", '{"id": "q1"}\n[1]\n', "line 2 is a JSON list, not an object"),
        ("metrics.json", b'{"a": "\xff"}', "byte 7 is not UTF-8"),
    ],
)
def test_replayed_files_by_type(tmp_path: Path, name: str, text, words: str | None) -> None:
    from agentr1.tracking.replaycheck import entry_problem

    out = tmp_path / "data" / "out" / name
    out.parent.mkdir(parents=True)
    out.write_bytes(text if isinstance(text, bytes) else text.encode())
    problem = entry_problem("train@ppo", [f"data/out/{name}"], tmp_path)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem and problem.startswith(f"data/out/{name}: ")
        assert problem.endswith("`dvc repro -f train@ppo` writes its outputs again") and "\n" not in problem


def test_folder_outputs_and_timing_beside_an_output_are_checked(tmp_path: Path) -> None:
    from agentr1.tracking.replaycheck import entry_problem, replayed_files

    (tmp_path / "data" / "processed").mkdir(parents=True)
    (tmp_path / "data" / "processed" / "manifest.json").write_text('{"questions": 3}\n')
    (tmp_path / "data" / "processed" / "train.parquet").write_bytes(b"PAR1")
    (tmp_path / "data" / "runs" / "ppo").mkdir(parents=True)
    (tmp_path / "data" / "runs" / "ppo" / "metrics.json").write_text('{"steps": 2, "loss_mask": true}\n')
    (tmp_path / "data" / "runs" / "ppo" / "timing.json").write_text('{"total": 1.5}\n')
    outs = ["data/processed", "data/runs/ppo/metrics.json"]
    assert [p.relative_to(tmp_path).as_posix() for p in replayed_files(outs, tmp_path)] == [
        "data/processed/manifest.json",
        "data/runs/ppo/metrics.json",
        "data/runs/ppo/timing.json",
    ]
    assert entry_problem("x", outs, tmp_path) is None  # a boolean outside the flat metrics is fine
    (tmp_path / "data" / "runs" / "ppo" / "timing.json").write_text('{"total": Infinity}\n')
    (tmp_path / "data" / "processed" / "manifest.json").write_text('{"questions": NaN}\n')
    problem = entry_problem("x", outs, tmp_path)
    assert "data/processed/manifest.json: questions is NaN" in problem
    assert "data/runs/ppo/timing.json: total is Infinity" in problem


# ------------------------------------------------------------------ 3. end to end: agentr1 track
def _project(root: Path, metrics_text: str) -> Path:
    """A project whose dvc.lock has one entry, evaluate@ppo, recording its outputs as they are (a
    hand edit followed by `dvc commit`), and the checkpoint the stage would register."""
    from agentr1.tracking.provenance import dvc_hash

    out = root / "data" / "eval" / "ppo"
    out.mkdir(parents=True)
    (out / "metrics.json").write_text(metrics_text)
    (out / "episodes.jsonl").write_text('{"split": "test", "id": "q1", "em": 1.0}\n')
    ckpt = root / "data" / "runs" / "ppo" / "checkpoint"
    ckpt.mkdir(parents=True)
    for f in ("config.json", "tokenizer_config.json"):
        (ckpt / f).write_text("{}\n")
    (ckpt / "model.safetensors").write_bytes(b"")
    (root / "params.yaml").write_text("seed: 0\nruns:\n  ppo: {estimator: gae}\n")
    outs = [
        {"path": f"data/eval/ppo/{f}", "hash": "md5", "md5": dvc_hash(out / f)}
        for f in ("episodes.jsonl", "metrics.json")
    ]
    lock = {"schema": "2.0", "stages": {"evaluate@ppo": {"cmd": "agentr1 evaluate --policy ppo", "outs": outs}}}
    (root / "dvc.lock").write_text(json.dumps(lock))  # JSON is YAML
    return root


def _store_is_empty(db: Path) -> bool:
    """No run, no registered model, no alias in the SQLite store ``db`` (or no store at all)."""
    if not db.exists():
        return True
    con = sqlite3.connect(db)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        return all(
            con.execute(f"select count(*) from {t}").fetchone()[0] == 0
            for t in ("runs", "registered_models", "model_versions", "registered_model_aliases")
            if t in tables
        )
    finally:
        con.close()


@pytest.mark.parametrize("tamper", ["nan", "infinity", "1e400", "negative", "true", "swapped CI", "broken"])
def test_track_refuses_a_tampered_evaluation_before_writing_anything(
    tmp_path: Path, monkeypatch, capsys, tamper: str
) -> None:
    from agentr1.cli import main

    edit, words = TAMPERED[tamper]
    root = _project(tmp_path / "proj", edit(_text(_eval_metrics())))
    db = tmp_path / "store" / "mlflow.db"
    monkeypatch.chdir(root)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setenv("AGENTR1_ARTIFACT_ROOT", str(tmp_path / "store" / "art"))
    for args in (["track"], ["track", "--dry-run"]):  # the dry run predicts the failure
        assert main(args) == 1, args
        err = _ours(capsys.readouterr().err)
        assert "\n" not in err, err
        assert err.startswith("agentr1 track: nothing logged: evaluate@ppo: data/eval/ppo/metrics.json: "), err
        assert words in err and "`dvc repro -f evaluate@ppo`" in err, err
        assert _store_is_empty(db), args


def test_track_plans_a_sound_evaluation(tmp_path: Path, monkeypatch) -> None:
    """The same project with the metrics as written: planned for logging (no false alarm)."""
    from agentr1.config import Config
    from agentr1.stages import track

    root = _project(tmp_path / "proj", _text(_eval_metrics()))
    monkeypatch.chdir(root)
    cfg = Config()
    cfg.runs = {"ppo": {"estimator": "gae"}}
    cfg.tracking.uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    entries = track.track(cfg, "dvc.lock", dry_run=True)
    assert [(e.key, e.state) for e in entries] == [("evaluate@ppo", "log")]
