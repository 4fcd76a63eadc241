"""EchoConfig validation and the λ schedules."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from openenv_echo.objective import CoeffSchedule, EchoConfig, PolicyLossConfig, RolloutFilterConfig
from openenv_echo.roles import Role


def test_defaults_are_vanilla_env_only_token_mean() -> None:
    cfg = EchoConfig()
    assert cfg.world_model_coeff == 0.0
    assert cfg.world_loss_target == "env_only"
    assert cfg.normalization == "token_mean"
    assert cfg.keep_zero_variance_env is True
    assert cfg.env_temperature == "one"
    assert cfg.target_roles == {Role.ENV_OUTPUT}
    assert cfg.coeff_at(0) == 0.0 and cfg.coeff_at(1000) == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"world_model_coeff": -0.1}, "greater than or equal"),
        ({"world_model_coeff": float("nan")}, "greater than or equal|finite"),
        ({"world_model_coeff": float("inf")}, "finite"),
        ({"world_loss_target": "everything"}, "world_loss_target"),
        ({"normalization": "sum"}, "normalization"),
        ({"normalization": "constant"}, "constant_denominator"),
        ({"role_coeffs": {"warning": 0.5}}, "does not select"),
        ({"role_coeffs": {"action": 0.5}, "world_loss_target": "full_observation"}, "action role"),
        ({"world_loss_target": "all"}, "ambiguous"),
        ({"include_pre_action_observations": True}, "Extra inputs"),
        ({"role_coeffs": {"env_output": -1.0}}, ">= 0"),
        ({"role_coeffs": {"speaker": 1.0}}, "role_coeffs"),
        ({"verifier_free": True}, "trains nothing"),
        ({"unknown_knob": 1}, "Extra inputs"),
        ({"filters": {"min_correct_share": 1.5}}, "less than or equal"),
        ({"filters": {"min_valid_tool_call_share": -0.1}}, "greater than or equal"),
    ],
)
def test_bad_configs_raise_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        EchoConfig(**kwargs)


def test_role_coeffs_for_selected_roles() -> None:
    cfg = EchoConfig(world_model_coeff=0.1, world_loss_target="warning_plus_env", role_coeffs={"warning": 0.25})
    assert cfg.role_coeff(Role.ENV_OUTPUT) == 1.0
    assert cfg.role_coeff(Role.WARNING) == 0.25
    assert cfg.role_coeff(Role.CONTEXT) == 0.0
    assert cfg.role_coeff(Role.ACTION) == 0.0
    assert EchoConfig(world_loss_target="full_observation").target_roles == {
        Role.ENV_OUTPUT,
        Role.WARNING,
        Role.CONTEXT,
    }


def test_policy_config_validation() -> None:
    with pytest.raises(ValidationError, match="constant_denominator"):
        PolicyLossConfig(normalization="constant")
    with pytest.raises(ValidationError):
        PolicyLossConfig(clip_eps_low=1.0)
    assert PolicyLossConfig(normalization="constant", constant_denominator=64).constant_denominator == 64


def test_constant_schedule() -> None:
    cfg = EchoConfig(world_model_coeff=0.05)
    assert [cfg.coeff_at(s) for s in (0, 1, 10_000)] == [0.05, 0.05, 0.05]
    with pytest.raises(ValueError, match="step must be"):
        cfg.coeff_at(-1)


def test_linear_decay_schedule() -> None:
    cfg = EchoConfig(
        world_model_coeff=0.1,
        schedule=CoeffSchedule(kind="linear_decay", end_coeff=0.0, decay_steps=10, start_step=5),
    )
    assert cfg.coeff_at(0) == pytest.approx(0.1)
    assert cfg.coeff_at(5) == pytest.approx(0.1)
    assert cfg.coeff_at(10) == pytest.approx(0.05)
    assert cfg.coeff_at(15) == pytest.approx(0.0)
    assert cfg.coeff_at(100) == pytest.approx(0.0)


def test_step_schedule() -> None:
    cfg = EchoConfig(
        world_model_coeff=0.05, schedule=CoeffSchedule(kind="step", boundaries=[10, 20], values=[0.01, 0.0])
    )
    assert [cfg.coeff_at(s) for s in (0, 9, 10, 19, 20, 99)] == [0.05, 0.05, 0.01, 0.01, 0.0, 0.0]


def test_schedule_can_start_from_zero_when_verifier_free() -> None:
    # λ₀ = 0 growing to a positive value is legitimate even verifier-free
    cfg = EchoConfig(
        world_model_coeff=0.0,
        verifier_free=True,
        schedule=CoeffSchedule(kind="linear_decay", end_coeff=0.1, decay_steps=4),
    )
    assert cfg.coeff_at(4) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kind": "linear_decay"}, "end_coeff and decay_steps"),
        ({"kind": "linear_decay", "end_coeff": 0.0, "decay_steps": 0}, "greater than 0"),
        ({"kind": "step", "boundaries": [5], "values": []}, "same non-zero length"),
        ({"kind": "step", "boundaries": [5, 5], "values": [0.1, 0.2]}, "strictly increasing"),
        ({"kind": "step", "boundaries": [5], "values": [-0.1]}, ">= 0"),
        ({"kind": "constant", "values": [0.1]}, "takes no"),
    ],
)
def test_bad_schedules(kwargs: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        CoeffSchedule(**kwargs)


def test_filter_config_active() -> None:
    assert not RolloutFilterConfig().active
    assert RolloutFilterConfig(min_correct_share=0.0).active


def test_config_is_frozen_and_round_trips_json() -> None:
    cfg = EchoConfig(world_model_coeff=0.05, normalization="sequence_mean", sequence_denominator="full_observation")
    with pytest.raises(ValidationError):
        cfg.world_model_coeff = 1.0  # type: ignore[misc]
    assert EchoConfig.model_validate_json(cfg.model_dump_json()) == cfg
