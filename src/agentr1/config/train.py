"""``train``: the RL trainer (estimator, policy loss, KL, critic, dev evaluation, checkpoints,
collapse guard, distribution, dynamic sampling)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agentr1.config.base import EstimatorName, KLEstimatorName, PolicyLossName, _Section
from agentr1.registry import ESTIMATORS

AGG = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


class KLConfig(_Section):
    """KL to the frozen start policy (the reference): ``mode`` ``loss`` adds ``coef * agg(kl)`` to
    the policy loss (GRPO style), ``reward`` subtracts ``coef * kl`` from the token rewards before
    the advantage estimator (PPO style), ``none`` skips the reference model entirely. ``coef`` within
    0..10 (verl's ``kl_coef`` is ~0.001; above 10 the KL term swamps any reward of magnitude <= 1)."""

    mode: Literal["none", "loss", "reward"] = "loss"
    coef: float = Field(0.001, ge=0, le=10)
    estimator: KLEstimatorName = "k3"


class CriticConfig(_Section):
    """The critic of ``estimator: gae`` (``agentr1.rl.critic``): a value head on ``model`` =
    ``policy`` (a copy of the start policy's backbone) or a checkpoint directory / hub id of a
    (smaller) model sharing the tokenizer. ``warmup_steps``: first steps update the critic only.
    ``value_clip``: PPO value clipping range (null = off)."""

    model: str = "policy"
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(0, ge=0)
    value_clip: float | None = Field(0.2, gt=0)


class DevEvalConfig(_Section):
    """Greedy dev EM during training every ``every`` steps (0 = off; always after the last step
    when on) on the first ``examples`` dev questions."""

    every: int = Field(4, ge=0)
    examples: int = Field(128, ge=1)


class CheckpointConfig(_Section):
    """Resumable training state (policy, critic, optimizers, schedulers, RNG, step, metrics) under
    ``<out_dir>/<run>/state`` every ``every`` steps (0 = only the start state for roll-backs)."""

    every: int = Field(4, ge=0)


class CollapseConfig(_Section):
    """Collapse guard: a non-finite loss / gradient, or a step whose mean reward falls more than
    ``reward_drop`` below the running mean of the previous ``window`` steps (null = no reward
    check) triggers ``action``: ``skip`` (no update this step), ``rollback`` (restore the last
    checkpoint, multiply the lr by ``lr_factor``; at most ``max_rollbacks`` times, then stop) or
    ``stop`` (fail the stage with the reason)."""

    action: Literal["skip", "rollback", "stop"] = "rollback"
    reward_drop: float | None = Field(0.5, gt=0)
    window: int = Field(4, ge=1)
    lr_factor: float = Field(0.5, gt=0, le=1)
    max_rollbacks: int = Field(2, ge=0)


class DistributedConfig(_Section):
    """Under ``torchrun``: process-group ``backend`` (auto = nccl on GPU, gloo on CPU) and the
    data-parallel wrapper (``ddp``; ``fsdp`` shards parameters for models that do not fit)."""

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    strategy: Literal["ddp", "fsdp"] = "ddp"


class FilterGroupsConfig(_Section):
    """Dynamic sampling (DAPO, arXiv 2503.14476): a group whose rollouts all earn the same reward
    has advantage 0 under a group baseline and teaches nothing, so with ``enabled`` it is dropped
    and more questions are rolled out to refill the batch with groups whose rewards differ, for
    at most ``max_rounds`` extra rounds of ``batch_questions`` questions each (then the batch is
    topped up with the dropped groups, in order, so its size never changes). ``enabled``: ``true``
    (every estimator), ``false``, or ``grouped`` (the default: only where the estimator's baseline
    is its group - GRPO, GiGPO, RLOO, REINFORCE++ baseline -, the estimators for which such a group
    has advantage 0; under PPO's critic or REINFORCE++'s batch baseline it still carries signal,
    and dropping it kept some seeds at the cold start: bench/RESULTS.md sections 24-25);
    :meth:`TrainConfig.filters_groups` resolves it for a run."""

    enabled: bool | Literal["grouped"] = "grouped"
    max_rounds: int = Field(2, ge=1, le=16)


class FreshWorldsConfig(_Section):
    """``train.questions: fresh`` (``agentr1.rl.sources``, synthetic data only): a new world of
    ``families`` clusters every ``every`` steps, ``questions`` questions sampled from it as the
    train split's are (types, 3-hop share, templates); ``with_corpus``: its passages are searched
    together with the dataset's corpus (the evaluation's distractors), else alone."""

    families: int = Field(24, ge=2)
    questions: int = Field(96, ge=1)
    every: int = Field(4, ge=1)
    with_corpus: bool = True


class OffPolicyConfig(_Section):
    """Off-policy correction of the policy loss (``agentr1.rl.losses.behaviour_weights``): with
    ``correction: decoupled`` each action token's loss is weighted by ``min(pi_prox / pi_behav,
    weight_cap)`` (``weight_cap`` within 1..100), the proximal policy being the recomputed
    ``old_logp`` (the PPO ratio's) and the behaviour policy the sampling-time log-probs (a rollout
    engine with other numerics, e.g. vLLM in bf16, or older weights); ``none`` trains as if the
    samples were the proximal policy's."""

    correction: Literal["none", "decoupled"] = "none"
    weight_cap: float = Field(2.0, ge=1, le=100)


class GiGPOConfig(_Section):
    """``estimator: gigpo`` (``agentr1.rl.advantages.gigpo``, ``agentr1.rl.steps.anchor_groups``).
    Each option with its default and verl-agent's name (``algorithm.gigpo.*``; docs/EXTENDING.md):

    * ``step_weight`` (1.0; ``step_advantage_w``): weight of the step advantage, within 0..100 (0 =
      GRPO; verl-agent uses it near 1, and a far larger weight only scales the step advantage
      until the update overflows).
    * ``similarity`` (1.0 = exact states; ``enable_similarity: true`` + ``similarity_thresh``): a
      turn joins a step group whose representative state has a ``difflib`` ratio >= it.
    * ``anchor`` (``context``; verl-agent's is ``observation``): the state before a turn is the
      whole context, or only the observation that precedes it.
    * ``window`` (256 tokens; null = whole states) and ``max_compare`` (8; null = no cap):
      ``similarity < 1`` compares the states' last ``window`` tokens, at most ``max_compare``
      representatives per turn, which bounds its cost per step (``bench/gigpo_similarity.py``);
      exact matching always compares whole states, at one dict lookup per turn.
    * ``episode_stats`` (``episodes``; verl-agent's default is ``steps``,
      ``compute_mean_std_cross_steps``): the episode advantage's mean / std over the group's
      episodes, or over its step rows (each episode once per turn).
    * ``mode`` (null = ``train.norm_by_std``; ``mean_norm`` | ``mean_std_norm`` as verl-agent's
      ``mode``): ``mean_norm`` subtracts the group means only, ``mean_std_norm`` also divides by
      the std (:meth:`norm_by_std`).

    ``step_advantage_w``, ``enable_similarity`` and ``similarity_thresh`` are accepted as aliases
    (written back under this project's names): an alias overrides its name at the default
    (params.yaml lists them so), and an alias beside another value of its name is refused."""

    step_weight: float = Field(1.0, ge=0, le=100)
    similarity: float = Field(1.0, gt=0, le=1)
    anchor: Literal["context", "observation"] = "context"
    window: int | None = Field(256, ge=1)
    max_compare: int | None = Field(8, ge=1)
    episode_stats: Literal["episodes", "steps"] = "episodes"
    mode: Literal["mean_norm", "mean_std_norm"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _verl_agent_names(cls, data: Any) -> Any:
        """Map verl-agent's names onto this section's (class docstring)."""
        if not isinstance(data, dict) or not {"step_advantage_w", "enable_similarity", "similarity_thresh"} & set(data):
            return data
        original, data = data, dict(data)
        # params.yaml lists step_weight and similarity at their defaults: an alias (in a run or a --set merged
        # over them) overrides a default; beside a value of its own its name is a conflict
        if "step_advantage_w" in data:
            if data.get("step_weight", 1.0) != 1.0:
                raise ValueError(
                    f"step_weight {data['step_weight']!r} and its verl-agent alias "
                    f"step_advantage_w {data['step_advantage_w']!r} both given: keep one"
                )
            data["step_weight"] = data.pop("step_advantage_w")
        if "enable_similarity" in data or "similarity_thresh" in data:
            if data.get("similarity", 1.0) != 1.0:
                raise ValueError(
                    f"similarity {data['similarity']!r} and verl-agent's enable_similarity / "
                    "similarity_thresh both given: keep one"
                )
            enable, thresh = data.pop("enable_similarity", False), data.pop("similarity_thresh", 0.95)
            if not isinstance(enable, bool):
                raise ValueError(f"train.gigpo.enable_similarity: {enable!r} is not true or false")
            if not enable and "similarity_thresh" in original:
                raise ValueError(
                    "train.gigpo.similarity_thresh is used only with enable_similarity: true (verl-agent "
                    "ignores it otherwise): set enable_similarity: true, or drop similarity_thresh"
                )
            if enable and not (isinstance(thresh, (int, float)) and not isinstance(thresh, bool) and 0 < thresh < 1):
                raise ValueError(
                    f"train.gigpo.similarity_thresh: {thresh!r} must be a number in (0, 1) with "
                    "enable_similarity: true (verl-agent's rule; 1 = exact states: enable_similarity: false)"
                )
            data["similarity"] = thresh if enable else 1.0
        return data

    def norm_by_std(self, default: bool) -> bool:
        """Whether GiGPO divides by the group std: ``mode`` when set, else ``default`` (``train.norm_by_std``)."""
        return default if self.mode is None else self.mode == "mean_std_norm"


class TrainConfig(_Section):
    """The RL trainer (stage ``train``, ``agentr1.rl.trainer``). One step: ``batch_questions``
    train questions x ``group_size`` rollouts -> rewards -> old/ref log-probs (+ values) ->
    advantages (``estimator``) -> ``ppo_epochs`` passes over ``mini_batches`` mini-batches (one
    optimizer step each, gradient accumulation over micro-batches of ``micro_batch_size``
    sequences per rank). ``loss_mask`` / ``advantage_mask``: the Agent-R1 switches
    (``agentr1.rl.masks.select_masks``). ``old_logprobs``: ``recompute`` (a forward pass of the
    rollout policy, exact) or ``rollout`` (the sampling-time ones; exact only when the rollout and
    training numerics agree, and only for action tokens). ``lr_schedule``: linear warmup over
    ``warmup_steps`` optimizer steps, then ``constant`` or ``cosine`` (to ``min_lr_ratio * lr``).
    ``entropy_coef`` and ``weight_decay`` within 0..1 (AdamW decays by ``lr * weight_decay`` per
    step). ``num_threads``: torch CPU threads per process (null = torch's default; see ``SFTConfig``).
    ``seed``: the seed of ``agentr1 train`` without a replica name (null = the top-level ``seed``);
    a replica ``train@<run>-<seed>`` trains with its own (``Config.train_for``; the top-level
    ``seeds`` list makes one per seed, and a run may not set it). ``filter_groups``: dynamic
    sampling (:class:`FilterGroupsConfig`). ``questions``: where a step's questions come from,
    the train split (``dataset``) or freshly generated worlds (``fresh``, :class:`FreshWorldsConfig`).
    ``sample_unit``: the update's rows are whole episodes (``trajectory``) or one row per turn whose
    prompt is the context before it (``step``, ``agentr1.rl.steps.step_rows``; advantages are
    computed on the episodes first). ``gigpo``: the GiGPO estimator's knobs (:class:`GiGPOConfig`).
    ``off_policy``: importance weights from the sampling policy to the proximal one (:class:`OffPolicyConfig`).
    ``cold_start``: the policy RL starts from, the cold start of stage ``sft`` or the reference
    demonstrator's of stage ``sft_reference`` (params ``sft_reference``). Named runs (``runs`` at the top level) override these
    keys."""

    steps: int = Field(16, ge=0)
    batch_questions: int = Field(8, ge=1)
    group_size: int = Field(4, ge=1)
    estimator: EstimatorName = "grpo"
    policy_loss: PolicyLossName = "ppo_clip"
    loss_mask: bool = True
    advantage_mask: bool = True
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(1.0, ge=0, le=1)
    whiten: bool = True
    norm_by_std: bool = True
    clip_low: float = Field(0.2, ge=0, lt=1)
    clip_high: float = Field(0.2, ge=0)
    dual_clip: float | None = Field(None, gt=1)
    agg_mode: AGG = "token-mean"
    old_logprobs: Literal["recompute", "rollout"] = "recompute"
    lr: float = Field(1e-4, gt=0)
    lr_schedule: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0, le=1)
    grad_clip: float = Field(1.0, ge=0)
    ppo_epochs: int = Field(1, ge=1)
    mini_batches: int = Field(2, ge=1)
    micro_batch_size: int = Field(8, ge=1)
    entropy_coef: float = Field(0.0, ge=0, le=1)
    kl: KLConfig = KLConfig()
    critic: CriticConfig = CriticConfig()
    dev: DevEvalConfig = DevEvalConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    collapse: CollapseConfig = CollapseConfig()
    distributed: DistributedConfig = DistributedConfig()
    num_threads: int | None = Field(2, ge=1)
    out_dir: str = "data/runs"
    seed: int | None = Field(None, ge=0)  # null = the top-level seed; a replica <run>-<seed> sets its own
    trace_every: int = Field(4, ge=0)  # every N steps a sample of the rollouts as MLflow traces (0 = off)
    filter_groups: FilterGroupsConfig = FilterGroupsConfig()
    questions: Literal["dataset", "fresh"] = "fresh"
    cold_start: Literal["sft", "reference"] = "sft"
    fresh: FreshWorldsConfig = FreshWorldsConfig()
    sample_unit: Literal["trajectory", "step"] = "trajectory"
    off_policy: OffPolicyConfig = OffPolicyConfig()
    gigpo: GiGPOConfig = GiGPOConfig()

    @model_validator(mode="after")
    def _trains_something(self) -> TrainConfig:
        if ESTIMATORS.spec(self.estimator).meta.get("grouped") and self.group_size < 2 and self.steps > 0:
            raise ValueError(
                f"estimator {self.estimator} compares the rollouts of one question, so group_size "
                f"{self.group_size} gives every episode advantage 0 and training would not move the "
                f"policy: set group_size >= 2 (or estimator {' / '.join(ESTIMATORS.names(grouped=False))})"
            )
        batch = self.batch_questions * self.group_size
        if batch % self.mini_batches:
            raise ValueError(
                f"mini_batches {self.mini_batches} does not divide the batch of {batch} episodes "
                f"(batch_questions x group_size): pick a divisor of {batch}"
            )
        if self.questions == "fresh" and self.fresh.questions < self.batch_questions:
            raise ValueError(
                f"train.fresh.questions ({self.fresh.questions}) < train.batch_questions "
                f"({self.batch_questions}): a fresh world must hold a step's questions; raise it"
            )
        if self.filters_groups and self.group_size < 2:
            raise ValueError(
                "train.filter_groups keeps groups whose rewards differ, which needs group_size >= 2: "
                "raise group_size or set train.filter_groups.enabled: false"
            )
        return self

    @property
    def filters_groups(self) -> bool:
        """Whether this run uses dynamic sampling: ``filter_groups.enabled`` is ``true``, or
        ``grouped`` and the estimator declares ``grouped`` (:mod:`agentr1.rl.plugins`)."""
        on = self.filter_groups.enabled
        return on is True or (on == "grouped" and bool(ESTIMATORS.spec(self.estimator).meta.get("grouped")))

    @model_validator(mode="after")
    def _logprobs_exist(self) -> TrainConfig:
        """Sampling-time log-probs exist only for action tokens (the loss mask's)."""
        if self.old_logprobs == "rollout" and not self.loss_mask:
            raise ValueError(
                "train.old_logprobs: rollout needs loss_mask: true (observation tokens have no "
                "sampling-time log-probs); use old_logprobs: recompute"
            )
        if self.off_policy.correction == "decoupled" and (self.old_logprobs != "recompute" or not self.loss_mask):
            raise ValueError(
                "train.off_policy.correction: decoupled weighs pi_prox / pi_behav with the recomputed old "
                "log-probs as pi_prox and the sampling-time ones as pi_behav, which exist only for action "
                "tokens: set train.old_logprobs: recompute and train.loss_mask: true (or correction: none)"
            )
        return self
