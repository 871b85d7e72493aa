"""A separately installed plug-in package extends agentr1 with no file of agentr1 changed.

``tests/plugin_pkg`` is that package (``agentr1_testplugin``): an advantage estimator, a tool and a
dataset loader, declared by its entry points (``tests/plugin_pkg/entry_points.txt``). The fixture
installs it the way pip would leave it for ``importlib.metadata``: a ``*.dist-info`` folder (its
``METADATA`` and ``entry_points.txt``) on ``sys.path``, next to the package's code. Then agentr1
lists the three names, validates params naming them (and refuses a misspelt one, listing the
available names) and runs each through the path the pipeline uses: the estimator through
``compute_advantage`` with the trainer's arguments, the tool through ``ToolEnv``, the loader
through the ``prepare`` stage's ``build_dataset``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentr1 import registry
from agentr1.config import ConfigError, config_from_dict
from agentr1.registry import DATASETS, ESTIMATORS, TOOLS

PLUGIN_CODE = Path(__file__).resolve().parent / "plugin_pkg"
PLUGIN = "agentr1_testplugin"


def _install(site: Path) -> None:
    """What installing the package writes for ``importlib.metadata``, under ``site``."""
    info = site / f"{PLUGIN}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 0.1\n", encoding="utf-8")
    shutil.copy(PLUGIN_CODE / "entry_points.txt", info / "entry_points.txt")


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The plug-in installed for this test only (entry points re-read before and after)."""
    assert "centered" not in ESTIMATORS and "echo" not in TOOLS and "trivia" not in DATASETS
    site = tmp_path / "site"
    _install(site)
    monkeypatch.syspath_prepend(str(PLUGIN_CODE))
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()
    try:
        yield site
    finally:
        monkeypatch.undo()
        for name in [m for m in sys.modules if m == PLUGIN or m.startswith(f"{PLUGIN}.")]:
            del sys.modules[name]
        registry.refresh()
        assert "centered" not in ESTIMATORS and "echo" not in TOOLS and "trivia" not in DATASETS


def _params(source_path: Path, **train) -> dict:
    return {
        "train": {"estimator": "centered", "group_size": 2, **train},
        "env": {"tools": ["echo"], "echo": {"prefix": ">> "}},
        "data": {
            "source": "real",
            "real": {"sources": [{"dataset": "trivia", "path": str(source_path), "split": "train"}]},
        },
    }


def _trivia_file(path: Path) -> Path:
    rows = [
        {
            "id": str(i),
            "question": f"Who wrote book {i}?",
            "answer": f"Author {i}",
            "title": f"Book {i}",
            "text": f"Book {i} was written by Author {i}.",
        }
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_agentr1_lists_the_plugins_names(plugin_site: Path) -> None:
    assert "centered" in ESTIMATORS.names(grouped=True) and ESTIMATORS.spec("centered").meta["label"] == "Centered"
    assert TOOLS.names() == ["calculator", "echo", "search"]
    assert DATASETS.names() == ["2wiki", "flashrag", "gsm8k", "hotpotqa", "musique", "trivia"]


def test_params_naming_the_plugins_validate_and_a_misspelt_name_lists_the_choices(
    plugin_site: Path, tmp_path: Path
) -> None:
    cfg = config_from_dict(_params(tmp_path / "trivia.jsonl"))
    assert cfg.train.estimator == "centered" and cfg.env.echo.prefix == ">> "
    assert cfg.data.real.sources[0].dataset == "trivia"
    with pytest.raises(ConfigError, match="group_size"):  # the declared metadata is honoured: grouped
        config_from_dict(_params(tmp_path / "trivia.jsonl", group_size=1))
    source = {"path": "x"}
    for params, choices in [
        ({"train": {"estimator": "centred"}}, "centered, gae, gigpo, grpo, reinforce_pp, reinforce_pp_baseline, rloo"),
        ({"env": {"tools": ["ecko"]}}, "calculator, echo, search"),
        (
            {"data": {"real": {"sources": [{"dataset": "trivai", **source}]}}},
            "2wiki, flashrag, gsm8k, hotpotqa, musique, trivia",
        ),
    ]:
        with pytest.raises(ConfigError) as exc:
            config_from_dict(params)
        assert f"available: {choices}" in str(exc.value), str(exc.value)


def test_validating_the_plugins_params_imports_no_torch(plugin_site: Path, tmp_path: Path) -> None:
    """The estimator's metadata comes from its light declaration: its torch module stays unimported."""
    code = (
        "import json, sys; from agentr1.config import config_from_dict; "
        f"config_from_dict(json.loads({json.dumps(json.dumps(_params(tmp_path / 'trivia.jsonl')))})); "
        f"print(sorted(m for m in sys.modules if m == 'torch' or m == '{PLUGIN}.estimator'))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_site), str(PLUGIN_CODE)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_estimator_runs_where_the_trainer_calls_it(plugin_site: Path) -> None:
    from agentr1.rl.advantages import compute_advantage

    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 3.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 1, 1]])
    index = [b // 2 for b in range(4)]  # the trainer's groups: group_size consecutive episodes
    adv, ret = compute_advantage(
        "centered", rewards, mask, values=None, index=index, gamma=1.0, lam=1.0, whiten=True, norm_by_std=True
    )
    # scores 1, 3 (group 0, mean 2) and 2, 0 (group 1, mean 1): advantages -1, 1, 1, -1 on the mask
    expected = torch.tensor([[-1.0, -1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, -1.0, -1.0]])
    assert torch.equal(adv, expected) and torch.equal(ret, expected)
    with pytest.raises(ValueError, match="needs 'index'"):
        compute_advantage("centered", rewards, mask, index=None)


def test_the_tool_runs_in_the_tool_environment(plugin_site: Path, tmp_path: Path) -> None:
    from agentr1.env import ToolEnv
    from agentr1.env.rewards import process_rewards

    cfg = config_from_dict(
        {**_params(tmp_path / "trivia.jsonl"), "reward": {"process": {"enabled": True, "successful_echo": 0.5}}}
    )
    env = ToolEnv.from_config(cfg.env, retriever=None)
    call = env.fmt.render_call("echo", {"text": "hello there"})
    [res] = env.step_batch([call], [0])
    assert res.outcomes[0].success and ">> hello there" in res.observation
    assert process_rewards([res.outcomes], cfg.reward) == [(0, len(call), 0.5)]


def test_the_loader_runs_in_the_prepare_stage(plugin_site: Path, tmp_path: Path) -> None:
    from agentr1.data.prepare import build_dataset

    cfg = config_from_dict(_params(_trivia_file(tmp_path / "trivia.jsonl")))
    ds, _ = build_dataset(cfg)
    assert [q["id"] for q in ds.split("train")] == ["trivia:0", "trivia:1", "trivia:2"]
    assert ds.split("train")[1]["answers"] == ["Author 1"] and len(ds.corpus) == 3
    assert ds.split("train")[0]["supporting_ids"] == [ds.corpus[0]["id"]]
