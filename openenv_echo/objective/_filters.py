"""Rollout filters for the world term and the zero-variance rule, as one per-row ``env_keep`` mask.

Filters only ever remove a rollout's *env* term; its policy term is untouched (as in the SkyRL reference). The
result feeds ``EchoBatch.env_keep``. Computed once per optimizer batch, before micro-batching, so the world
denominators see the kept rows only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._advantages import group_index, zero_variance_groups
from ._config import EchoConfig, RolloutFilterConfig

FILTER_METRIC_KEYS: tuple[str, ...] = (
    "filter/rollouts",
    "filter/kept",
    "filter/dropped_valid_tool_call",
    "filter/dropped_parse_clean",
    "filter/dropped_correct",
    "filter/dropped_zero_variance",
    "filter/groups",
    "filter/empty_groups",
)


@dataclass
class RolloutStats:
    """Per-rollout quality statistics (each (N,), optional unless its filter is on).

    * ``valid_tool_call_share``: share of the agent's turns whose tool call was valid, in [0, 1].
    * ``parse_clean_share``: share of turns with no parse error and no format violation, in [0, 1].
    * ``correct``: bool, the rollout solved the task (verifier outcome).
    """

    valid_tool_call_share: torch.Tensor | None = None
    parse_clean_share: torch.Tensor | None = None
    correct: torch.Tensor | None = None


@dataclass
class FilterResult:
    keep: torch.Tensor  # (N,) bool
    metrics: dict[str, float]


def _share(stats: RolloutStats, name: str, n: int) -> torch.Tensor:
    v: torch.Tensor | None = getattr(stats, name)
    if v is None:
        raise ValueError(f"the {name} filter is on but RolloutStats.{name} is missing")
    if v.shape != (n,):
        raise ValueError(f"RolloutStats.{name} must have shape ({n},), got {tuple(v.shape)}")
    if name != "correct":
        v = v.to(torch.float64)
        if not torch.isfinite(v).all() or (v < 0).any() or (v > 1).any():
            raise ValueError(f"RolloutStats.{name} must be shares in [0, 1]")
    return v


def max_incorrect_kept(n_correct: int, theta: float) -> int | None:
    """How many incorrect rollouts a group may keep so that ≥ θ of the kept ones are correct (None = all).

    θ = 0: no limit. θ = 1: none. Otherwise ``floor(n_correct·(1-θ)/θ)`` (with a 1e-9 guard against float error).
    """
    if theta <= 0.0:
        return None
    if theta >= 1.0:
        return 0
    return math.floor(n_correct * (1.0 - theta) / theta + 1e-9)


def world_filter(stats: RolloutStats, group_ids: torch.Tensor | int, cfg: RolloutFilterConfig, n: int) -> FilterResult:
    """Apply the configured filters per group; returns the (n,) keep mask and counts."""
    idx = group_index(group_ids, n)
    keep = torch.ones(n, dtype=torch.bool)
    metrics = dict.fromkeys(FILTER_METRIC_KEYS, 0.0)
    metrics["filter/rollouts"] = float(n)
    if cfg.min_valid_tool_call_share is not None:
        bad = _share(stats, "valid_tool_call_share", n).cpu() < cfg.min_valid_tool_call_share
        metrics["filter/dropped_valid_tool_call"] = float((bad & keep).sum())
        keep &= ~bad
    if cfg.min_parse_clean_share is not None:
        bad = _share(stats, "parse_clean_share", n).cpu() < cfg.min_parse_clean_share
        metrics["filter/dropped_parse_clean"] = float((bad & keep).sum())
        keep &= ~bad
    if cfg.min_correct_share is not None:
        correct = _share(stats, "correct", n).cpu().to(torch.bool)
        dropped = 0
        for g in torch.unique(idx).tolist():
            rows = [i for i in (idx == g).nonzero().flatten().tolist() if keep[i]]
            n_correct = sum(bool(correct[i]) for i in rows)
            limit = max_incorrect_kept(n_correct, cfg.min_correct_share)
            if limit is None:
                continue
            incorrect = [i for i in rows if not correct[i]]
            for i in incorrect[limit:]:
                keep[i] = False
                dropped += 1
        metrics["filter/dropped_correct"] = float(dropped)
    groups = torch.unique(idx)
    metrics["filter/groups"] = float(groups.numel())
    metrics["filter/empty_groups"] = float(sum(1 for g in groups.tolist() if not keep[idx == g].any()))
    metrics["filter/kept"] = float(keep.sum())
    return FilterResult(keep=keep, metrics=metrics)


def env_keep_mask(
    cfg: EchoConfig,
    group_ids: torch.Tensor | int,
    n: int,
    *,
    rewards: torch.Tensor | None = None,
    stats: RolloutStats | None = None,
) -> FilterResult:
    """The (n,) ``env_keep`` mask: rollout filters, then (if ``keep_zero_variance_env`` is False) drop the rows of
    zero-variance groups. Empty groups are fine: their rows simply carry no env term."""
    result = world_filter(stats or RolloutStats(), group_ids, cfg.filters, n)
    if not cfg.keep_zero_variance_env:
        if rewards is None:
            raise ValueError("keep_zero_variance_env=False needs the rewards to find zero-variance groups")
        zv = zero_variance_groups(rewards, group_ids).cpu()
        result.metrics["filter/dropped_zero_variance"] = float((zv & result.keep).sum())
        result.keep &= ~zv
        idx = group_index(group_ids, n)
        groups = torch.unique(idx).tolist()
        result.metrics["filter/empty_groups"] = float(sum(1 for g in groups if not result.keep[idx == g].any()))
        result.metrics["filter/kept"] = float(result.keep.sum())
    return result
