"""What the built-in advantage and KL estimators declare about themselves, readable without torch.

``pyproject.toml``'s entry points of ``agentr1.estimators`` and ``agentr1.kl_estimators`` name
these :class:`~agentr1.registry.Plugin` declarations rather than the functions, because the
functions live in torch modules (:mod:`agentr1.rl.advantages`, :mod:`agentr1.rl.losses`) and their
metadata is read where torch must not be imported: config validation checks that a grouped
estimator gets ``group_size >= 2``, the report names a method by its estimator's ``label``. An
entry without metadata (a policy loss, a Schulman KL estimator under its own name) names its
function directly. ``tests/test_registry.py`` checks each declaration against its function.
"""

from __future__ import annotations

from agentr1.registry import Plugin

_ADV = "agentr1.rl.advantages"
_LOSS = "agentr1.rl.losses"

# advantage estimators: needs_values = a critic; grouped = compares the rollouts of one question;
# stepwise = also compares turns that start from the same state (agentr1.rl.steps)
GAE = Plugin(f"{_ADV}:gae", needs_values=True, label="PPO")
GRPO = Plugin(f"{_ADV}:grpo", grouped=True, label="GRPO")
GIGPO = Plugin(f"{_ADV}:gigpo", grouped=True, stepwise=True, label="GiGPO")
REINFORCE_PP = Plugin(f"{_ADV}:reinforce_pp", label="REINFORCE++")
REINFORCE_PP_BASELINE = Plugin(f"{_ADV}:reinforce_pp_baseline", grouped=True, label="REINFORCE++ baseline")
RLOO = Plugin(f"{_ADV}:rloo", grouped=True, label="RLOO")

# verl's names of the Schulman KL estimators
KL = Plugin(f"{_LOSS}:kl_k1", alias_of="k1")
MSE = Plugin(f"{_LOSS}:kl_k2", alias_of="k2")
LOW_VAR_KL = Plugin(f"{_LOSS}:kl_k3", alias_of="k3")
