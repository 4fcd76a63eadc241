"""Which tokens each term of the objective trains on, from ``role_ids`` alone.

Convention (shared with tokenization): ``role_ids[b, t]`` is the role of token ``t`` *as a prediction target*
(predicted by the logits at ``t-1``), ``PAD_ROLE_CODE`` (-1) on padding. For a full sequence the first real token
has no predictor and is never a target, also after left padding; rows that are a slice starting mid-sequence (a
TRL/SkyRL completion, whose first token is predicted by the last prompt token) pass
``includes_sequence_start=False``. Masks are never inferred from token ids or log-prob values (pitfalls P10, P22).
"""

from __future__ import annotations

import torch

from ..roles import PAD_ROLE_CODE, Role
from .config import EchoConfig

ROLE_CODES: dict[Role, int] = {r: r.code for r in Role}


def check_role_ids(role_ids: torch.Tensor) -> None:
    """Raise a clear error unless ``role_ids`` is a (B, T) integer tensor of known role codes."""
    if not isinstance(role_ids, torch.Tensor):
        raise TypeError(f"role_ids must be a torch.Tensor, got {type(role_ids).__name__}")
    if role_ids.dim() != 2:
        raise ValueError(f"role_ids must have shape (B, T), got {tuple(role_ids.shape)}")
    if role_ids.dtype.is_floating_point or role_ids.dtype == torch.bool:
        raise TypeError(f"role_ids must be an integer tensor, got {role_ids.dtype}")
    if role_ids.numel():
        lo, hi = int(role_ids.min()), int(role_ids.max())
        if lo < PAD_ROLE_CODE or hi > max(ROLE_CODES.values()):
            raise ValueError(f"role_ids has codes outside [{PAD_ROLE_CODE}, {max(ROLE_CODES.values())}]: {lo}..{hi}")


def target_positions(role_ids: torch.Tensor, includes_sequence_start: bool = True) -> torch.Tensor:
    """(B, T) bool: positions that can be a prediction target (not padding, not a row's first real token)."""
    valid = role_ids != PAD_ROLE_CODE
    if includes_sequence_start:
        first = valid & (valid.long().cumsum(dim=1) == 1)
        valid = valid & ~first
    return valid


def action_mask(role_ids: torch.Tensor, includes_sequence_start: bool = True) -> torch.Tensor:
    """(B, T) bool: action tokens (the policy-gradient targets)."""
    return target_positions(role_ids, includes_sequence_start) & (role_ids == Role.ACTION.code)


def after_first_action(role_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: positions strictly after the first action token of each row."""
    is_action = (role_ids == Role.ACTION.code).long()
    return (is_action.cumsum(dim=1) - is_action) > 0


def env_token_coeffs(role_ids: torch.Tensor, cfg: EchoConfig, includes_sequence_start: bool = True) -> torch.Tensor:
    """(B, T) float64: the per-role coefficient c_t of each world-model target token, 0 elsewhere.

    Selected roles come from ``cfg.world_loss_target`` with ``cfg.role_coeffs`` multipliers. Tokens before the
    first action of a row are never targets, except observation bodies when
    ``cfg.include_pre_action_observations`` is set (``context`` before the first action is the prompt: never).
    """
    valid = target_positions(role_ids, includes_sequence_start)
    post = after_first_action(role_ids)
    coeffs = torch.zeros(role_ids.shape, dtype=torch.float64, device=role_ids.device)
    for role in cfg.target_roles:
        c = cfg.role_coeff(role)
        if c == 0.0:
            continue
        eligible = valid & (role_ids == role.code)
        if role == Role.CONTEXT or not cfg.include_pre_action_observations:
            eligible = eligible & post
        coeffs = torch.where(eligible, torch.full_like(coeffs, c), coeffs)
    return coeffs


def observation_counts(role_ids: torch.Tensor, cfg: EchoConfig, includes_sequence_start: bool = True) -> torch.Tensor:
    """(B,) float: |O_i|, the observation *body* tokens (env_output + warning) of each row that could be targets.

    Same eligibility as :func:`env_token_coeffs` (after the first action unless
    ``include_pre_action_observations``). Callers that truncated sequences and want the pre-truncation count
    pass their own ``obs_count`` instead.
    """
    valid = target_positions(role_ids, includes_sequence_start)
    body = valid & ((role_ids == Role.ENV_OUTPUT.code) | (role_ids == Role.WARNING.code))
    if not cfg.include_pre_action_observations:
        body = body & after_first_action(role_ids)
    return body.sum(dim=1).to(torch.float64)


def role_counts(role_ids: torch.Tensor, includes_sequence_start: bool = True) -> dict[Role, torch.Tensor]:
    """Number of target tokens per role (0-dim tensors), for metrics and the startup summary (P26)."""
    valid = target_positions(role_ids, includes_sequence_start)
    return {r: (valid & (role_ids == r.code)).sum() for r in Role}
