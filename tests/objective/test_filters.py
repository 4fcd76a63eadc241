"""World-term rollout filters, θ edge cases, empty groups and the zero-variance rule (pitfalls P14, P24)."""

from __future__ import annotations

import pytest
import torch

from openenv_echo.objective import EchoBatch, EchoConfig, RolloutFilterConfig, RolloutStats, echo_loss, env_keep_mask
from openenv_echo.objective._filters import FILTER_METRIC_KEYS, max_incorrect_kept, world_filter

from .helpers import sample_role_ids


def _cfg(**kw: float | None) -> RolloutFilterConfig:
    return RolloutFilterConfig(**kw)


def test_valid_tool_call_and_parse_clean_thresholds() -> None:
    stats = RolloutStats(
        valid_tool_call_share=torch.tensor([1.0, 0.4, 0.5, 0.9]),
        parse_clean_share=torch.tensor([1.0, 1.0, 0.2, 0.49]),
    )
    res = world_filter(stats, 2, _cfg(min_valid_tool_call_share=0.5, min_parse_clean_share=0.5), 4)
    assert res.keep.tolist() == [True, False, False, False]
    assert res.metrics["filter/dropped_valid_tool_call"] == 1
    assert res.metrics["filter/dropped_parse_clean"] == 2  # row 1 was already dropped, not double-counted
    assert res.metrics["filter/empty_groups"] == 1
    assert set(res.metrics) == set(FILTER_METRIC_KEYS)


@pytest.mark.parametrize(
    "n_correct, theta, expected",
    [
        (3, 0.0, None),
        (0, 0.0, None),
        (3, 1.0, 0),
        (0, 1.0, 0),
        (1, 0.5, 1),
        (2, 0.5, 2),
        (1, 0.25, 3),
        (0, 0.5, 0),
        (2, 1 / 3, 4),
    ],
)
def test_max_incorrect_kept(n_correct: int, theta: float, expected: int | None) -> None:
    assert max_incorrect_kept(n_correct, theta) == expected


def test_correct_share_theta_zero_keeps_everything() -> None:
    stats = RolloutStats(correct=torch.tensor([True, False, False, False, False, False]))
    res = world_filter(stats, 3, _cfg(min_correct_share=0.0), 6)
    assert res.keep.all()
    assert res.metrics["filter/empty_groups"] == 0


def test_correct_share_theta_one_keeps_only_correct_and_handles_empty_groups() -> None:
    stats = RolloutStats(correct=torch.tensor([True, False, False, False, True, True]))
    res = world_filter(stats, 3, _cfg(min_correct_share=1.0), 6)
    assert res.keep.tolist() == [True, False, False, False, True, True]
    assert res.metrics["filter/empty_groups"] == 0
    res = world_filter(stats, 2, _cfg(min_correct_share=1.0), 6)  # groups of 2: group 1 has no correct rollout
    assert res.keep.tolist() == [True, False, False, False, True, True]
    assert res.metrics["filter/empty_groups"] == 1
    assert res.metrics["filter/groups"] == 3


def test_correct_share_half_keeps_first_incorrect_in_order() -> None:
    stats = RolloutStats(correct=torch.tensor([False, True, False, False]))
    res = world_filter(stats, 4, _cfg(min_correct_share=0.5), 4)
    assert res.keep.tolist() == [True, True, False, False]
    assert res.metrics["filter/dropped_correct"] == 2


def test_correct_share_counts_only_survivors_of_earlier_filters() -> None:
    stats = RolloutStats(
        valid_tool_call_share=torch.tensor([0.0, 1.0, 1.0, 1.0]), correct=torch.tensor([True, False, False, False])
    )
    res = world_filter(stats, 4, _cfg(min_valid_tool_call_share=0.5, min_correct_share=0.5), 4)
    assert not res.keep.any()  # the only correct rollout failed the tool-call filter
    assert res.metrics["filter/empty_groups"] == 1


def test_missing_or_bad_stats_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="valid_tool_call_share is missing"):
        world_filter(RolloutStats(), 2, _cfg(min_valid_tool_call_share=0.5), 4)
    with pytest.raises(ValueError, match="shares in"):
        world_filter(
            RolloutStats(parse_clean_share=torch.tensor([1.5, 0, 0, 0])), 2, _cfg(min_parse_clean_share=0.5), 4
        )
    with pytest.raises(ValueError, match="shape"):
        world_filter(RolloutStats(correct=torch.tensor([True])), 2, _cfg(min_correct_share=0.5), 4)
    with pytest.raises(ValueError, match="rewards"):
        env_keep_mask(EchoConfig(keep_zero_variance_env=False), 2, 4)


def test_no_filters_keep_all() -> None:
    res = env_keep_mask(EchoConfig(), 2, 4)
    assert res.keep.all() and res.metrics["filter/kept"] == 4


def test_zero_variance_rule() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    keep_default = env_keep_mask(EchoConfig(), 2, 4, rewards=rewards)
    assert keep_default.keep.all()
    drop = env_keep_mask(EchoConfig(keep_zero_variance_env=False), 2, 4, rewards=rewards)
    assert drop.keep.tolist() == [False, False, True, True]
    assert drop.metrics["filter/dropped_zero_variance"] == 2
    assert drop.metrics["filter/empty_groups"] == 1


def test_dropped_rows_lose_only_their_env_term() -> None:
    rid = sample_role_ids()
    keep = torch.tensor([True, False, True, True])
    lp = (-torch.rand(rid.shape, dtype=torch.float64) - 0.1).requires_grad_()
    batch = EchoBatch(rid, advantages=torch.ones(4, dtype=torch.float64), env_keep=keep)
    out = echo_loss(lp, batch, EchoConfig(world_model_coeff=0.5))
    out.loss.backward()
    assert lp.grad[1][rid[1] == 2].eq(0).all()  # env term gone
    assert lp.grad[1][rid[1] == 1].ne(0).all()  # policy term kept
    assert out.metrics["echo/rollouts/env_kept"].item() == 3
