"""The role rules (``openenv_echo.roles``) on numpy and torch, and token selection through the public seam."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from openenv_echo.objective import EchoBatch, EchoConfig, token_weights
from openenv_echo.roles import (
    WORLD_LOSS_TARGETS,
    Role,
    after_first_action,
    check_world_loss_target,
    observation_count,
    target_positions,
    world_target_mask,
)

from .helpers import A, C, E, P, W, roles, sample_role_ids


def _world(rid: torch.Tensor, **cfg: object) -> torch.Tensor:
    """Per-token world coefficients c (0 off the selection), via the public seam with token_mean over 1 token."""
    tw = token_weights(EchoBatch(rid), EchoConfig(world_model_coeff=1.0, **cfg))  # type: ignore[arg-type]
    return tw.world * tw.world_mask.sum()


def test_first_real_token_is_never_a_target_even_after_left_padding() -> None:
    rid = roles([E, A, E], [P, P, E, A, E], [A, A, E])
    valid = target_positions(rid)
    assert not valid[0, 0] and not valid[1, 2] and not valid[2, 0]
    assert not valid[1, :2].any()  # padding
    tw = token_weights(EchoBatch(rid), EchoConfig(world_model_coeff=1.0))
    assert not tw.world_mask[:, 0].any() and not tw.world_mask[1, 2]
    assert not tw.policy_mask[2, 0]


def test_completion_slices_keep_their_first_token() -> None:
    rid = roles([A, A, E, E, A])
    assert target_positions(rid, includes_sequence_start=False)[0, 0]
    assert token_weights(EchoBatch(rid, includes_sequence_start=False), EchoConfig()).policy_mask[0, 0]


def test_rules_agree_on_numpy_and_torch() -> None:
    rid = sample_role_ids()
    for fn in (target_positions, after_first_action, observation_count):
        assert np.array_equal(fn(rid.numpy()), fn(rid).numpy())
    for words in WORLD_LOSS_TARGETS.values():
        assert np.array_equal(world_target_mask(rid.numpy(), words), world_target_mask(rid, words).numpy())
    row = rid[0].numpy()  # a 1-D row follows the same rules as a batch row
    assert np.array_equal(target_positions(row), target_positions(rid)[0].numpy())


@pytest.mark.parametrize(
    "target, expected_roles",
    [
        ("env_only", {E}),
        ("warning_only", {W}),
        ("warning_plus_env", {E, W}),
        ("full_observation", {E, W, C}),
    ],
)
def test_world_loss_targets(target: str, expected_roles: set[int]) -> None:
    rid = sample_role_ids()
    coeffs = _world(rid, world_loss_target=target)
    assert set(rid[coeffs > 0].tolist()) == expected_roles
    assert (coeffs[rid == A] == 0).all() and (coeffs[rid == P] == 0).all()


def test_all_is_refused_with_both_meanings_named() -> None:
    for make in (lambda: EchoConfig(world_loss_target="all"), lambda: check_world_loss_target("all")):
        with pytest.raises(ValueError, match=r"warning_plus_env.*full_observation"):
            make()
    with pytest.raises(ValueError, match="unknown world_loss_target"):
        check_world_loss_target("env")


def test_prompt_context_and_pre_action_observations_are_not_targets() -> None:
    rid = roles([C, E, C, A, A, C, E, E])
    c = _world(rid, world_loss_target="full_observation")
    assert c[0, :3].eq(0).all()  # prompt context and the reset observation
    assert c[0, 5:].eq(1).all()  # scaffold + env bodies after the first action


def test_role_coefficients_are_per_token_and_zero_means_not_selected() -> None:
    rid = roles([C, A, W, E, E, W])
    cfg = EchoConfig(world_model_coeff=1.0, world_loss_target="warning_plus_env", role_coeffs={"warning": 0.25})
    tw = token_weights(EchoBatch(rid), cfg)
    assert (tw.world * 4).tolist() == [[0.0, 0.0, 0.25, 1.0, 1.0, 0.25]]  # token_mean over 4 selected tokens
    zero = EchoConfig(world_model_coeff=1.0, world_loss_target="warning_plus_env", role_coeffs={"warning": 0.0})
    tw = token_weights(EchoBatch(rid), zero)
    assert tw.world_mask.tolist() == [[False, False, False, True, True, False]]  # coefficient 0: not selected
    assert tw.metrics["echo/tokens/selected"] == 2.0 and zero.target_roles == {Role.ENV_OUTPUT}


def test_observation_count_is_bodies_after_first_action() -> None:
    rid = sample_role_ids()
    assert observation_count(rid).tolist() == [4, 1, 3, 4]  # row 3's reset env token is not counted
    assert observation_count(roles([C, E, W, C])).tolist() == [0]  # no action: nothing is a consequence
    assert observation_count(np.array([C, A, W, E, C, A, E])) == 3


def test_token_counts_per_role() -> None:
    m = token_weights(EchoBatch(roles([C, A, E, W, P])), EchoConfig()).metrics
    assert [m[f"echo/tokens/{r.value}"] for r in Role] == [0.0, 1.0, 1.0, 1.0]  # token 0 is not a target


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
    with pytest.raises(ValueError, match="below the observation body tokens"):
        EchoBatch(rid, obs_count=torch.zeros(1))
    with pytest.raises(TypeError, match="bool"):
        EchoBatch(rid, env_keep=torch.ones(1))
