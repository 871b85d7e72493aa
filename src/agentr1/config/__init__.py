"""Typed configuration: ``params.yaml`` -> validated pydantic objects.

This package and ``params.yaml`` are the only places where defaults live. Every stage reads its
section through :func:`load_config`. Unknown keys, wrong types and impossible values fail *before
any work* with a :class:`ConfigError` whose message names the key path (``data.synthetic.
questions.train``) and what is allowed there. A field that names a plug-in (``train.estimator``,
``train.policy_loss``, ``train.kl.estimator``, ``env.format``, ``env.tools``, ``reward.metric``,
``data.real.sources[].dataset``, ``rollout.backend``, ``retrieval.backend``)
must name an entry of its registry in :mod:`agentr1.registry`, which answers without importing
the implementations that import torch.

One module per params section (``data``, ``validate``, ``retrieval``, ``env`` with ``reward``
(each tool's ``env.<tool>`` options model lives in the tool's module), ``model``, ``rollout``,
``pretrain``, ``sft``, ``train``, ``evaluate``, ``report``, ``tracking``), over ``base`` (what every section shares and the error
helpers); ``root`` is the whole file (:class:`Config`), ``merge`` the dotted keys and merges of
params mappings, ``load`` reading a file with its ``--set`` overrides. The names below are the
public API.
"""

from agentr1.config.base import SPLITS, ConfigError
from agentr1.config.data import (
    DataConfig,
    HopRange,
    RealConfig,
    RealSource,
    SmallRange,
    SplitCounts,
    SplitRatios,
    SyntheticConfig,
    ToolQuestionsConfig,
    TypeMix,
)
from agentr1.config.env import EnvConfig, ProcessRewardConfig, RewardConfig
from agentr1.config.evaluate import BootstrapConfig, EvaluateConfig, SamplingEvalConfig
from agentr1.config.load import (
    DEFAULT_PARAMS,
    apply_overrides,
    config_from_dict,
    load_config,
    parse_set,
    parse_sets,
    read_params,
    read_params_text,
    set_override,
)
from agentr1.config.merge import deep_merge, flatten, merge_run
from agentr1.config.model import ModelConfig, ScratchModelConfig
from agentr1.config.pretrain import PretrainConfig, ReadingGateConfig
from agentr1.config.report import ReportConfig
from agentr1.config.retrieval import BM25Config, DenseConfig, RetrievalConfig, RetrievalReportConfig, ServerConfig
from agentr1.config.rollout import RolloutConfig, VLLMConfig
from agentr1.config.root import Config
from agentr1.config.sft import CopyGateConfig, FreshDemosConfig, SFTConfig
from agentr1.config.tracking import TrackingConfig
from agentr1.config.train import (
    CheckpointConfig,
    CollapseConfig,
    CriticConfig,
    DevEvalConfig,
    DistributedConfig,
    FilterGroupsConfig,
    FreshWorldsConfig,
    GiGPOConfig,
    KLConfig,
    OffPolicyConfig,
    TrainConfig,
)
from agentr1.config.validate import ValidateConfig

__all__ = [
    "BM25Config",
    "BootstrapConfig",
    "CheckpointConfig",
    "CollapseConfig",
    "Config",
    "ConfigError",
    "CopyGateConfig",
    "CriticConfig",
    "DEFAULT_PARAMS",
    "DataConfig",
    "DenseConfig",
    "DevEvalConfig",
    "DistributedConfig",
    "EnvConfig",
    "EvaluateConfig",
    "FilterGroupsConfig",
    "FreshDemosConfig",
    "FreshWorldsConfig",
    "GiGPOConfig",
    "HopRange",
    "KLConfig",
    "ModelConfig",
    "OffPolicyConfig",
    "PretrainConfig",
    "ProcessRewardConfig",
    "ReadingGateConfig",
    "RealConfig",
    "RealSource",
    "ReportConfig",
    "RetrievalConfig",
    "RetrievalReportConfig",
    "RewardConfig",
    "RolloutConfig",
    "SFTConfig",
    "SPLITS",
    "SamplingEvalConfig",
    "ScratchModelConfig",
    "ServerConfig",
    "SmallRange",
    "SplitCounts",
    "SplitRatios",
    "SyntheticConfig",
    "ToolQuestionsConfig",
    "TrackingConfig",
    "TrainConfig",
    "TypeMix",
    "VLLMConfig",
    "ValidateConfig",
    "apply_overrides",
    "config_from_dict",
    "deep_merge",
    "flatten",
    "load_config",
    "merge_run",
    "parse_set",
    "parse_sets",
    "read_params",
    "read_params_text",
    "set_override",
]
