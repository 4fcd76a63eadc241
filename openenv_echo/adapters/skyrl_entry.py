"""ECHO's settings in SkyRL's own config: an ``AlgorithmConfig`` subclass, so λ and the per-role coefficients are
ordinary SkyRL CLI overrides::

    trainer.algorithm.policy_loss_type=echo_regular trainer.algorithm.world_model_coeff=0.05
    trainer.algorithm.world_role_coeffs={env_output:1.0,warning:0.5} trainer.algorithm.world_loss_target=warning_plus_env

``EchoSkyRLTrainConfig`` is SkyRL's ``make_config`` over ``EchoTrainerConfig`` (whose ``algorithm`` is
``EchoAlgorithmConfig``, and which accepts SkyRL's ``trainer.override_entrypoint`` key, the extension point
SkyRL 0.4's ``main_base.main`` dispatches on before its strict parse). ``validate_echo_cfg`` runs SkyRL's
``validate_cfg`` and, for an ``echo_<base>`` loss, the same checks on the base loss (``validate_cfg`` keys some on
literal loss names, e.g. clip_cov/kl_cov under off-policy correction).
"""

# no `from __future__ import annotations`: SkyRL builds nested configs from the dataclass field types

import copy
from dataclasses import dataclass, field
from typing import Any

from skyrl.train.config.config import AlgorithmConfig, TrainerConfig, make_config

from ..objective import EchoConfig
from ..roles import Role
from .skyrl import config_from_skyrl
from .skyrl_loss import base_loss, register_echo_policy_loss


@dataclass
class EchoAlgorithmConfig(AlgorithmConfig):  # type: ignore[misc]
    """SkyRL's ``AlgorithmConfig`` plus ECHO's settings (names as in the reference implementation)."""

    world_model_coeff: float = 0.0
    """λ: weight of the world-model cross-entropy on the selected observation tokens (0 = SkyRL's loss alone)."""
    world_loss_target: str = "env_only"
    """Which observation roles are world targets: ``env_only`` or ``warning_plus_env`` (RFC 0004 §1.1)."""
    world_role_coeffs: dict[str, float] = field(default_factory=dict)
    """Per-role multipliers of λ for the selected roles, e.g. ``{env_output: 1.0, warning: 0.5}`` (default 1.0)."""
    world_loss_normalization: str = "selected_tokens"
    """``sequence_mean`` only: ``selected_tokens`` (n_i) or ``full_observation_tokens`` (|O_i|, the paper's |O|)."""


@dataclass
class EchoTrainerConfig(TrainerConfig):  # type: ignore[misc]
    """SkyRL's ``TrainerConfig`` with ``EchoAlgorithmConfig`` and SkyRL's ``override_entrypoint`` key."""

    algorithm: EchoAlgorithmConfig = field(default_factory=EchoAlgorithmConfig)
    override_entrypoint: str = ""
    """The module ``skyrl.train.entrypoints.main_base.main`` hands the command line to (SkyRL 0.4)."""


EchoSkyRLTrainConfig = make_config(trainer_cls=EchoTrainerConfig)
"""``SkyRLTrainConfig`` with ECHO's settings: ``EchoSkyRLTrainConfig.from_cli_overrides(sys.argv[1:])``."""


def echo_config(algorithm: Any) -> EchoConfig:
    """The ``EchoConfig`` of an ``EchoAlgorithmConfig`` (SkyRL's ``loss_reduction`` and ``max_seq_len``
    give the normalization, as in the reference implementation; the rollout's temperature is the env's)."""
    settings = {
        "world_model_coeff": algorithm.world_model_coeff,
        "world_loss_target": algorithm.world_loss_target,
        "world_loss_normalization": algorithm.world_loss_normalization,
        "loss_reduction": algorithm.loss_reduction,
        "max_seq_len": algorithm.max_seq_len,
    }
    cfg = config_from_skyrl(settings)
    if algorithm.world_role_coeffs:
        coeffs = {Role(k): float(v) for k, v in dict(algorithm.world_role_coeffs).items()}
        cfg = EchoConfig.model_validate({**cfg.model_dump(), "role_coeffs": coeffs})
    return cfg


def validate_echo_cfg(cfg: Any) -> EchoConfig:
    """SkyRL's ``validate_cfg`` on ``cfg``, then on a copy whose loss is the ECHO loss's base (so every check SkyRL
    keys on a loss name sees the loss that actually runs), then ECHO's own settings; returns the EchoConfig.
    Registers the ``echo_<base>`` loss named in the config first (SkyRL checks that it is registered)."""
    from skyrl.train.utils.utils import validate_cfg

    name = str(cfg.trainer.algorithm.policy_loss_type)
    if name.startswith("echo_"):
        register_echo_policy_loss(name.removeprefix("echo_"), name)
    validate_cfg(cfg)
    base = base_loss(name)
    if base != name:
        view = copy.deepcopy(cfg)
        view.trainer.algorithm.policy_loss_type = base
        validate_cfg(view)
        if cfg.trainer.max_tokens_per_microbatch > 0:
            raise ValueError(
                f"{name} needs sample-based micro-batching (trainer.max_tokens_per_microbatch <= 0): the world weights "
                "follow the training batch's rows"
            )
    return echo_config(cfg.trainer.algorithm)


__all__ = [
    "EchoAlgorithmConfig",
    "EchoSkyRLTrainConfig",
    "EchoTrainerConfig",
    "echo_config",
    "validate_echo_cfg",
]
