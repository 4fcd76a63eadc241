"""The ECHO loss: ``L = L_policy(action tokens) + λ · L_world(selected observation tokens)``.

Both terms read the same per-token log-probs (one forward pass). The world term is a plain weighted NLL:
``L_world = -Σ w_{i,t} · ℓ_{i,t}``, so ``∂L/∂ℓ_{i,t} = -λ·w_{i,t}`` exactly, with no ratio, clip, KL or
trust-region mask on env tokens. ``λ = 0`` adds nothing to the graph (bit-identical to the policy loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..roles import Role
from .batch import EchoBatch
from .config import EchoConfig
from .normalization import Denominators, term_weights, world_row_counts
from .policy import policy_token_losses
from .selection import action_mask, env_token_coeffs, observation_counts, role_counts, target_positions

METRIC_KEYS: tuple[str, ...] = (
    "echo/loss",
    "echo/policy_loss",
    "echo/world_loss",
    "echo/world_loss_unscaled",
    "echo/world_model_coeff",
    "echo/env_ce_per_token",
    "echo/ce_per_token/env_output",
    "echo/ce_per_token/warning",
    "echo/ce_per_token/context",
    "echo/world_policy_loss_ratio",
    "echo/tokens/context",
    "echo/tokens/action",
    "echo/tokens/env_output",
    "echo/tokens/warning",
    "echo/tokens/selected",
    "echo/tokens/policy",
    "echo/rollouts/total",
    "echo/rollouts/env_kept",
    "echo/rollouts/verifier_free",
    "policy/clip_fraction",
    "policy/ratio_mean",
    "policy/kl",
)
"""Metric keys of every :func:`echo_loss` call: identical with and without env tokens, with λ = 0 or not."""


@dataclass
class Selection:
    """Which tokens each term trains on for one batch (see :func:`select_tokens`)."""

    action: torch.Tensor  # (B, T) bool: policy targets
    coeffs: torch.Tensor  # (B, T) float: per-role world coefficient, 0 off the selection / dropped rows
    selected: torch.Tensor  # (B, T) bool: world targets
    obs_count: torch.Tensor  # (B,) float: |O_i|
    real_rows: torch.Tensor  # (B,) bool: rows with at least one non-pad token
    policy_rows: torch.Tensor  # (B,) bool: rows with a policy term


def select_tokens(batch: EchoBatch, cfg: EchoConfig) -> Selection:
    """Policy and world token selections of ``batch`` under ``cfg`` (after verifier-free rows and filters)."""
    rid = batch.role_ids
    start = batch.includes_sequence_start
    real_rows = (rid != -1).any(dim=1)
    policy_rows = real_rows.clone()
    if cfg.verifier_free:
        policy_rows = torch.zeros_like(policy_rows)
    elif batch.verifier_free is not None:
        policy_rows = policy_rows & ~batch.verifier_free.to(rid.device)
    action = action_mask(rid, start) & policy_rows.unsqueeze(1)
    coeffs = env_token_coeffs(rid, cfg, start)
    if batch.env_keep is not None:
        coeffs = coeffs * batch.env_keep.to(coeffs.device, coeffs.dtype).unsqueeze(1)
    selected = coeffs > 0
    obs = batch.obs_count.to(torch.float64) if batch.obs_count is not None else observation_counts(rid, cfg, start)
    return Selection(action, coeffs, selected, obs, real_rows, policy_rows)


def local_denominators(batch: EchoBatch, cfg: EchoConfig, selection: Selection | None = None) -> Denominators:
    """This batch's own counts; sum them over micro-batches/ranks (or all-reduce) for the global ones."""
    s = selection or select_tokens(batch, cfg)
    return Denominators(
        policy_tokens=float(s.action.sum()),
        policy_sequences=float(s.policy_rows.sum()),
        world_tokens=float(s.selected.sum()),
        world_sequences=float(s.real_rows.sum()),
    )


@dataclass
class EchoLossOutput:
    """The loss to backpropagate, its two terms and detached scalar metrics.

    ``policy_loss`` is graph-connected (a connected zero when there is no policy term); ``world_loss`` is λ·L_world,
    graph-connected when λ ≠ 0 and a detached zero when λ = 0 (then ``loss is policy_loss``)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    world_loss: torch.Tensor
    metrics: dict[str, torch.Tensor]

    def metrics_as_floats(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.metrics.items()}


def world_token_weights(selection: Selection, cfg: EchoConfig, denominators: Denominators) -> torch.Tensor:
    """(B, T) world weights w (without λ): ``c_{i,t} · s_i / D`` for the configured normalization."""
    return term_weights(
        selection.coeffs,
        cfg.normalization,
        denominators.world_tokens,
        denominators.world_sequences,
        world_row_counts(selection.selected, selection.obs_count, cfg),
        cfg.constant_denominator,
    )


def policy_token_weights(selection: Selection, cfg: EchoConfig, denominators: Denominators) -> torch.Tensor:
    """(B, T) policy weights u: ``a_{i,t} · s_i / D_policy``."""
    mask = selection.action.to(torch.float64)
    return term_weights(
        mask,
        cfg.policy.normalization,
        denominators.policy_tokens,
        denominators.policy_sequences,
        mask.sum(dim=1),
        cfg.policy.constant_denominator,
    )


def accumulation_dtype(t: torch.Tensor) -> torch.dtype:
    """float64 for float64 inputs, float32 otherwise (bf16/fp16 log-probs are summed in float32)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def weighted_nll(logps: torch.Tensor, selected: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``-Σ w·ℓ`` over ``selected`` (at least float32 accumulation); an empty selection gives a graph-connected zero.

    Unselected positions are replaced by 0 before the product, so a placeholder log-prob (e.g. -inf or NaN at a
    row's first position) can never leak into the sum or its gradient.
    """
    acc = accumulation_dtype(logps)
    masked = torch.where(selected, logps, torch.zeros((), dtype=logps.dtype, device=logps.device))
    return -(masked.to(acc) * weights.to(acc)).sum()


def connected_zero(t: torch.Tensor) -> torch.Tensor:
    """A scalar 0 that is part of ``t``'s graph (``backward()`` works, every gradient is exactly 0)."""
    none = torch.zeros_like(t, dtype=torch.bool)
    return torch.where(none, t, torch.zeros((), dtype=t.dtype, device=t.device)).to(accumulation_dtype(t)).sum()


def _policy_term(
    logps: torch.Tensor, batch: EchoBatch, cfg: EchoConfig, sel: Selection, dens: Denominators
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if cfg.verifier_free or (batch.advantages is None and not sel.policy_rows.any()):
        zero = torch.zeros((), dtype=torch.float32, device=logps.device)
        return connected_zero(logps), {"policy/clip_fraction": zero, "policy/ratio_mean": zero, "policy/kl": zero}
    if batch.advantages is None:
        raise ValueError("advantages are required unless every row is verifier-free")
    per_token, pmetrics = policy_token_losses(
        logps, sel.action, batch.advantages, batch.old_logps, batch.ref_logps, cfg.policy
    )
    acc = accumulation_dtype(logps)
    return (per_token.to(acc) * policy_token_weights(sel, cfg, dens).to(acc)).sum(), pmetrics


def policy_loss(
    logps: torch.Tensor,
    batch: EchoBatch,
    cfg: EchoConfig,
    *,
    denominators: Denominators | None = None,
) -> torch.Tensor:
    """The policy term alone: the vanilla RL loss (what ``echo_loss`` returns with λ = 0)."""
    sel = select_tokens(batch, cfg)
    dens = denominators or local_denominators(batch, cfg, sel)
    return _policy_term(logps, batch, cfg, sel, dens)[0]


def world_loss(
    logps: torch.Tensor,
    batch: EchoBatch,
    cfg: EchoConfig,
    *,
    step: int = 0,
    denominators: Denominators | None = None,
) -> torch.Tensor:
    """λ(step) · L_world alone (for trainers that own their policy loss)."""
    sel = select_tokens(batch, cfg)
    dens = denominators or local_denominators(batch, cfg, sel)
    return cfg.coeff_at(step) * weighted_nll(logps, sel.selected, world_token_weights(sel, cfg, dens))


def echo_loss(
    logps: torch.Tensor,
    batch: EchoBatch,
    cfg: EchoConfig,
    *,
    step: int = 0,
    denominators: Denominators | None = None,
    env_logps: torch.Tensor | None = None,
) -> EchoLossOutput:
    """The full ECHO loss of one (micro-)batch.

    ``logps`` (B, T): per-token log-probs aligned with ``batch.role_ids`` (grad-enabled). ``denominators``: the
    global counts of the optimizer batch (default: this batch's own, i.e. one big batch). ``env_logps``: log-probs
    for the world term when they differ from the policy ones (``cfg.env_temperature="one"`` with a sampling
    temperature ≠ 1); default ``logps``.
    """
    if tuple(logps.shape) != batch.shape:
        raise ValueError(f"logps shape {tuple(logps.shape)} != role_ids shape {batch.shape}")
    if env_logps is not None and env_logps.shape != logps.shape:
        raise ValueError(f"env_logps shape {tuple(env_logps.shape)} != logps shape {tuple(logps.shape)}")
    sel = select_tokens(batch, cfg)
    dens = denominators or local_denominators(batch, cfg, sel)
    lam = cfg.coeff_at(step)

    # -- policy term -----------------------------------------------------------------------------------------
    policy, pmetrics = _policy_term(logps, batch, cfg, sel, dens)

    # -- world term ------------------------------------------------------------------------------------------
    lp_env = logps if env_logps is None else env_logps
    world, world_unscaled = world_term(lp_env, sel, cfg, dens, lam)
    loss = policy + world if lam != 0.0 else policy  # λ = 0: nothing added (bit-identical to vanilla)

    metrics = echo_metrics(lp_env, batch, sel, policy, world, world_unscaled, lam, pmetrics)
    metrics["echo/loss"] = loss.detach().float()
    return EchoLossOutput(loss=loss, policy_loss=policy, world_loss=world, metrics=metrics)


def world_term(
    lp_env: torch.Tensor, sel: Selection, cfg: EchoConfig, dens: Denominators, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(λ·L_world, L_world)``. With λ = 0 the first is a detached zero and the second is computed without grad
    (metrics only), so nothing enters the graph."""
    w = world_token_weights(sel, cfg, dens)
    if lam != 0.0:
        unscaled = weighted_nll(lp_env, sel.selected, w)
        return lam * unscaled, unscaled
    with torch.no_grad():
        unscaled = weighted_nll(lp_env.detach(), sel.selected, w)
    return torch.zeros((), dtype=unscaled.dtype, device=lp_env.device), unscaled


def echo_metrics(
    lp_env: torch.Tensor,
    batch: EchoBatch,
    sel: Selection,
    policy: torch.Tensor,
    world: torch.Tensor,
    world_unscaled: torch.Tensor,
    lam: float,
    pmetrics: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Detached scalar metrics (``METRIC_KEYS`` minus ``echo/loss``); ``pmetrics=None`` reports the policy
    metrics as 0 (for trainers that log their own)."""
    if pmetrics is None:
        z = torch.zeros((), dtype=torch.float32, device=lp_env.device)
        pmetrics = {"policy/clip_fraction": z, "policy/ratio_mean": z, "policy/kl": z}
    with torch.no_grad():
        zero = torch.zeros((), dtype=torch.float32, device=lp_env.device)
        nll = torch.where(sel.selected, -lp_env.detach().float(), zero)
        n_sel = sel.selected.sum()
        counts = role_counts(batch.role_ids, batch.includes_sequence_start)
        m: dict[str, torch.Tensor] = {
            "echo/policy_loss": policy.detach().float(),
            "echo/world_loss": world.detach().float(),
            "echo/world_loss_unscaled": world_unscaled.detach().float(),
            "echo/world_model_coeff": torch.tensor(lam, dtype=torch.float32, device=lp_env.device),
            "echo/env_ce_per_token": nll.sum() / n_sel.clamp(min=1),
            "echo/world_policy_loss_ratio": world.detach().float().abs()
            / policy.detach().float().abs().clamp(min=1e-8),
            "echo/tokens/selected": n_sel.float(),
            "echo/tokens/policy": sel.action.sum().float(),
            "echo/rollouts/total": sel.real_rows.sum().float(),
            "echo/rollouts/env_kept": (sel.real_rows & (sel.coeffs > 0).any(dim=1)).sum().float(),
            "echo/rollouts/verifier_free": (sel.real_rows & ~sel.policy_rows).sum().float(),
        }
        for role in Role:
            m[f"echo/tokens/{role.value}"] = counts[role].float()
        for role in (Role.ENV_OUTPUT, Role.WARNING, Role.CONTEXT):
            mask = sel.selected & (batch.role_ids == role.code)
            m[f"echo/ce_per_token/{role.value}"] = torch.where(mask, nll, zero).sum() / mask.sum().clamp(min=1)
        m.update({k: v.detach().float() for k, v in pmetrics.items()})
    return m


__all__ = [
    "METRIC_KEYS",
    "EchoLossOutput",
    "Selection",
    "connected_zero",
    "echo_loss",
    "echo_metrics",
    "local_denominators",
    "policy_loss",
    "policy_token_weights",
    "select_tokens",
    "target_positions",
    "weighted_nll",
    "world_loss",
    "world_term",
    "world_token_weights",
]
