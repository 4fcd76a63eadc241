"""Group-relative advantages (GRPO with/without std, RLOO, Dr.GRPO) and the zero-variance group mask.

Advantages only ever scale the *policy* term. The world term's weights are built from role ids and counts alone
(``.normalization``), so no advantage normalization, scaling or clipping can touch λ (pitfall P17).
"""

from __future__ import annotations

from typing import Literal

import torch

AdvantageEstimator = Literal["grpo", "grpo_no_std", "rloo", "dr_grpo"]


def group_index(group_ids: torch.Tensor | int, n: int, device: torch.device | None = None) -> torch.Tensor:
    """(n,) long group index in [0, G): from explicit ids (any values) or a group size (consecutive rows)."""
    if isinstance(group_ids, int):
        if group_ids < 1 or n % group_ids:
            raise ValueError(f"group size {group_ids} does not divide the {n} rollouts")
        return torch.arange(n, device=device) // group_ids
    if group_ids.dim() != 1 or group_ids.numel() != n:
        raise ValueError(f"group_ids must have shape ({n},), got {tuple(group_ids.shape)}")
    inverse: torch.Tensor = torch.unique(group_ids, return_inverse=True)[1]
    return inverse


def _group_stats(rewards: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = int(idx.max()) + 1 if idx.numel() else 0
    r = rewards.to(torch.float64)
    count = torch.zeros(g, dtype=torch.float64, device=r.device).index_add_(0, idx, torch.ones_like(r))
    mean = torch.zeros(g, dtype=torch.float64, device=r.device).index_add_(0, idx, r) / count
    dev = r - mean[idx]
    var = torch.zeros(g, dtype=torch.float64, device=r.device).index_add_(0, idx, dev * dev)
    std = torch.sqrt(var / (count - 1).clamp(min=1))  # unbiased, as GRPO/TRL; 0 for singleton groups
    return count[idx], mean[idx], std[idx]


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor | int,
    estimator: AdvantageEstimator = "grpo",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Per-rollout advantages (same dtype as ``rewards``).

    * ``grpo``: (r - mean_g) / (std_g + eps)   * ``grpo_no_std`` / ``dr_grpo``: r - mean_g (Dr.GRPO drops the std)
    * ``rloo``: r - mean of the *other* rollouts of the group = n/(n-1)·(r - mean_g); 0 for singleton groups.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must have shape (N,), got {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite (drop or impute unscorable rollouts first)")
    idx = group_index(group_ids, rewards.numel(), rewards.device)
    count, mean, std = _group_stats(rewards, idx)
    centred = rewards.to(torch.float64) - mean
    if estimator == "grpo":
        adv = centred / (std + eps)
    elif estimator in ("grpo_no_std", "dr_grpo"):
        adv = centred
    elif estimator == "rloo":
        adv = torch.where(count > 1, centred * count / (count - 1).clamp(min=1), torch.zeros_like(centred))
    else:
        raise ValueError(f"unknown advantage estimator {estimator!r}")
    return adv.to(rewards.dtype)


def zero_variance_groups(rewards: torch.Tensor, group_ids: torch.Tensor | int) -> torch.Tensor:
    """(N,) bool: rollouts whose group has identical rewards (zero advantage for every estimator)."""
    idx = group_index(group_ids, rewards.numel(), rewards.device)
    g = int(idx.max()) + 1 if idx.numel() else 0
    r = rewards.to(torch.float64)
    hi = torch.full((g,), -torch.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, idx, r, "amax")
    lo = torch.full((g,), torch.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, idx, r, "amin")
    return (hi == lo)[idx]
