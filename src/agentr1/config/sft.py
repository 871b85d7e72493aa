"""``sft``: the supervised cold start on oracle trajectories and its copy gate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from agentr1.config.base import _Section

Share = Annotated[float, Field(ge=0, le=1)]


class CopyGateConfig(_Section):
    """The cold start's copy probe must reach ``start`` (the first token of a copied name) and
    ``continue`` (its continuation) teacher-forced top-1 on dev (``data/sft/metrics.json``
    ``copy.gate``; recorded, the stage does not fail on it)."""

    start: float = Field(0.90, ge=0, le=1)
    continue_: float = Field(0.95, ge=0, le=1, alias="continue")

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


class FreshDemosConfig(_Section):
    """Demonstrations over freshly generated worlds (``agentr1.data.fresh``, synthetic data only),
    besides or instead of the train split's: ``worlds`` worlds (0 = none) of ``families``
    clusters and ``questions`` questions each, sampled as the train split's are; each world's
    passages are searched alone. A world's entities occur nowhere else, so these episodes cannot
    be memorized across epochs the way a fixed set can."""

    worlds: int = Field(0, ge=0)
    families: int = Field(200, ge=2)
    questions: int = Field(800, ge=1)


class SFTConfig(_Section):
    """The supervised cold start on oracle trajectories (stage ``sft``, ``agentr1.lm.sft``).

    ``oracle_noise``: share of oracle episodes made imperfect (a wrong or redundant query, or an
    early answer with a bridge entity, uniformly) so the cold start leaves room for RL, or a share
    per kind (``{early_answer: 0.5, wrong_query: 0.05}``, summing to at most 1;
    ``agentr1.rollout.oracle``);
    ``oracle_lead_space``: write queries and answers with a space before the name (``<search>
    Ada Vell</search>``) so a name is tokenized exactly as in passage text, which makes copying
    it from an observation easier; ``train_examples``: the demonstrations, oracle episodes of the
    first distinct train questions (null = all, the default: a few hundred are memorized by a
    model without instruction tuning and do not carry its reading into the agent's format;
    bench/RESULTS.md section 12; 0 = none, with ``fresh`` demonstrations only); ``fresh``: more
    demonstrations over freshly generated worlds (:class:`FreshDemosConfig`);
    ``steps``/``batch_size``/``lr``/``warmup_steps``/``weight_decay``/``grad_clip``
    (0 = off): AdamW on the NLL of ``loss_on`` (``actions``: the policy's tokens; ``response``:
    every response token, observations included), from the base policy ``pretrain.out_dir``;
    ``micro_batch_size``: sequences per forward/backward, the gradient accumulated over the batch
    (null = the whole batch at once; a pretrained model's activations at batch 8 x 600 tokens
    are most of its memory: ``bench/smol_memory.py``);
    ``out_dir``: the cold-start checkpoint; ``num_threads``: torch CPU threads for the stage
    (null = torch's default). The default 2 fits the embedded 2-core machine, where ``dvc
    repro`` runs one stage at a time: SFT steps 1.6x and greedy evaluation 1.5x faster than with
    1 thread, measured on an idle machine; set 1 when other processes share the cores (then 1
    was 2-4x faster than 2). ``enabled: false`` skips training and saves the base policy as
    is. ``copy_gate``: :class:`CopyGateConfig`."""

    enabled: bool = True
    loss_on: Literal["actions", "response"] = "actions"
    copy_gate: CopyGateConfig = CopyGateConfig()
    oracle_noise: Share | dict[Literal["wrong_query", "redundant_query", "early_answer"], Share] = {"early_answer": 0.6}
    oracle_lead_space: bool = True
    train_examples: int | None = Field(None, ge=0)
    fresh: FreshDemosConfig = FreshDemosConfig()
    steps: int = Field(600, ge=0)
    batch_size: int = Field(16, ge=1)
    micro_batch_size: int | None = Field(None, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(15, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    grad_clip: float = Field(1.0, ge=0)
    log_every: int = Field(10, ge=1)
    out_dir: str = "data/models/sft"
    report_dir: str = "data/sft"
    num_threads: int | None = Field(2, ge=1)

    @model_validator(mode="after")
    def _demonstrates_something(self) -> SFTConfig:
        if self.train_examples == 0 and self.fresh.worlds == 0 and self.enabled and self.steps > 0:
            raise ValueError(
                "sft.train_examples is 0 and sft.fresh.worlds is 0: there is no demonstration to train "
                "on; set train_examples (null = every train question) or fresh.worlds"
            )
        return self

    @field_validator("oracle_noise")
    @classmethod
    def _noise_shares(cls, v):
        if isinstance(v, dict) and sum(v.values()) > 1 + 1e-9:
            raise ValueError(f"the per-kind shares sum to {sum(v.values()):g}; they must sum to at most 1")
        return v
