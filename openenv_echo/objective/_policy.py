"""The policy term: a GRPO/PPO clipped surrogate with an optional k3 KL to a reference, on action tokens only.

Ratios, clipping and the KL are computed only where ``action`` is True: every other position (env tokens,
padding, placeholders such as a sampler log-prob of 0.0 on observation tokens) is replaced by 0 *before* any
``exp``, so no placeholder can create an inf/NaN or a trust-region mask on env tokens (pitfalls P2, P3, P22).
"""

from __future__ import annotations

import torch

from ._config import PolicyLossConfig

POLICY_METRIC_KEYS = ("policy/clip_fraction", "policy/ratio_mean", "policy/kl")
"""The core policy term's metrics (RFC 0004 §6): present whenever the core computes the policy term."""


def no_policy_metrics() -> dict[str, torch.Tensor]:
    """The policy metrics of a batch without action targets: NaN (a mean over zero tokens), same keys."""
    return {k: torch.tensor(float("nan")) for k in POLICY_METRIC_KEYS}


def policy_token_losses(
    logps: torch.Tensor,
    action: torch.Tensor,
    advantages: torch.Tensor,
    old_logps: torch.Tensor | None,
    ref_logps: torch.Tensor | None,
    cfg: PolicyLossConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token policy loss (B, T), exactly 0 off the action mask, plus detached metrics.

    ``loss_t = -min(ρ_t·A, clip(ρ_t, 1-ε_low, 1+ε_high)·A) + β·(exp(r-ℓ) - (r-ℓ) - 1)`` with
    ``ρ_t = exp(ℓ_t - ℓ_old_t)``; ``old_logps=None`` means on-policy (ℓ_old = ℓ.detach()).
    """
    zero = torch.zeros((), dtype=logps.dtype, device=logps.device)
    lp = torch.where(action, logps, zero)
    old = lp.detach() if old_logps is None else torch.where(action, old_logps.to(logps.dtype), zero)
    adv = advantages.to(logps.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    adv = torch.where(action, adv.expand_as(lp), zero)

    log_ratio = lp - old
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - cfg.clip_eps_low, 1.0 + cfg.clip_eps_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)

    kl = None
    if cfg.kl_coeff > 0:
        if ref_logps is None:
            raise ValueError("policy.kl_coeff > 0 needs ref_logps in the batch")
        ref = torch.where(action, ref_logps.to(logps.dtype), zero)
        diff = ref - lp
        kl = torch.exp(diff) - diff - 1.0
        per_token = per_token + cfg.kl_coeff * kl
    per_token = torch.where(action, per_token, zero)

    with torch.no_grad():
        count = action.sum().to(logps.dtype)
        n = count.clamp(min=1)
        nan = torch.full_like(n, float("nan"))
        is_clipped = ((ratio < 1.0 - cfg.clip_eps_low) & (adv < 0)) | ((ratio > 1.0 + cfg.clip_eps_high) & (adv > 0))
        values = (
            (is_clipped & action).sum().to(logps.dtype) / n,
            torch.where(action, ratio, zero).sum() / n,
            (torch.where(action, kl, zero).sum() / n) if kl is not None else zero.clone(),
        )
        metrics = {k: torch.where(count > 0, v, nan) for k, v in zip(POLICY_METRIC_KEYS, values)}
    return per_token, metrics
