"""Token selection from role ids: token 0, padding, first action, targets and |O|."""

from __future__ import annotations

import pytest
import torch

from openenv_echo.objective import (
    EchoBatch,
    EchoConfig,
    action_mask,
    env_token_coeffs,
    observation_counts,
    role_counts,
    target_positions,
)
from openenv_echo.roles import Role

from .helpers import A, C, E, P, W, roles, sample_role_ids


def test_first_real_token_is_never_a_target_even_after_left_padding() -> None:
    rid = roles([E, A, E], [P, P, E, A, E], [A, A, E])
    valid = target_positions(rid)
    assert not valid[0, 0] and not valid[1, 2] and not valid[2, 0]
    assert not valid[1, :2].any()  # padding
    # an env/action token at a row start is neither an env nor a policy target
    cfg = EchoConfig(world_model_coeff=1.0, include_pre_action_observations=True)
    assert env_token_coeffs(rid, cfg)[:, 0].eq(0).all()
    assert env_token_coeffs(rid, cfg)[1, 2] == 0
    assert not action_mask(rid)[2, 0]


def test_completion_slices_keep_their_first_token() -> None:
    rid = roles([A, A, E, E, A])
    assert target_positions(rid, includes_sequence_start=False)[0, 0]
    assert action_mask(rid, includes_sequence_start=False)[0, 0]


@pytest.mark.parametrize(
    "target, expected_roles",
    [
        ("env_only", {E}),
        ("warning_only", {W}),
        ("warning_plus_env", {E, W}),
        ("all", {E, W, C}),
    ],
)
def test_world_loss_targets(target: str, expected_roles: set[int]) -> None:
    rid = sample_role_ids()
    coeffs = env_token_coeffs(rid, EchoConfig(world_model_coeff=1.0, world_loss_target=target))
    selected_roles = set(rid[coeffs > 0].tolist())
    assert selected_roles == expected_roles
    assert (coeffs[rid == A] == 0).all() and (coeffs[rid == P] == 0).all()


def test_prompt_context_and_pre_action_observations_are_not_targets() -> None:
    rid = roles([C, E, C, A, A, C, E, E])
    cfg_all = EchoConfig(world_model_coeff=1.0, world_loss_target="all")
    c = env_token_coeffs(rid, cfg_all)
    assert c[0, :3].eq(0).all()  # prompt context and the reset observation
    assert c[0, 5:].eq(1).all()  # scaffold + env bodies after the first action
    cfg_pre = EchoConfig(world_model_coeff=1.0, include_pre_action_observations=True)
    c = env_token_coeffs(rid, cfg_pre)
    assert c[0, 1] == 1 and c[0, 0] == 0 and c[0, 2] == 0  # the reset observation body, never the prompt


def test_role_coefficients_are_per_token() -> None:
    rid = roles([C, A, W, E, E, W])
    cfg = EchoConfig(world_model_coeff=1.0, world_loss_target="warning_plus_env", role_coeffs={"warning": 0.25})
    assert env_token_coeffs(rid, cfg).tolist() == [[0.0, 0.0, 0.25, 1.0, 1.0, 0.25]]


def test_observation_counts_are_bodies_after_first_action() -> None:
    rid = sample_role_ids()
    obs = observation_counts(rid, EchoConfig())
    assert obs.tolist() == [4.0, 1.0, 3.0, 4.0]  # row 3's reset env token is not counted
    obs_pre = observation_counts(rid, EchoConfig(include_pre_action_observations=True))
    assert obs_pre.tolist() == [4.0, 1.0, 3.0, 5.0]


def test_role_counts() -> None:
    counts = role_counts(roles([C, A, E, W, P]))
    assert {r: int(v) for r, v in counts.items()} == {
        Role.CONTEXT: 0,
        Role.ACTION: 1,
        Role.ENV_OUTPUT: 1,
        Role.WARNING: 1,
    }


@pytest.mark.parametrize(
    "bad, err",
    [
        (torch.zeros(4, dtype=torch.long), ValueError),
        (torch.zeros(2, 3, dtype=torch.float32), TypeError),
        (torch.zeros(2, 3, dtype=torch.bool), TypeError),
        (torch.full((2, 3), 7), ValueError),
        (torch.full((2, 3), -2), ValueError),
        ([[0, 1]], TypeError),
    ],
)
def test_bad_role_ids(bad: object, err: type[Exception]) -> None:
    with pytest.raises(err):
        EchoBatch(bad)  # type: ignore[arg-type]


def test_bad_batch_shapes() -> None:
    rid = roles([C, A, E])
    with pytest.raises(ValueError, match="advantages"):
        EchoBatch(rid, advantages=torch.zeros(2))
    with pytest.raises(ValueError, match="old_logps"):
        EchoBatch(rid, old_logps=torch.zeros(1, 2))
    with pytest.raises(ValueError, match="obs_count"):
        EchoBatch(rid, obs_count=torch.zeros(3))
    with pytest.raises(TypeError, match="bool"):
        EchoBatch(rid, env_keep=torch.ones(1))
