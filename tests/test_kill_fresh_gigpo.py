"""Issue 48's fault round for the new paths: ``kill -9`` of ``agentr1 train`` while it draws a fresh
world and while it computes a GiGPO step, N = 3 times each (at three different steps), then
``--resume``: every run ends with the bytes of the uninterrupted run (checkpoint files,
``metrics.json``, ``curve.csv`` without its wall-time columns).

Each run is a real process (``python -c``) that ``SIGKILL``s itself at the chosen moment: inside
:meth:`agentr1.rl.sources.FreshWorlds.at` after the world's questions are drawn and before its
index is built (``world``), or inside the GiGPO estimator after the advantages are computed and
before the update (``gigpo``). The runs use ``train.fresh.every: 1`` (a new world every step),
checkpoints every step and GiGPO with similarity grouping, so each kill lands between two saves.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tiny_world as tw

pytestmark = pytest.mark.slow

N_KILLS = 3  # per kill point, at steps 2, 3 and 4 of 5
STEPS = 5

RUNNER = r"""
import json, os, signal, sys
sys.path.insert(0, {tests!r})
import torch
torch.set_num_threads(1)
from types import SimpleNamespace
from agentr1 import stages
from agentr1.config import config_from_dict
import agentr1.data.validation as validation
validation.require_validated = lambda cfg: None
point, at = os.environ.get("KILL_POINT"), int(os.environ.get("KILL_AT", "0"))
if point == "world":
    import agentr1.data.fresh as fresh
    orig_make = fresh.make_world
    calls = []
    def make_world(*a, **k):
        w = orig_make(*a, **k)
        calls.append(a[1])
        # the start-up check draws every world first; count only the draws of the training steps
        if len(calls) > {worlds} and a[1] == at - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return w
    fresh.make_world = make_world
elif point == "gigpo":
    import agentr1.rl.trainer as trainer
    orig_adv = trainer.compute_advantage
    def compute_advantage(*a, **k):
        out = orig_adv(*a, **k)
        if trainer_step[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    trainer_step = [0]
    orig_step = trainer.Trainer.train_step
    def train_step(self, step):
        trainer_step[0] = step
        return orig_step(self, step)
    trainer.Trainer.train_step = train_step
    trainer.compute_advantage = compute_advantage
cfg = config_from_dict(json.loads(open(sys.argv[1]).read()))
stages.run("train", cfg, SimpleNamespace(run="gigpo", resume=sys.argv[2] == "resume"))
"""


def _project(root: Path) -> Path:
    processed, index, _ = tw.train_inputs(root)
    cfg = {
        "data": {"processed_dir": str(processed)},
        "retrieval": {"index_dir": str(index)},
        "env": {"max_turns": 3, "search": {"topk": 1, "passage_max_chars": 120}},
        "rollout": {"max_turn_tokens": 6, "max_total_tokens": 1024, "batch_size": 8},
        "sft": {"out_dir": str(root / "sft")},
        "tracking": {"enabled": False},
        "runs": {"gigpo": {"estimator": "gigpo"}},
        "train": {
            "steps": STEPS,
            "batch_questions": 2,
            "group_size": 2,
            "micro_batch_size": 2,
            "out_dir": str(root / "runs"),
            "dev": {"every": 0},
            "checkpoint": {"every": 1},
            "questions": "fresh",
            "fresh": {"families": 4, "questions": 8, "every": 1},
            "gigpo": {"similarity": 0.8, "anchor": "observation"},
        },
    }
    path = root / "params.json"
    path.write_text(json.dumps(cfg))
    return path


def _run(params: Path, mode: str, point: str | None = None, at: int = 0) -> int:
    tests = str(Path(__file__).resolve().parent)
    code = RUNNER.format(tests=tests, worlds=STEPS)
    env = {**os.environ, "KILL_POINT": point or "", "KILL_AT": str(at), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(params), mode],
        env=env,
        cwd=params.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if point is None and proc.returncode:
        raise AssertionError(f"train {mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


def _fingerprint(run_dir: Path) -> dict[str, str]:
    """The run's outputs as digests: checkpoint files, metrics.json, curve.csv without time columns."""
    out = {
        f"checkpoint/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((run_dir / "checkpoint").iterdir())
        if p.is_file()
    }
    out["metrics.json"] = hashlib.sha256((run_dir / "metrics.json").read_bytes()).hexdigest()
    rows = list(csv.reader(io.StringIO((run_dir / "curve.csv").read_text())))
    keep = [i for i, name in enumerate(rows[0]) if not name.endswith("_s")]
    out["curve.csv"] = hashlib.sha256(json.dumps([[r[i] for i in keep] for r in rows]).encode()).hexdigest()
    return out


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> dict[str, str]:
    """The uninterrupted run's outputs (one for both kill points)."""
    root = tmp_path_factory.mktemp("straight")
    _run(_project(root), "fresh")
    return _fingerprint(root / "runs" / "gigpo")


@pytest.mark.parametrize("point", ["world", "gigpo"])
def test_kill_9_then_resume_ends_byte_identical(tmp_path, point, straight):
    want = straight
    assert len(want) > 2
    for at in range(2, 2 + N_KILLS):
        root = tmp_path / f"{point}-{at}"
        params = _project(root)
        code = _run(params, "fresh", point, at)
        assert code == -signal.SIGKILL, f"the run was not killed at {point} of step {at} (exit {code})"
        run_dir = root / "runs" / "gigpo"
        assert not (run_dir / "metrics.json").exists()  # killed before the end: no output yet
        assert json.loads((run_dir / "state" / "manifest.json").read_text())["step"] == at - 1
        _run(params, "resume")
        assert _fingerprint(run_dir) == want, f"kill -9 at {point} of step {at}, then --resume"
