"""The typed config: defaults, and errors that name the key path and the allowed values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentr1.config import Config, ConfigError, config_from_dict, flatten, load_config
from agentr1.registry import ESTIMATORS


def test_repo_params_load_and_match_defaults(repo_root: Path) -> None:
    cfg = load_config(repo_root / "params.yaml")
    assert isinstance(cfg, Config)
    assert cfg.profile == "nano"
    # params.yaml states the defaults explicitly: it must not drift from agentr1.config.
    assert cfg.model_dump(exclude={"runs", "sft_reference"}) == Config().model_dump(exclude={"runs", "sft_reference"})
    # ... except the named runs and the reference cold start, named variants that live in params.yaml only
    assert Config().runs == {} and cfg.train_for("ppo").estimator == "gae" and len(cfg.runs) == 8
    assert Config().sft_reference is None and cfg.sft_for("reference").oracle_noise == 0.2
    from agentr1.profiles import load_profile

    extended = load_profile("extended", repo_root / "params.yaml").cfg  # the rows the 45-minute default leaves out
    assert (
        extended.train_for("grpo_reference-1").cold_start == "reference"
        and extended.train_for("gigpo").estimator == "gigpo"
    )
    assert set(extended.runs) == set(cfg.runs) | {"gigpo", "grpo_reference"} and extended.seeds == cfg.seeds


def test_unknown_key_names_its_path() -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"data": {"synthetic": {"famlies": {"train": 3}}}})
    msg = str(exc.value)
    assert "data.synthetic.famlies" in msg and "unknown key" in msg


def test_wrong_type_names_path_and_type() -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"env": {"max_turns": "many"}})
    assert "env.max_turns" in str(exc.value) and "int" in str(exc.value)


def test_negative_size_names_bound() -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"data": {"synthetic": {"questions": {"dev": -5}}}})
    assert "data.synthetic.questions.dev" in str(exc.value) and ">= 0" in str(exc.value)


def test_literal_lists_allowed_values() -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"rollout": {"observation_wrap": "xml"}})
    assert "rollout.observation_wrap" in str(exc.value) and "'inline'" in str(exc.value)


@pytest.mark.parametrize(
    "section, path, choices",
    [
        (
            {"train": {"estimator": "ppo"}},
            "train.estimator",
            "gae, gigpo, grpo, reinforce_pp, reinforce_pp_baseline, rloo",
        ),
        ({"train": {"policy_loss": "clip"}}, "train.policy_loss", "ppo_clip, reinforce"),
        ({"train": {"kl": {"estimator": "k4"}}}, "train.kl.estimator", "abs, k1, k2, k3, kl, low_var_kl, mse"),
        ({"env": {"format": "xml"}}, "env.format", "hermes, tags"),
        ({"env": {"tools": ["search", "calc"]}}, "env.tools.1", "calculator, search"),
        ({"reward": {"metric": "bleu"}}, "reward.metric", "em, f1, subem"),
        ({"runs": {"x": {"estimator": "ppo"}}}, "runs.x.estimator", "gae, gigpo, grpo"),
        ({"retrieval": {"backend": "elastic"}}, "retrieval.backend", "bm25, dense"),
        ({"rollout": {"backend": "sglang"}}, "rollout.backend", "hf, vllm"),
    ],
)
def test_registry_names_are_checked(section: dict, path: str, choices: str) -> None:
    """A field naming a plug-in must name a registered one; the error names the field, the bad
    value and the registered names."""
    with pytest.raises(ConfigError) as exc:
        config_from_dict(section)
    bad = next(v for v in flatten(section).values())
    bad = bad[-1] if isinstance(bad, list) else bad
    line = next(ln for ln in str(exc.value).splitlines() if path in ln)
    assert f"{bad!r}" in line and f"available: {choices}" in line, line


def test_a_registered_estimator_is_valid_in_config() -> None:
    import agentr1.rl.advantages as adv

    with pytest.raises(ConfigError, match="train.estimator"):
        config_from_dict({"train": {"estimator": "grpo_test_copy", "group_size": 1}})
    ESTIMATORS.register("grpo_test_copy", grouped=True)(adv.grpo)
    try:
        cfg = config_from_dict({"train": {"estimator": "grpo_test_copy"}})
        assert cfg.train.estimator == "grpo_test_copy"
        # what it declares is what config enforces: a grouped estimator needs group_size >= 2
        with pytest.raises(ConfigError, match="compares the rollouts of one question.*estimator gae / reinforce_pp"):
            config_from_dict({"train": {"estimator": "grpo_test_copy", "group_size": 1}})
    finally:
        ESTIMATORS.remove("grpo_test_copy")
    with pytest.raises(ConfigError, match="train.estimator"):
        config_from_dict({"train": {"estimator": "grpo_test_copy"}})


@pytest.mark.parametrize(
    "section",
    [
        {"data": {"real": {"ratios": {"train": 0.5, "dev": 0.1, "test": 0.1}}}},
        {"data": {"synthetic": {"types": {"bridge": 0.9}}}},
    ],
)
def test_fractions_must_sum_to_one(section: dict) -> None:
    with pytest.raises(ConfigError, match="sum to 1"):
        config_from_dict(section)


def test_several_errors_reported_together() -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"seed": -1, "env": {"format": "xml"}})
    assert "seed" in str(exc.value) and "env.format" in str(exc.value)


def test_overrides_use_dotted_paths(tmp_path: Path) -> None:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"env": {"max_turns": 2}}))
    cfg = load_config(p, {"env.max_turns": 3, "retrieval.bm25.k1": 0.9})
    assert cfg.env.max_turns == 3 and cfg.retrieval.bm25.k1 == 0.9


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_cli_fails_before_any_work(tmp_path: Path) -> None:
    """Bad params stop the CLI with exit 2 and the key path, before the stage runs (no outputs)."""
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"data": {"processed_dir": str(tmp_path / "out"), "bogus": 1}}))
    proc = subprocess.run(
        [sys.executable, "-m", "agentr1.cli", "--params", str(p), "prepare"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "data.bogus" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_section_hash_is_stable_and_sensitive() -> None:
    a, b = Config(), Config()
    assert a.section_hash("env") == b.section_hash("env")
    b.env.max_turns = 2
    assert a.section_hash("env") != b.section_hash("env")
    assert a.section_hash("data") == b.section_hash("data")


# ----------------------------------------------------------------- impossible budgets, non-finite values
def test_total_tokens_must_leave_room_for_a_prompt_and_a_turn() -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"rollout": {"max_total_tokens": 16}})  # default max_turn_tokens 48
    msg = str(exc.value)
    assert "rollout" in msg and "max_total_tokens (16)" in msg and "max_turn_tokens (48)" in msg
    assert "raise rollout.max_total_tokens" in msg
    with pytest.raises(ConfigError, match="max_total_tokens"):
        config_from_dict({"rollout": {"max_turn_tokens": 100, "max_total_tokens": 100}})
    assert (
        config_from_dict({"rollout": {"max_turn_tokens": 100, "max_total_tokens": 101}}).rollout.max_total_tokens == 101
    )


@pytest.mark.parametrize(
    "text, path",
    [
        ("train: {lr: .inf}", "train.lr"),
        ("train: {kl: {coef: .inf}}", "train.kl.coef"),
        ("reward: {process: {invalid_call: .nan}}", "reward.process.invalid_call"),
        ("train: {critic: {lr: -.inf}}", "train.critic.lr"),
    ],
)
def test_non_finite_values_are_refused(tmp_path: Path, text: str, path: str) -> None:
    p = tmp_path / "params.yaml"
    p.write_text(text + "\n")
    with pytest.raises(ConfigError, match=rf"{path}: Input should be a finite number"):
        load_config(p)


# ------------------------------------------------------------- unreadable params files, bad --set paths
def _cli(argv, capsys):
    from agentr1 import cli

    rc = cli.main(argv)
    return rc, capsys.readouterr().err


def test_params_file_that_is_not_utf8_or_a_directory(tmp_path: Path, capsys) -> None:
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("seed: 1  # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml is not UTF-8 text .*byte 0xe9"):
        load_config(latin)
    with pytest.raises(ConfigError, match=r"is a directory"):
        load_config(tmp_path)
    for params in (latin, tmp_path):
        rc, err = _cli(["--params", str(params), "prepare"], capsys)
        assert rc == 2 and "Traceback" not in err and str(params) in err


@pytest.mark.parametrize(
    "setting, message",
    [
        ("train.steps.x=1", r"--set train\.steps\.x=1: train\.steps is [0-9]+, not a mapping"),
        ("env.tools.x=1", r"--set env\.tools\.x=1: env\.tools is a list, not a mapping"),
        ("train..lr=1", r"--set train\.\.lr=1: empty key"),
        ("train.lr=[1", r"--set train\.lr=\[1: the value is not valid YAML"),
    ],
)
def test_bad_set_paths_are_config_errors(tmp_path: Path, capsys, setting: str, message: str, repo_root: Path) -> None:
    rc, err = _cli(["--params", str(repo_root / "params.yaml"), "--set", setting, "prepare"], capsys)
    assert rc == 2 and "Traceback" not in err
    assert __import__("re").search(message, err), err


# ------------------------------------------------- issue 26: params that mean something else than they say
def _params(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_alias_bomb_is_refused_small_and_fast(tmp_path: Path) -> None:
    """A 9-level "billion laughs" (13.8 kB) used to become a 448 MB ConfigError after 26 s."""
    import time

    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = _params(tmp_path, "\n".join(lines) + "\nseed: *a8\n")
    t0 = time.process_time()
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert time.process_time() - t0 < 2.0
    assert "aliases expand to more than" in str(exc.value) and len(str(exc.value)) < 2000
    # a few aliases of a small section are fine
    ok = _params(tmp_path, "x: &h {min: 1, max: 4}\ndata: {hops: *h}\n")
    with pytest.raises(ConfigError, match=r"- x: .*unknown key"):  # the anchor's own key is still checked
        load_config(ok)


def test_values_quoted_in_errors_are_clipped(tmp_path: Path) -> None:
    path = _params(tmp_path, "seed: " + "x" * 10_000_000 + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert "seed" in str(exc.value) and len(str(exc.value)) < 1000


@pytest.mark.parametrize(
    "text, first, second",
    [
        ("train: {steps: 3}\nseed: 1\ntrain: {lr: 0.1}\n", 1, 3),
        ("train:\n  steps: 3\n  kl: {coef: 0.1, coef: 0.2}\n", 3, 3),
        ("runs:\n  a: {seed: 1}\n  b: {seed: 2}\n  a: {seed: 3}\n", 2, 4),
    ],
)
def test_duplicate_keys_name_both_lines(tmp_path: Path, text: str, first: int, second: int) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_params(tmp_path, text))
    assert f"at line {second} (first at line {first})" in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    "text, path",
    [
        ("train: {steps: yes}", "train.steps"),  # YAML 1.1: true, then 1
        ("seed: 1:30", "seed"),  # YAML 1.1: base 60, 90
        ("seed: 0x10", "seed"),  # 16
        ("seed: 010", "seed"),  # YAML 1.1: octal 8
        ("train: {steps: 30.0}", "train.steps"),
        ("seed: '7'", "seed"),
        ("tracking: {enabled: 1}", "tracking.enabled"),
        ("env: {think: on}", "env.think"),
        ("train: {lr: true}", "train.lr"),
        ("train: {gigpo: {step_weight: '0.5'}}", "train.gigpo.step_weight"),  # issue 48 item 9: a quoted float
        ("train: {lr: '1e-4'}", "train.lr"),
        ("reward: {process: {invalid_call: '-0.1'}}", "reward.process.invalid_call"),
        ("reward: {process: {successful_calculator: '0.05'}}", "reward.process.successful_calculator"),
    ],
)
def test_numbers_and_booleans_must_be_written_as_such(tmp_path: Path, text: str, path: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_params(tmp_path, text + "\n"))
    assert path in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    "text, path, bound",
    [  # issue 48 item 9: a weight of 1e39 trained into NaN
        ("train: {gigpo: {step_weight: 1.0e39}}", "train.gigpo.step_weight", "<= 100"),
        ("train: {kl: {coef: 11}}", "train.kl.coef", "<= 10"),
        ("train: {entropy_coef: 1.5}", "train.entropy_coef", "<= 1"),
        ("train: {weight_decay: 2}", "train.weight_decay", "<= 1"),
        ("train: {off_policy: {weight_cap: 1000}}", "train.off_policy.weight_cap", "<= 100"),
        ("reward: {process: {successful_search: 5}}", "reward.process.successful_search", "<= 1"),
        ("reward: {process: {successful_calculator: -3}}", "reward.process.successful_calculator", ">= -1"),
    ],
)
def test_weights_and_coefficients_have_a_documented_range(tmp_path: Path, text: str, path: str, bound: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_params(tmp_path, text + "\n"))
    assert path in str(exc.value) and bound in str(exc.value), str(exc.value)


def test_yaml_12_numbers_still_read() -> None:
    from agentr1.config import parse_set

    assert parse_set("train.lr=1e-4") == ("train.lr", 1e-4) and parse_set("seed=12") == ("seed", 12)
    assert config_from_dict({"train": {"lr": 1e-4, "steps": 0}, "seed": 3}).train.lr == 1e-4


def test_set_with_a_huge_integer_is_a_config_error(capsys, repo_root: Path) -> None:
    rc, err = _cli(["--params", str(repo_root / "params.yaml"), "--set", "seed=" + "7" * 5000, "prepare"], capsys)
    assert rc == 2 and "Traceback" not in err and "5000 digits" in err and len(err) < 2000, err


def test_duplicate_tools_are_refused_at_load() -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"env": {"tools": ["search", "search"]}})
    assert "env.tools" in str(exc.value) and "more than once" in str(exc.value)


@pytest.mark.parametrize("name", ["", "a/b", "../../../tmp/x", "..", "x" * 65, " grpo", "a\\b"])
def test_run_names_that_are_not_plain_folder_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"runs": {name: {"estimator": "grpo"}}})
    assert "run name" in str(exc.value)


def test_a_reference_cold_start_identical_to_the_cold_start_is_refused() -> None:
    """A profile that gives sft the reference demonstrator (issue 49: smol's scalar
    oracle_noise) would make stage sft_reference train what sft trains: refused, naming the fix;
    a reference that changes the demonstrator passes."""
    with pytest.raises(ConfigError, match=r"sft_reference changes only where sft writes.*sft_reference.oracle_noise"):
        config_from_dict(
            {
                "sft": {"oracle_noise": 0.2},
                "sft_reference": {"oracle_noise": 0.2, "out_dir": "m/ref", "report_dir": "r/ref"},
            }
        )
    cfg = config_from_dict({"sft_reference": {"oracle_noise": 0.2, "out_dir": "m/ref", "report_dir": "r/ref"}})
    assert cfg.sft_for("reference").oracle_noise == 0.2 != cfg.sft.oracle_noise
