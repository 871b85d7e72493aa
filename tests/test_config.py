"""The typed config: defaults, and errors that name the key path and the allowed values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentr1.config import Config, ConfigError, config_from_dict, load_config


def test_repo_params_load_and_match_defaults(repo_root: Path) -> None:
    cfg = load_config(repo_root / "params.yaml")
    assert isinstance(cfg, Config)
    assert cfg.profile == "nano"
    # params.yaml states the defaults explicitly: it must not drift from config.py.
    assert cfg.model_dump() == Config().model_dump()


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
        config_from_dict({"retrieval": {"backend": "elastic"}})
    assert "retrieval.backend" in str(exc.value) and "'bm25'" in str(exc.value)


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
        capture_output=True, text=True, cwd=tmp_path,
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
