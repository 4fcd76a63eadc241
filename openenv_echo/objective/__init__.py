"""The ECHO objective (trainer-free core, torch only).

``L = L_policy(action tokens) + λ · CE(selected observation tokens)`` from the same per-token log-probs. Trainer
adapters live in :mod:`openenv_echo.adapters` and are imported lazily; importing this package never imports trl,
torchrl, tinker or skyrl. The normative description is ``rfcs/0004-echo-objective.md``.
"""

from .advantages import AdvantageEstimator, group_advantages, group_index, zero_variance_groups
from .batch import EchoBatch
from .config import (
    TARGET_ROLES,
    CoeffSchedule,
    EchoConfig,
    PolicyLossConfig,
    RolloutFilterConfig,
)
from .filters import FILTER_METRIC_KEYS, FilterResult, RolloutStats, env_keep_mask, max_incorrect_kept, world_filter
from .logprobs import token_logps
from .loss import (
    METRIC_KEYS,
    EchoLossOutput,
    Selection,
    connected_zero,
    echo_loss,
    echo_metrics,
    local_denominators,
    policy_loss,
    policy_token_weights,
    select_tokens,
    weighted_nll,
    world_loss,
    world_term,
    world_token_weights,
)
from .normalization import Denominators, all_reduce_denominators, sum_denominators
from .selection import action_mask, env_token_coeffs, observation_counts, role_counts, target_positions

__all__ = [
    "FILTER_METRIC_KEYS",
    "METRIC_KEYS",
    "TARGET_ROLES",
    "AdvantageEstimator",
    "CoeffSchedule",
    "Denominators",
    "EchoBatch",
    "EchoConfig",
    "EchoLossOutput",
    "FilterResult",
    "PolicyLossConfig",
    "RolloutFilterConfig",
    "RolloutStats",
    "Selection",
    "action_mask",
    "all_reduce_denominators",
    "connected_zero",
    "echo_loss",
    "echo_metrics",
    "env_keep_mask",
    "env_token_coeffs",
    "group_advantages",
    "group_index",
    "local_denominators",
    "max_incorrect_kept",
    "observation_counts",
    "policy_loss",
    "policy_token_weights",
    "role_counts",
    "select_tokens",
    "sum_denominators",
    "target_positions",
    "token_logps",
    "weighted_nll",
    "world_filter",
    "world_loss",
    "world_term",
    "world_token_weights",
    "zero_variance_groups",
]
