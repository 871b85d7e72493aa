"""The whole params file: :class:`Config`, one field per section (in the order of ``params.yaml``;
dumps, hashes and MLflow params follow it), and the named runs."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from agentr1.config.base import ConfigError, _clip_value, _Section
from agentr1.config.data import DataConfig
from agentr1.config.env import EnvConfig, RewardConfig
from agentr1.config.evaluate import EvaluateConfig
from agentr1.config.merge import merge_run, merge_section
from agentr1.config.model import ModelConfig
from agentr1.config.pretrain import PretrainConfig
from agentr1.config.report import ReportConfig
from agentr1.config.retrieval import RetrievalConfig
from agentr1.config.rollout import RolloutConfig
from agentr1.config.sft import SFTConfig
from agentr1.config.tracking import TrackingConfig
from agentr1.config.train import TrainConfig
from agentr1.config.validate import ValidateConfig

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.]{0,63}")  # a name in `runs` (never "", "a/b", ".." or "-")
REPLICA = re.compile(r"(?P<run>[^-]+)-(?P<seed>[0-9]{1,9})")  # <run>-<seed>: a run trained with one seed


def replica(run: str, seed: int) -> str:
    """The name of ``run`` trained with ``seed``: ``grpo-1``, the key of its DVC stages
    (``train@grpo-1``, ``evaluate@grpo-1``, as DVC's ``matrix`` names them), its folders
    (``<train.out_dir>/grpo-1``) and MLflow runs."""
    return f"{run}-{seed}"


class Config(_Section):
    seed: int = Field(0, ge=0)
    # the training seeds of every named run: one train@<run>-<seed> / evaluate@<run>-<seed> stage each
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)
    profile: Literal["nano", "extended", "smol", "paper", "tools", "real"] = "nano"
    data: DataConfig = DataConfig()
    validate_: ValidateConfig = Field(ValidateConfig(), alias="validate")
    retrieval: RetrievalConfig = RetrievalConfig()
    env: EnvConfig = EnvConfig()
    reward: RewardConfig = RewardConfig()
    model: ModelConfig = ModelConfig()
    rollout: RolloutConfig = RolloutConfig()
    pretrain: PretrainConfig = PretrainConfig()
    sft: SFTConfig = SFTConfig()
    # the reference cold start (stage sft_reference): keys of `sft` it overrides; null = none
    sft_reference: dict[str, Any] | None = None
    train: TrainConfig = TrainConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    report: ReportConfig = ReportConfig()
    runs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # params.yaml's runs: the one list of them
    tracking: TrackingConfig = TrackingConfig()

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)
    # the params file this config was read from (not a param: :func:`agentr1.config.load_config` sets it)
    _params_file: str = PrivateAttr("params.yaml")

    @property
    def params_file(self) -> Path:
        return Path(self._params_file)

    @property
    def lock_path(self) -> Path:
        """The ``dvc.lock`` of the pipeline this config belongs to: the one beside its params file
        (``dvc.lock`` for ``params.yaml``, ``pipelines/<name>/dvc.lock`` for a profile's own
        pipeline, :mod:`agentr1.pipelines`); its paths are relative to the project root."""
        return self.params_file.parent / "dvc.lock"

    @field_validator("seeds")
    @classmethod
    def _seed_list(cls, v: list[int]) -> list[int]:
        if any(s < 0 for s in v) or len(set(v)) != len(v):
            raise ValueError(f"seeds {v}: give distinct seeds >= 0, e.g. [0, 1, 2] (each trains every run once)")
        return v

    @field_validator("runs")
    @classmethod
    def _run_names(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, override in v.items():  # a run's name becomes a path component and a DVC stage key
            if not isinstance(name, str) or not RUN_NAME.fullmatch(name):
                raise ValueError(
                    f"run name {_clip_value(name)} is not usable as a folder and stage name: use 1-64 "
                    "letters, digits, '_' or '.', starting with a letter or digit (no '/', no '..', no "
                    "'-': it separates a run from its seed in train@<run>-<seed>)"
                )
            if isinstance(override, dict) and "seed" in override:
                raise ValueError(
                    f"runs.{name}.seed: a run trains once per seed of the top-level `seeds` list "
                    f"(train@{name}-<seed>); remove runs.{name}.seed (a seed replica is no run of its own)"
                )
        canonical: dict[str, str] = {}
        for name, override in v.items():
            key = json.dumps(override or {}, sort_keys=True, default=str)
            if key in canonical:
                raise ValueError(
                    f"runs.{name} and runs.{canonical[key]} have the same overrides, so they train the same "
                    "policy for every seed: remove one (more seeds go in the top-level `seeds` list)"
                )
            canonical[key] = name
        return v

    @model_validator(mode="after")
    def _runs_valid(self) -> Config:
        reference = self.sft_for("reference") if self.sft_reference is not None else None
        if reference is not None:
            where = {"out_dir", "report_dir"}  # what sft_reference must change; all it may not change alone
            for key in sorted(where):
                if getattr(reference, key) == getattr(self.sft, key):
                    raise ValueError(
                        f"sft_reference.{key} is sft.{key} ({getattr(self.sft, key)}): the reference cold "
                        f"start would overwrite the cold start; give it its own {key}"
                    )
            if reference.model_dump(exclude=where) == self.sft.model_dump(exclude=where):
                raise ValueError(
                    "sft_reference changes only where sft writes: stage sft_reference would train exactly "
                    f"what stage sft trains (sft.oracle_noise {self.sft.oracle_noise!r} for both; a profile "
                    "that sets sft.oracle_noise to the reference demonstrator's does this): give "
                    "sft_reference.oracle_noise a demonstrator other than sft's, or drop sft_reference"
                )
        starts = {"train": self.train.cold_start} | {
            f"runs.{n}": merge_run(self.train, o, n).cold_start for n, o in self.runs.items()
        }
        if reference is None and "reference" in starts.values():
            who = ", ".join(k for k, v in starts.items() if v == "reference")
            raise ValueError(
                f"{who} train(s) from the reference cold start (cold_start: reference), but params define no "
                "sft_reference: add it (the keys of sft the reference demonstrator changes) or use cold_start: sft"
            )
        return self

    def sft_for(self, cold_start: str = "sft") -> SFTConfig:
        """The ``sft`` section of a cold start: ``sft`` as is, or (``reference``) with the
        ``sft_reference`` overrides merged in."""
        if cold_start == "sft":
            return self.sft
        if self.sft_reference is None:
            raise ConfigError("params define no sft_reference: there is no reference cold start")
        return merge_section(self.sft, self.sft_reference, "sft_reference")

    def reference_config(self) -> Config:
        """This config as the reference cold start's SFT runs with it (``sft`` = :meth:`sft_for`
        ``("reference")``): what stage ``sft_reference`` runs the sft stage with."""
        return self.model_copy(update={"sft": self.sft_for("reference")})

    def replicas(self, run: str | None = None) -> list[str]:
        """The replica names (:func:`replica`) of ``run`` (default: of every run, run by run) for each of
        ``seeds``: the ``train@``/``evaluate@`` stages of ``dvc.yaml``'s matrix, in its order."""
        return [replica(r, s) for r in ([run] if run is not None else self.runs) for s in self.seeds]

    def split_run(self, name: str) -> tuple[str, int | None]:
        """``(run, seed)`` of a run's name as stages take it: a replica ``<run>-<seed>`` (any seed, not
        only those of ``seeds``: a user may train more) or a plain run (seed ``None``: ``train.seed``,
        else ``seed``). :class:`ConfigError` naming the runs for anything else."""
        m = REPLICA.fullmatch(name)
        run, seed = (m.group("run"), int(m.group("seed"))) if m else (name, None)
        if run not in self.runs:
            raise ConfigError(
                f"unknown run {name!r}; params define runs {sorted(self.runs)}, trained once per seed of "
                f"`seeds` {self.seeds} as <run>-<seed> (e.g. {replica(next(iter(self.runs), 'grpo'), self.seeds[0])})"
            )
        return run, seed

    def is_run(self, name: str) -> bool:
        """Whether ``name`` is a run or a replica of one (:meth:`split_run`)."""
        try:
            self.split_run(name)
        except ConfigError:
            return False
        return True

    def train_for(self, run: str | None) -> TrainConfig:
        """The ``train`` section with the named run's overrides merged in (``None`` = as is); for a
        replica ``<run>-<seed>`` (:meth:`split_run`) its ``seed`` is that seed."""
        if run is None:
            return self.train
        name, seed = self.split_run(run)
        tcfg = merge_run(self.train, self.runs[name], name)
        return tcfg if seed is None else tcfg.model_copy(update={"seed": seed})

    def for_run(self, run: str) -> Config:
        """This config as the named run (or replica) trains with it: ``train`` = :meth:`train_for`
        ``(run)`` and ``seed`` = the run's seed (a replica's, else ``train.seed``, else ``seed``).
        What a run's MLflow params show, so that runs differ in exactly what differs between them."""
        tcfg = self.train_for(run)
        return self.model_copy(update={"train": tcfg, "seed": self.seed if tcfg.seed is None else tcfg.seed})

    def run_overrides(self, name: str) -> dict[str, Any]:
        """The ``runs`` overrides of a run or replica, with the replica's seed."""
        run, seed = self.split_run(name)
        return {**self.runs[run], **({} if seed is None else {"seed": seed})}

    def section_hash(self, *names: str) -> str:
        """Stable hash of the named sections (all when none), for tags and cache keys."""
        dump = self.model_dump(mode="json", by_alias=True)
        picked = {n: dump[n] for n in names} if names else dump
        return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]
