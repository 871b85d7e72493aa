"""Shared fixtures and checks for the MLflow adapter tests (SQLite store and real server).

Each ``check_*`` function runs one scenario against whatever store ``cfg.tracking.uri`` names,
so ``test_tracking.py`` (SQLite) and ``test_tracking_server.py`` (``mlflow server``) assert the
same behaviour.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from agentr1.config import Config
from agentr1.env.base import CallOutcome
from agentr1.rollout.trajectory import Trajectory

PROMPT = "<|im_start|>user\nWhere was Ada Vell born?<|im_end|>\n<|im_start|>assistant\n"
TURN0 = "<search> Ada Vell</search>"
OBS0 = "\n<information>Doc 1 (Ada Vell): Ada Vell was born in Pellora.</information>\n"
TURN1 = "<answer> Pellora</answer>"
BAD_TURN0 = "<search Ada Vell"
BAD_OBS0 = "\n<information>error: malformed call</information>\n"


def good_trajectory(qid: str = "q1") -> Trajectory:
    """Two turns: a valid search (observation appended) then a correct answer."""
    t = Trajectory(
        qid=qid,
        question="Where was Ada Vell born?",
        golds=["Pellora"],
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11, 12, 20, 21, 13, 14],
        action_mask=[1, 1, 1, 0, 0, 1, 1],
        logprobs=[-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5],
        turn_spans=[(0, 3), (5, 7)],
        turn_texts=[TURN0, TURN1],
        turn_char_ends=[[8, 17, len(TURN0)], [8, len(TURN1)]],
        observations=[OBS0],
        outcomes=[[CallOutcome("search", valid=True, success=True, end=len(TURN0), found_support=True)], []],
        answer="Pellora",
        reason="answer",
        outcome_reward=1.0,
        prompt_text=PROMPT,
        response_text=TURN0 + OBS0 + TURN1,
    )
    t.check()
    return t


def bad_trajectory(qid: str = "q2") -> Trajectory:
    """One malformed call (a TOOL span, not a retriever) and no answer."""
    t = Trajectory(
        qid=qid,
        question="Who directed Glass Harbor?",
        golds=["Oren Tamsk"],
        prompt_ids=[1, 2],
        response_ids=[10, 11, 20],
        action_mask=[1, 1, 0],
        logprobs=[-1.0, -1.0, 0.0],
        turn_spans=[(0, 2)],
        turn_texts=[BAD_TURN0],
        turn_char_ends=[[7, len(BAD_TURN0)]],
        observations=[BAD_OBS0],
        outcomes=[[CallOutcome(None, valid=False, success=False, end=len(BAD_TURN0), error="malformed")]],
        answer=None,
        reason="max_turns",
        outcome_reward=-1.0,
        prompt_text=PROMPT,
        response_text=BAD_TURN0 + BAD_OBS0,
    )
    t.check()
    return t


def tracking_cfg(uri: str, artifact_root: Path, **tracking) -> Config:
    """Default config with the repository's named runs and seeds (params ``runs``: ppo, grpo, ...; ``seeds``),
    pointed at ``uri`` (artifacts of a SQLite store under ``artifact_root``)."""
    import yaml

    params = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
    cfg = Config()
    cfg.sft_reference = params["sft_reference"]  # before the runs: one of them starts from the reference
    cfg.runs = params["runs"]
    cfg.seeds = params["seeds"]
    cfg.tracking.uri = uri
    cfg.tracking.artifact_root = str(artifact_root)
    for key, value in tracking.items():
        setattr(cfg.tracking, key, value)
    return cfg


def make_checkpoint(path: Path) -> Path:
    """A scratch Llama (hidden 16, one layer) + its BPE tokenizer saved as safetensors."""
    from agentr1.config import ScratchModelConfig
    from agentr1.models import save_checkpoint
    from agentr1.models.scratch import build_scratch_model, train_tokenizer

    texts = [PROMPT, TURN0, OBS0, TURN1] * 20
    tok = train_tokenizer(texts, vocab_size=600)
    scfg = ScratchModelConfig(
        hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32, max_position=128
    )
    return save_checkpoint(build_scratch_model(scfg, tok, seed=0), tok, path)


def head_sha() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


# ------------------------------------------------------------------------------------ checks
def check_stage_run(cfg: Config, lock_path: Path) -> str:
    """A stage run: one run with flat params, provenance tags, per-step metrics, FINISHED,
    nested under the pipeline's parent run. Returns the run id."""
    from mlflow import MlflowClient

    from agentr1.tracking import stage_run

    with stage_run(cfg, "sft", lock_path=lock_path) as run:
        assert run.enabled
        for step, loss in enumerate([2.0, 1.5, 1.25]):
            run.logger.log({"train/loss": loss, "train/lr": 0.001}, step=step * 10)
    client = MlflowClient(tracking_uri=run.tracking_uri)
    got = client.get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "sft"
    history = client.get_metric_history(run.run_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(0, 2.0), (10, 1.5), (20, 1.25)]
    params, tags = got.data.params, got.data.tags
    assert params["env.max_turns"] == str(cfg.env.max_turns)
    assert params["data.synthetic.families.train"] == str(cfg.data.synthetic.families.train)
    assert params["retrieval.report.ks"] == "[1, 3, 5]"
    assert params["tracking.uri"] == cfg.tracking.uri
    assert tags["agentr1.git_sha"] == head_sha()
    assert tags["agentr1.git_dirty"] in ("true", "false")
    assert tags["agentr1.params_hash"] == cfg.section_hash()
    assert tags["agentr1.profile"] == "nano" and tags["agentr1.seed"] == "0"
    assert tags["agentr1.stage"] == "sft" and tags["agentr1.run_name"] == "sft"
    assert tags["dvc.dep.data/processed"] == "upstream123.dir"
    parent = client.get_run(tags["mlflow.parentRunId"])
    assert parent.data.tags["agentr1.role"] == "pipeline"
    assert parent.data.tags["agentr1.pipeline_id"] == tags["agentr1.pipeline_id"]
    return run.run_id


def check_traces(cfg: Config) -> None:
    """Traces: AGENT root with LLM and RETRIEVER/TOOL children carrying the right inputs and
    outputs, attached to the run; all trajectories as a table."""
    import mlflow
    from mlflow.entities import SpanType

    from agentr1.tracking import stage_run

    trajs = [good_trajectory("q1"), bad_trajectory("q2"), good_trajectory("q3")]
    with stage_run(cfg, "evaluate@test") as run:
        ids = run.log_traces(trajs, sample_n=3, split="dev", tags={"agentr1.policy": "test"})
        run.log_table(trajs, "eval/dev_trajectories.json")
        run.logger.log_trajectories([good_trajectory("q9")], step=5)  # what a trainer does every N steps
    assert len(ids) == 3
    traces = mlflow.search_traces(locations=[run.experiment_id], run_id=run.run_id, return_type="list")
    by_qid = {t.data.spans[0].attributes["agentr1.qid"]: t for t in traces}
    assert sorted(by_qid) == ["q1", "q2", "q3", "q9"]
    assert by_qid["q9"].info.tags["agentr1.step"] == "5" and by_qid["q9"].info.tags["agentr1.split"] == "train"

    spans = {s.name: s for s in by_qid["q1"].data.spans}
    root = spans["episode q1"]
    assert root.span_type == SpanType.AGENT and root.parent_id is None
    assert root.inputs["question"] == "Where was Ada Vell born?" and root.outputs["answer"] == "Pellora"
    assert root.attributes["agentr1.em"] == 1.0 and root.attributes["agentr1.reward"] == 1.0
    assert root.attributes["agentr1.split"] == "dev"
    # the gold answers, EM and F1 next to the answer; the policy and run on the span and the trace
    assert root.outputs["golds"] == ["Pellora"] and root.outputs["em"] == 1.0 and root.outputs["f1"] == 1.0
    assert root.attributes["agentr1.golds"] == ["Pellora"] and root.attributes["agentr1.f1"] == 1.0
    assert root.attributes["agentr1.policy"] == "test" and by_qid["q1"].info.tags["agentr1.policy"] == "test"
    assert by_qid["q1"].info.tags["agentr1.run_name"] == by_qid["q9"].info.tags["agentr1.run_name"] == "evaluate@test"
    assert all(s.attributes["agentr1.replayed"] is True for s in by_qid["q1"].data.spans)  # not real timings
    found = mlflow.search_traces(
        locations=[run.experiment_id], filter_string="tags.`agentr1.policy` = 'test'", return_type="list"
    )
    assert sorted(t.data.spans[0].attributes["agentr1.qid"] for t in found) == ["q1", "q2", "q3"]
    turn0, turn1, search = spans["policy turn 0"], spans["policy turn 1"], spans["search"]
    assert turn0.span_type == turn1.span_type == SpanType.LLM
    assert turn0.inputs == {"context": PROMPT} and turn0.outputs == {"text": TURN0}
    assert turn1.inputs == {"context": PROMPT + TURN0 + OBS0} and turn1.outputs == {"text": TURN1}
    assert search.span_type == SpanType.RETRIEVER
    assert search.inputs == {"calls": [TURN0]} and search.outputs == {"observation": OBS0}
    assert {s.parent_id for s in (turn0, turn1, search)} == {root.span_id}
    assert by_qid["q1"].info.tags["agentr1.qid"] == "q1"

    bad = {s.span_type: s for s in by_qid["q2"].data.spans}
    assert set(bad) == {SpanType.AGENT, SpanType.LLM, SpanType.TOOL}
    assert bad[SpanType.TOOL].outputs == {"observation": BAD_OBS0}
    assert bad[SpanType.AGENT].attributes["agentr1.em"] == 0.0

    table = mlflow.load_table("eval/dev_trajectories.json", run_ids=[run.run_id])
    assert list(table["qid"]) == ["q1", "q2", "q3"] and list(table["em"]) == [1.0, 0.0, 1.0]
    assert list(table["tool_calls"]) == [1, 1, 1]


def check_registry(cfg: Config, ckpt: Path) -> None:
    """Log three policy versions, gate them, load the champion back and generate."""
    from mlflow import MlflowClient

    from agentr1.tracking import promote, resolve_tracking_uri, stage_run
    from agentr1.tracking.registry import load_policy_model, version_metrics

    name = cfg.tracking.registered_model
    client = MlflowClient(tracking_uri=resolve_tracking_uri(cfg))
    decisions = []
    for i, (em, lo, hi) in enumerate([(0.5, 0.4, 0.6), (0.55, 0.45, 0.65), (0.8, 0.7, 0.9)]):
        with stage_run(cfg, f"train@run{i}") as run:
            mv = run.log_model(
                ckpt, {"test/em": em, "test/em_ci_lower": lo, "test/em_ci_upper": hi}, eval_data="test:abc"
            )
        assert str(mv.version) == str(i + 1) and mv.run_id == run.run_id
        assert str(client.get_model_version_by_alias(name, "challenger").version) == str(mv.version)
        result = promote(name, "test/em")
        assert result.champion == str(client.get_model_version_by_alias(name, "champion").version)
        decisions.append((result.decision, result.champion))
    # v1: first champion; v2 within v1's CI: keep; v3 beyond it: promote
    assert decisions == [("promote", "1"), ("keep", "1"), ("promote", "3")]
    champion = client.get_model_version_by_alias(name, "champion")
    assert champion.tags["agentr1.gate.decision"] == "promote"
    assert version_metrics(client, champion)["test/em"] == 0.8
    model = load_policy_model(name, "champion", client=client)
    out = model.predict(["<search> Ada"], params={"max_new_tokens": 3})
    assert isinstance(out, list) and len(out) == 1 and isinstance(out[0], str)


def check_tampered_model_is_refused(client, name: str) -> None:
    """Edit the stored code of the champion (as someone with write access to the artifact store
    could): the verified loader refuses it before any of that code runs."""
    import tempfile

    import mlflow
    import pytest

    from agentr1.errors import StageError
    from agentr1.tracking.registry import load_policy_model, model_id_of, tree_digest
    from agentr1.tracking.tags import ARTIFACT_TAG

    champion = client.get_model_version_by_alias(name, "champion")
    stored = Path(
        mlflow.artifacts.download_artifacts(
            artifact_uri=f"models:/{name}/{champion.version}", dst_path=tempfile.mkdtemp()
        )
    )
    assert champion.tags[ARTIFACT_TAG] == tree_digest(stored)
    code = [p.relative_to(stored) for p in stored.rglob("*.py")]
    assert code, "the logged model holds its code file"
    root = client.get_logged_model(model_id_of(champion)).artifact_location
    target = Path(root.removeprefix("file://")) / code[0]
    assert target.is_file(), f"test assumes a local artifact store, got {root}"
    marker = target.parent / "tampered-code-ran"
    target.write_text(target.read_text() + f"\nopen({str(marker)!r}, 'w').close()\n")  # runs if loaded
    with pytest.raises(StageError, match="do not match the digest"):
        load_policy_model(name, "champion", client=client)
    assert not marker.exists()
    mlflow.pyfunc.load_model(f"models:/{name}/{champion.version}")  # the unverified load ...
    assert marker.exists()  # ... runs what the store holds: the threat the digest guards against
    client.delete_model_version_tag(name, champion.version, ARTIFACT_TAG)
    with pytest.raises(StageError, match="no agentr1.artifact_sha256 tag"):
        load_policy_model(name, "champion", client=client)


def write_lock(path: Path, src_file: Path) -> Path:
    """A ``dvc.lock`` whose ``sft`` entry depends on an upstream output and a source file."""
    path.write_text(
        "schema: '2.0'\nstages:\n"
        "  prepare:\n    cmd: agentr1 prepare\n    outs:\n"
        "    - path: data/processed\n      hash: md5\n      md5: upstream123.dir\n"
        "  sft:\n    cmd: agentr1 sft\n    deps:\n"
        "    - path: data/processed\n      hash: md5\n      md5: stale000.dir\n"
        f"    - path: {src_file.name}\n      hash: md5\n      md5: stalefile\n"
        "    - path: src/somewhere\n      hash: md5\n      md5: lockeddir.dir\n"
    )
    return path
