"""Reading what the evaluate and train stages wrote, with errors that name the stage to run.

* ``<evaluate.out_dir>/<policy>/metrics.json`` and ``episodes.jsonl`` (one row per question:
  ``id``, ``split``, ``type``, ``hops``, the per-question scores and the behaviour fields
  :data:`BEHAVIOUR`) for every named run and for the baselines ``base_tool_call``, ``naive_rag``,
  ``cold_start``;
* ``<train.out_dir>/<run>/curve.csv`` (one row per RL step: ``step``, ``reward``, ...,
  ``tool_calls`` per rollout episode, ``dev_em`` where evaluated).
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.errors import StageError

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
EPISODES_FILE = "episodes.jsonl"
CURVE_FILE = "curve.csv"
# |mean over episodes.jsonl - metrics.json| above this is reported as a stale evaluation
CONSISTENCY_TOL = 5e-4
# per-episode fields the behaviour table reads (None where a row lacks one: an evaluation that predates it)
BEHAVIOUR = ("tool_calls", "early_answer", "format_ok", "answered", "support_found")


@dataclass
class Question:
    split: str
    id: str
    type: str
    hops: int | None
    score: float
    values: dict[str, float | None] = field(default_factory=dict)  # the row's BEHAVIOUR fields


@dataclass
class Evaluation:
    """One evaluated policy: ``scores[split][question id]`` of the report's metric."""

    policy: str
    kind: str
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    questions: dict[str, dict[str, Question]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class Curve:
    run: str
    steps: list[int]
    reward: list[float | None]
    dev_em: list[float | None]
    tool_calls: list[float | None] = field(default_factory=list)  # per rollout episode, per step
    step_group_shared: list[float | None] = field(
        default_factory=list
    )  # stepwise estimators: later turns sharing a state

    def __post_init__(self) -> None:
        for name in ("tool_calls", "step_group_shared"):  # a curve without the column: no value at any step
            if not getattr(self, name):
                setattr(self, name, [None] * len(self.steps))


def eval_stage(policy: str, baselines: Iterable[str]) -> str:
    """The DVC stage that writes ``policy``'s evaluation."""
    return f"evaluate_baseline@{policy}" if policy in set(baselines) else f"evaluate@{policy}"


def check_inputs(eval_dir: Path, runs_dir: Path, runs: Sequence[str], baselines: Sequence[str]) -> None:
    """``StageError`` listing every missing input file and the ``dvc repro`` that writes it."""
    missing = []
    for policy in [*runs, *baselines]:
        for name in (METRICS_FILE, EPISODES_FILE):
            path = eval_dir / policy / name
            if not path.is_file():
                missing.append(f"{path} (run `dvc repro {eval_stage(policy, baselines)}`)")
    for run in runs:
        path = runs_dir / run / CURVE_FILE
        if not path.is_file():
            missing.append(f"{path} (run `dvc repro train@{run}`)")
    if missing:
        raise StageError("the report needs inputs that do not exist yet:\n  - " + "\n  - ".join(missing))


def load_evaluation(
    eval_dir: Path, policy: str, splits: Sequence[str], metric: str, baselines: Sequence[str]
) -> Evaluation:
    """One policy's metrics.json + episodes.jsonl, restricted to ``splits``; ``StageError`` for
    a malformed file, a duplicate question or a split without episodes."""
    fix = f"re-run `dvc repro {eval_stage(policy, baselines)}`"
    mpath, epath = eval_dir / policy / METRICS_FILE, eval_dir / policy / EPISODES_FILE
    try:
        metrics = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise StageError(f"{mpath} is not valid JSON ({exc}): {fix}") from None
    ev = Evaluation(policy=policy, kind=str(metrics.get("kind", "")), metrics=metrics)
    wanted = set(splits)
    with epath.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                split, qid = str(row["split"]), str(row["id"])
                if split not in wanted:
                    continue
                score = float(row[metric])
                hops = row.get("hops")
                values = {k: None if row.get(k) is None else float(row[k]) for k in BEHAVIOUR}
                q = Question(
                    split, qid, str(row.get("type") or "unknown"), None if hops is None else int(hops), score, values
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise StageError(f"{epath}:{lineno}: bad episode row ({type(exc).__name__}: {exc}): {fix}") from None
            if qid in ev.questions.setdefault(split, {}):
                raise StageError(f"{epath}:{lineno}: question {qid!r} of split {split!r} appears twice: {fix}")
            ev.questions[split][qid] = q
            ev.scores.setdefault(split, {})[qid] = score
    for split in splits:
        if not ev.scores.get(split):
            raise StageError(
                f"{epath} has no {split!r} episodes: {fix} with that split evaluated, "
                f"or remove {split!r} from params report.splits"
            )
        stated = ((metrics.get("splits") or {}).get(split) or {}).get(metric)
        mean = sum(ev.scores[split].values()) / len(ev.scores[split])
        if isinstance(stated, (int, float)) and abs(float(stated) - mean) > CONSISTENCY_TOL:
            log.warning(
                "%s: %s %s = %.4f but %s averages %.4f (a stale evaluation? %s)",
                mpath,
                split,
                metric,
                stated,
                epath.name,
                mean,
                fix,
            )
    return ev


def _opt_float(text: str | None) -> float | None:
    return None if text is None or text.strip() == "" else float(text)


def load_curve(runs_dir: Path, run: str) -> Curve:
    """A run's curve.csv (``step``, ``reward``, ``dev_em``, ``tool_calls``, ``step_group_shared``;
    empty cells and a missing column -> ``None``)."""
    path = runs_dir / run / CURVE_FILE
    steps, reward, dev, calls, shared = [], [], [], [], []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or "step" not in reader.fieldnames or "reward" not in reader.fieldnames:
            raise StageError(f"{path} has no step/reward columns: re-run `dvc repro train@{run}`")
        for row in reader:
            try:
                steps.append(int(row["step"]))
                reward.append(_opt_float(row.get("reward")))
                dev.append(_opt_float(row.get("dev_em")))
                calls.append(_opt_float(row.get("tool_calls")))
                shared.append(_opt_float(row.get("step_group_shared")))
            except ValueError as exc:
                raise StageError(f"{path}: bad row {row} ({exc}): re-run `dvc repro train@{run}`") from None
    return Curve(run, steps, reward, dev, calls, shared)
