"""ECHO's settings in SkyRL's own config: ``EchoSkyRLTrainConfig``, a ``SkyRLTrainConfig`` subclass, so λ, the
per-role coefficients and the env server are ordinary SkyRL CLI overrides::

    trainer.algorithm.policy_loss_type=echo_regular trainer.algorithm.world_model_coeff=0.05
    trainer.algorithm.world_role_coeffs={env_output:1.0,warning:0.5} trainer.algorithm.world_loss_target=warning_plus_env
    environment.skyrl_gym.openenv_echo.base_url=http://127.0.0.1:8001
    environment.skyrl_gym.openenv_echo.action_field=command

Its ``trainer.algorithm`` is ``EchoAlgorithmConfig``; its ``trainer`` accepts SkyRL's ``trainer.override_entrypoint``
key (the extension point SkyRL 0.4's ``main_base.main`` dispatches on before its strict parse); its
``environment.skyrl_gym.openenv_echo`` is the ``env_config`` SkyRL's generator hands the ``openenv_echo`` env
(``OpenEnvEchoEnvConfig``). ``validate_echo_cfg`` runs SkyRL's ``validate_cfg`` and, for an ``echo_<base>`` loss,
the same checks on the base loss (``validate_cfg`` keys some on literal loss names, e.g. clip_cov/kl_cov under
off-policy correction). The entrypoint that uses it is ``openenv_echo.adapters.skyrl.entry``.
"""

# no `from __future__ import annotations`: SkyRL builds nested configs from the dataclass field types

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl.train.config.config import (
    AlgorithmConfig,
    BaseConfig,
    EnvironmentConfig,
    SkyRLGymConfig,
    SkyRLTrainConfig,
    TrainerConfig,
)

from ...objective import EchoConfig
from ...roles import Role
from .gym import ENV_ID
from .loss import base_loss, register_echo_policy_loss


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
    wm_filter_min_correct_pct: float | None = None
    """θ of the correctness filter (world term only): per prompt group keep every correct rollout and at most
    ``floor(n_correct·(1-θ)/θ)`` incorrect ones; correct = the response's reward > 0 (SkyRL's pass@n rule)."""
    wm_filter_min_valid_tool_call_pct: float | None = None
    """Refused (``config_from_skyrl``): SkyRL's generator output carries no per-turn tool-call validity."""
    wm_filter_min_parse_clean_pct: float | None = None
    """Refused (``config_from_skyrl``): SkyRL's generator output carries no per-turn parse errors."""
    keep_zero_variance_env: bool = True
    """False: a prompt group whose rewards are all equal gets no world term (its policy term is SkyRL's)."""


@dataclass
class EchoTrainerConfig(TrainerConfig):  # type: ignore[misc]
    """SkyRL's ``TrainerConfig`` with ``EchoAlgorithmConfig`` and SkyRL's ``override_entrypoint`` key."""

    algorithm: EchoAlgorithmConfig = field(default_factory=EchoAlgorithmConfig)
    override_entrypoint: str = ""
    """The module ``skyrl.train.entrypoints.main_base.main`` hands the command line to (SkyRL 0.4)."""


@dataclass
class OpenEnvEchoEnvConfig(BaseConfig):  # type: ignore[misc]
    """The ``env_config`` of the ``openenv_echo`` skyrl-gym env (``openenv_echo.adapters.skyrl.gym.OpenEnvTextEnv``)."""

    base_url: str = ""
    """The env server's URL (an openenv-echo or OpenEnv server)."""
    action_field: str = ""
    """The action's text field, e.g. ``command`` for the terminal env, ``message`` for echo."""
    observation_role: str = "tool"
    """The chat role of observation messages."""
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``openenv_echo.client.EnvClient``."""


@dataclass
class EchoSkyRLGymConfig(SkyRLGymConfig):  # type: ignore[misc]
    """SkyRL's ``SkyRLGymConfig`` plus the ``openenv_echo`` env's config (SkyRL looks it up by env class name)."""

    openenv_echo: OpenEnvEchoEnvConfig = field(default_factory=OpenEnvEchoEnvConfig)


@dataclass
class EchoEnvironmentConfig(EnvironmentConfig):  # type: ignore[misc]
    """SkyRL's ``EnvironmentConfig`` whose default env class is ``openenv_echo``."""

    env_class: str = ENV_ID
    skyrl_gym: EchoSkyRLGymConfig = field(default_factory=EchoSkyRLGymConfig)


@dataclass
class EchoSkyRLTrainConfig(SkyRLTrainConfig):  # type: ignore[misc]
    """``SkyRLTrainConfig`` with ECHO's settings: ``EchoSkyRLTrainConfig.from_cli_overrides(sys.argv[1:])``."""

    trainer: EchoTrainerConfig = field(default_factory=EchoTrainerConfig)
    environment: EchoEnvironmentConfig = field(default_factory=EchoEnvironmentConfig)


UNSUPPORTED_FILTERS = {
    "wm_filter_min_valid_tool_call_pct": "per-turn tool-call validity",
    "wm_filter_min_parse_clean_pct": "per-turn parse errors and format violations",
}
"""The reference implementation's rollout filters the SkyRL seam refuses, and the statistic SkyRL does not carry."""


def config_from_skyrl(algorithm: Mapping[str, Any]) -> EchoConfig:
    """An ``EchoConfig`` from the reference implementation's algorithm settings (``world_model_coeff``,
    ``world_loss_normalization`` ∈ {selected_tokens, full_observation_tokens}, ``loss_reduction``,
    ``max_seq_len``, ``world_loss_target``, ``world_model_coeff_schedule`` and its fields,
    ``wm_filter_min_correct_pct``, ``keep_zero_variance_env``). The filters on statistics SkyRL's generator output
    does not hold (``UNSUPPORTED_FILTERS``) are refused with a ValueError, never ignored."""
    a = dict(algorithm)
    for key, stat in UNSUPPORTED_FILTERS.items():
        if a.get(key) is not None:
            raise ValueError(
                f"{key}={a[key]!r} is not supported on SkyRL: its generator output carries no {stat}; "
                "unset it (wm_filter_min_correct_pct and keep_zero_variance_env=false are supported)"
            )
    reduction = a.get("loss_reduction", "token_mean")
    norm = {"token_mean": "token_mean", "sequence_mean": "sequence_mean", "seq_mean_token_sum_norm": "constant"}.get(
        reduction
    )
    if norm is None:
        raise ValueError(f"unknown SkyRL loss_reduction {reduction!r}")
    seq = {"selected_tokens": "selected", "full_observation_tokens": "full_observation"}[
        a.get("world_loss_normalization", "selected_tokens")
    ]
    schedule: dict[str, Any] = {"kind": "constant"}
    kind = a.get("world_model_coeff_schedule", "constant")
    if kind == "linear_decay":
        schedule = {
            "kind": "linear_decay",
            "end_coeff": a["world_model_coeff_end"],
            "decay_steps": a["total_training_steps"],
        }
    elif kind == "step_decay":
        schedule = {
            "kind": "step",
            "boundaries": list(a["world_model_coeff_steps"]),
            "values": list(a["world_model_coeff_values"]),
        }
    return EchoConfig.model_validate(  # validated (strings to literals, dicts to sub-models) like the constructor
        {
            "world_model_coeff": float(a.get("world_model_coeff", 0.0)),
            "world_loss_target": a.get("world_loss_target", "env_only"),  # the reference's words are ours
            "normalization": norm,
            "sequence_denominator": seq,
            "constant_denominator": a.get("max_seq_len") if norm == "constant" else None,
            "schedule": schedule,
            "filters": {"min_correct_share": a.get("wm_filter_min_correct_pct")},
            "keep_zero_variance_env": bool(a.get("keep_zero_variance_env", True)),
            "env_temperature": "rollout",  # SkyRL scores the log-probs at the sampling temperature
        }
    )


def echo_config(algorithm: Any) -> EchoConfig:
    """The ``EchoConfig`` of an ``EchoAlgorithmConfig`` (SkyRL's ``loss_reduction`` and ``max_seq_len``
    give the normalization, as in the reference implementation; the rollout's temperature is the env's; the
    rollout filters are ``config_from_skyrl``'s, unsupported ones refused)."""
    names = (
        "world_model_coeff",
        "world_loss_target",
        "world_loss_normalization",
        "loss_reduction",
        "max_seq_len",
        "wm_filter_min_correct_pct",
        "wm_filter_min_valid_tool_call_pct",
        "wm_filter_min_parse_clean_pct",
        "keep_zero_variance_env",
    )
    settings = {k: getattr(algorithm, k) for k in names}
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
    "UNSUPPORTED_FILTERS",
    "EchoAlgorithmConfig",
    "EchoEnvironmentConfig",
    "EchoSkyRLGymConfig",
    "EchoSkyRLTrainConfig",
    "EchoTrainerConfig",
    "OpenEnvEchoEnvConfig",
    "config_from_skyrl",
    "echo_config",
    "validate_echo_cfg",
]
