"""Group-relative advantage estimators and the zero-variance mask, against hand computations."""

from __future__ import annotations

import pytest
import torch

from openenv_echo.objective import group_advantages
from openenv_echo.objective._advantages import group_index, zero_variance_groups

R = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 5.0], dtype=torch.float64)


def test_grpo_with_std() -> None:
    adv = group_advantages(R, 4, "grpo", eps=0.0)
    g0 = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    std0 = g0.std()  # unbiased
    torch.testing.assert_close(adv[:4], (g0 - 0.5) / std0)
    g1 = torch.tensor([2.0, 2.0, 2.0, 5.0], dtype=torch.float64)
    torch.testing.assert_close(adv[4:], (g1 - g1.mean()) / g1.std())


def test_grpo_without_std_and_dr_grpo() -> None:
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, -0.75, -0.75, -0.75, 2.25], dtype=torch.float64)
    torch.testing.assert_close(group_advantages(R, 4, "grpo_no_std"), expected)
    torch.testing.assert_close(group_advantages(R, 4, "dr_grpo"), expected)


def test_rloo() -> None:
    adv = group_advantages(R, 4, "rloo")
    # r_i - mean of the other three
    expected = [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 2 - 3, 2 - 3, 2 - 3, 5 - 2]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))


def test_explicit_non_contiguous_group_ids() -> None:
    ids = torch.tensor([7, 3, 7, 3])
    r = torch.tensor([1.0, 4.0, 3.0, 0.0])
    torch.testing.assert_close(group_advantages(r, ids, "grpo_no_std"), torch.tensor([-1.0, 2.0, 1.0, -2.0]))
    assert group_index(ids, 4).tolist() == [1, 0, 1, 0]


def test_singleton_and_zero_variance_groups_have_zero_advantage() -> None:
    r = torch.tensor([3.0, 1.0, 1.0])
    ids = torch.tensor([0, 1, 1])
    for est in ("grpo", "grpo_no_std", "rloo", "dr_grpo"):
        assert group_advantages(r, ids, est).eq(0).all(), est
    assert zero_variance_groups(r, ids).tolist() == [True, True, True]
    assert zero_variance_groups(R, 4).tolist() == [False] * 8
    assert zero_variance_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2).tolist() == [True, True, False, False]


@pytest.mark.parametrize(
    "rewards, groups, est, err",
    [
        (torch.zeros(4, 1), 4, "grpo", "shape"),
        (torch.tensor([1.0, float("nan")]), 2, "grpo", "finite"),
        (torch.zeros(5), 2, "grpo", "does not divide"),
        (torch.zeros(4), torch.zeros(3), "grpo", "group_ids"),
        (torch.zeros(4), 2, "ppo", "unknown advantage estimator"),
    ],
)
def test_bad_inputs(rewards: torch.Tensor, groups: object, est: str, err: str) -> None:
    with pytest.raises(ValueError, match=err):
        group_advantages(rewards, groups, est)  # type: ignore[arg-type]
