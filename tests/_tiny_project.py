"""A tiny, throwaway DVC project for the orchestration and S3 tests.

It runs the real stage commands (``agentr1 prepare`` / ``validate`` / ``index``) on a synthetic
world of a few dozen questions, so a full ``dvc repro`` takes about a minute on 2 cores (most of
it Great Expectations' import in ``validate``). The stage ``deps`` list only data and params
(the project has no ``src/``; the stage code is the installed ``agentr1``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO_PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
TINY_OVERRIDES = {
    "data": {
        "synthetic": {
            "families": {"train": 6, "dev": 3, "test": 3, "ood": 3},
            "questions": {"train": 40, "dev": 10, "test": 10, "ood": 10},
        }
    },
    # six train families hold too few name parts to build every held-out name from (the world
    # falls back to the whole inventory), so the copy check would rightly fail: this world is
    # for the pipeline's mechanics, not for reading
    "validate": {"copy_sources": []},
}


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# the repository's params (DVC needs every section a stage lists) with a tiny synthetic world
TINY_PARAMS = deep_merge(yaml.safe_load(REPO_PARAMS.read_text()), TINY_OVERRIDES)

DVC_YAML = {
    "stages": {
        "prepare": {
            "cmd": "agentr1 prepare",
            "params": ["seed", "data"],
            "outs": ["data/processed"],
        },
        "validate": {
            "cmd": "agentr1 validate",
            "deps": ["data/processed"],
            "params": ["validate", "data.hops"],
            "outs": [
                {"data/validation/passed.json": {"cache": False}},
                {"data/validation/gx_result.json": {"cache": False}},
            ],
            "metrics": [{"data/validation/summary.json": {"cache": False}}],
        },
        "index": {
            "cmd": "agentr1 index",
            "deps": ["data/processed", "data/validation/passed.json"],
            "params": ["retrieval"],
            "outs": ["data/index"],  # timing.json: written, but no DVC output (wall times)
            "metrics": [{"data/retrieval/report.json": {"cache": False}}],
        },
    }
}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    e.setdefault("GX_ANALYTICS_ENABLED", "false")
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        e.pop(k, None)
    return e


def sh(
    cmd: list[str], cwd: Path, extra_env: dict[str, str] | None = None, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        cmd, cwd=cwd, env={**env(), **(extra_env or {})}, text=True, capture_output=True, timeout=timeout
    )
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def make_project(
    root: Path, params: dict | None = None, extra_stages: dict | None = None, files: dict[str, str] | None = None
) -> Path:
    """git init + dvc init + params.yaml + dvc.yaml (+ extra files), committed."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params if params is not None else TINY_PARAMS, sort_keys=False))
    stages = {"stages": {**DVC_YAML["stages"], **(extra_stages or {})}}
    (root / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    sh(["git", "init", "-q", "-b", "main"], root)
    sh(["git", "config", "user.email", "tests@agentr1.invalid"], root)
    sh(["git", "config", "user.name", "agentr1 tests"], root)
    sh(["git", "config", "commit.gpgsign", "false"], root)
    sh(["dvc", "init", "-q"], root)
    sh(["dvc", "config", "core.analytics", "false"], root)
    sh(["git", "add", "-A"], root)
    sh(["git", "commit", "-q", "-m", "tiny project"], root)
    return root
