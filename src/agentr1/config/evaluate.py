"""``evaluate``: greedy and sampled evaluation of the policies, with bootstrap intervals."""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator

from agentr1.config.base import _distinct_splits, _Section


class BootstrapConfig(_Section):
    """Percentile bootstrap of a mean (``agentr1.eval.metrics``): ``samples`` resamples of the
    per-question scores, a central ``ci`` interval (0.95 = the 2.5th to 97.5th percentile)."""

    samples: int = Field(1000, ge=100)
    ci: float = Field(0.95, gt=0, lt=1)


class SamplingEvalConfig(_Section):
    """Sampled evaluation of ``policies`` (stage ``evaluate``): ``k`` rollouts per question at
    ``rollout.temperature`` (the RL setting) - the mean EM of the samples and pass@k, per split
    and question type: how much a policy can sample that greedy decoding misses (RL's headroom)."""

    k: int = Field(4, ge=1, le=64)
    policies: list[str] = Field(default_factory=lambda: ["cold_start", "cold_start_reference"])


class EvaluateConfig(_Section):
    """Stage ``evaluate@<policy>`` (``agentr1.stages.evaluate``): greedy rollouts of one policy on each
    split of ``splits`` (the first ``max_examples`` questions of each, null = all),
    ``batch_size`` prompts per backend call, per-question scores and bootstrap CIs into
    ``<out_dir>/<policy>/``. ``register``: log trained policies (RL runs and the cold start) to
    the MLflow registry and apply the promotion gate (``tracking.gate_metric``).
    ``num_threads``: torch CPU threads (null = torch's default; see ``SFTConfig``). ``sampling``:
    sampled EM and pass@k of some policies (:class:`SamplingEvalConfig`)."""

    splits: list[str] = Field(default_factory=lambda: ["test", "ood"])
    max_examples: int | None = Field(300, ge=1)
    sampling: SamplingEvalConfig = SamplingEvalConfig()
    batch_size: int = Field(64, ge=1)
    bootstrap: BootstrapConfig = BootstrapConfig()
    out_dir: str = "data/eval"
    register_: bool = Field(True, alias="register")  # "register" would shadow BaseModel.register
    num_threads: int | None = Field(2, ge=1)

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, v: list[str]) -> list[str]:
        return _distinct_splits(v)
