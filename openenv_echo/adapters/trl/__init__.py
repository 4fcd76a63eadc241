"""TRL adapter (one folder): ``EchoGRPOTrainer`` (``trainer``: the ``GRPOTrainer`` subclass with the loss override and
the world-term filters), the rollout plumbing it reads (``rollouts``: batch keys, ``rollout_output``,
``env_rollout_func``) and the hidden-state capture for the T = 1 world term (``hidden``). ``pip install
openenv-echo[trl]``."""

from __future__ import annotations

from .rollouts import (
    ENV_KEEP_KEY,
    OBS_COUNT_KEY,
    RESET_KEY,
    ROLE_KEY,
    STATS_KEYS,
    VERIFIER_FREE_KEY,
    env_rollout_func,
    rollout_output,
    rollouts_output,
    split_at_first_action,
)
from .trainer import EchoGRPOTrainer

__all__ = [
    "ENV_KEEP_KEY",
    "OBS_COUNT_KEY",
    "RESET_KEY",
    "ROLE_KEY",
    "STATS_KEYS",
    "VERIFIER_FREE_KEY",
    "EchoGRPOTrainer",
    "env_rollout_func",
    "rollout_output",
    "rollouts_output",
    "split_at_first_action",
]
