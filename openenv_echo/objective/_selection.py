"""Which tokens each term of the objective trains on, with what coefficient: the role rules of
``openenv_echo.roles`` applied to one batch under one ``EchoConfig``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..roles import PAD_ROLE_CODE, Role, observation_count, target_positions, world_target_mask
from ._batch import EchoBatch
from ._config import EchoConfig


@dataclass(frozen=True)
class Targets:
    """Per-token targets of both terms for one batch (after verifier-free rows, filters and role coefficients)."""

    action: torch.Tensor  # (B, T) bool: policy targets
    coeffs: torch.Tensor  # (B, T) float64: per-role world coefficient c_{i,t}, 0 off the selection
    selected: torch.Tensor  # (B, T) bool: world targets (coeffs > 0)
    obs_count: torch.Tensor  # (B,) float64: |O_i|
    real_rows: torch.Tensor  # (B,) bool: rows with at least one non-pad token
    policy_rows: torch.Tensor  # (B,) bool: rows with a policy term


def select_targets(batch: EchoBatch, cfg: EchoConfig) -> Targets:
    """The policy and world targets of ``batch`` under ``cfg``."""
    rid = batch.role_ids
    start = batch.includes_sequence_start
    real_rows = (rid != PAD_ROLE_CODE).any(dim=1)
    if cfg.verifier_free:
        policy_rows = torch.zeros_like(real_rows)
    elif batch.verifier_free is not None:
        policy_rows = real_rows & ~batch.verifier_free.to(rid.device)
    else:
        policy_rows = real_rows
    action = target_positions(rid, start) & (rid == Role.ACTION.code) & policy_rows.unsqueeze(1)
    by_code = torch.tensor([cfg.role_coeff(Role.from_code(c)) for c in range(4)], dtype=torch.float64)
    selected = world_target_mask(rid, cfg.target_roles, start)
    coeffs = torch.where(selected, by_code.to(rid.device)[rid.clamp(min=0)], torch.zeros((), dtype=torch.float64))
    if batch.env_keep is not None:
        coeffs = coeffs * batch.env_keep.to(coeffs.device, coeffs.dtype).unsqueeze(1)
    obs = batch.obs_count if batch.obs_count is not None else observation_count(rid)
    return Targets(action, coeffs, coeffs > 0, obs.to(torch.float64), real_rows, policy_rows)
