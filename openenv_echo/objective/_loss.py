"""The seam every trainer calls: ``L = L_policy(action tokens) + λ · L_world(selected observation tokens)``.

``echo_loss`` turns per-token log-probs, role ids and an ``EchoConfig`` into the loss, its two terms and
metrics; a trainer that owns its policy loss passes it in and gets the world term added. ``token_weights``
gives the same objective as per-token weights, for trainers whose service computes the loss itself (Tinker).
The world term is a plain weighted NLL ``L_world = -Σ w_{i,t} · ℓ_{i,t}``, so ``∂L/∂ℓ_{i,t} = -λ·w_{i,t}`` exactly.
``λ = 0`` adds nothing to the graph: the loss *is* the policy loss tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..roles import Role, target_positions
from ._batch import EchoBatch
from ._config import EchoConfig
from ._normalization import Denominators, term_weights
from ._policy import no_policy_metrics, policy_token_losses
from ._selection import Targets, select_targets

EnvLogps = torch.Tensor | Callable[[torch.Tensor], torch.Tensor]
"""Log-probs for the world term: a (B, T) tensor, or a function of the (B, T) bool world-target mask returning one
(read only where the mask is True), e.g. the selected positions re-scored at T = 1 from the same forward."""


@dataclass
class EchoLossOutput:
    """The loss to backpropagate, its two terms and detached scalar metrics (rfcs/0004 §6 lists every key).

    ``policy_loss`` is the trainer's (or the core's) policy term, graph-connected; ``world_loss`` is λ·L_world,
    graph-connected when λ ≠ 0 and a detached zero when λ = 0 (then ``loss is policy_loss``)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    world_loss: torch.Tensor
    metrics: dict[str, torch.Tensor]

    def metrics_as_floats(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.metrics.items()}


@dataclass
class TokenWeights:
    """The objective as per-token weights: ``L = Σ policy_loss_t · policy + λ · Σ (-ℓ_t) · world``.

    ``policy`` (B, T) float64: ``u_{i,t} = a_{i,t} · s_i / D_policy`` (multiply by the advantage for an
    importance-sampling loss); ``world`` (B, T) float64: ``λ · w_{i,t}``, λ already applied (a trainer multiplies
    it by nothing but ``-ℓ_t``); ``policy_mask`` / ``world_mask`` (B, T) bool: the targets of each term;
    ``world_model_coeff``: λ at the step (for logging; ``world`` already carries it)."""

    policy_mask: torch.Tensor
    policy: torch.Tensor
    world_mask: torch.Tensor
    world: torch.Tensor
    world_model_coeff: float
    metrics: dict[str, float] = field(default_factory=dict)


def local_denominators(batch: EchoBatch, cfg: EchoConfig) -> Denominators:
    """This batch's own counts; sum them over micro-batches (``Denominators.total``) and ranks
    (``.all_reduce()``) for the global ones of an optimizer step."""
    return _denominators(select_targets(batch, cfg))


def token_weights(
    batch: EchoBatch, cfg: EchoConfig, *, step: int = 0, denominators: Denominators | None = None
) -> TokenWeights:
    """Per-token weights of both terms of ``batch`` (``denominators``: the optimizer batch's global counts)."""
    t = select_targets(batch, cfg)
    dens = denominators or _denominators(t)
    metrics = {k: float(v) for k, v in _count_metrics(batch, t).items()}
    lam = cfg.coeff_at(step)
    metrics["echo/world_model_coeff"] = lam
    return TokenWeights(
        policy_mask=t.action,
        policy=_policy_weights(t, cfg, dens),
        world_mask=t.selected,
        world=lam * _world_weights(t, cfg, dens),
        world_model_coeff=lam,
        metrics=metrics,
    )


def echo_loss(
    logps: torch.Tensor,
    batch: EchoBatch,
    cfg: EchoConfig,
    *,
    step: int = 0,
    denominators: Denominators | None = None,
    env_logps: EnvLogps | None = None,
    policy_loss: torch.Tensor | None = None,
) -> EchoLossOutput:
    """The ECHO loss of one (micro-)batch.

    ``logps`` (B, T): per-token log-probs aligned with ``batch.role_ids`` (grad-enabled). ``denominators``: the
    global counts of the optimizer batch (default: this batch's own, i.e. one big batch). ``env_logps``: log-probs
    for the world term when they differ from ``logps`` (``cfg.env_temperature="one"`` with a sampling temperature
    ≠ 1), as a tensor or a function of the world-target mask; used for the world CE at every λ, 0 included.
    ``policy_loss``: the trainer's own policy loss (TRL, torchrl, SkyRL); without it the core computes a clipped
    GRPO/PPO surrogate from ``batch.advantages`` (``cfg.policy``). ``cfg.verifier_free`` replaces the policy term
    by a graph-connected zero.
    """
    if tuple(logps.shape) != batch.shape:
        raise ValueError(f"logps shape {tuple(logps.shape)} != role_ids shape {batch.shape}")
    t = select_targets(batch, cfg)
    dens = denominators or _denominators(t)
    lam = cfg.coeff_at(step)

    pmetrics: dict[str, torch.Tensor] = {}
    if cfg.verifier_free:
        policy = _connected_zero(logps)
    elif policy_loss is not None:
        policy = policy_loss
    else:
        policy, pmetrics = _core_policy_term(logps, batch, cfg, t, dens)

    lp_env = logps
    if env_logps is not None:
        lp_env = env_logps(t.selected) if callable(env_logps) else env_logps
        if tuple(lp_env.shape) != batch.shape:
            raise ValueError(f"env_logps shape {tuple(lp_env.shape)} != role_ids shape {batch.shape}")
    w = _world_weights(t, cfg, dens)
    if lam != 0.0:
        unscaled = _weighted_nll(lp_env, t.selected, w)
        world = lam * unscaled
        loss = policy + world
    else:  # λ = 0: nothing enters the graph (bit-identical to the policy loss); the CE is still reported
        with torch.no_grad():
            unscaled = _weighted_nll(lp_env.detach(), t.selected, w)
        world = torch.zeros((), dtype=unscaled.dtype, device=logps.device)
        loss = policy

    metrics = _metrics(lp_env, batch, cfg, t, loss, policy, world, unscaled, lam)
    metrics.update({k: v.detach().float() for k, v in pmetrics.items()})
    return EchoLossOutput(loss=loss, policy_loss=policy, world_loss=world, metrics=metrics)


# -- internals --------------------------------------------------------------------------------------------------
def _denominators(t: Targets) -> Denominators:
    return Denominators(
        policy_tokens=float(t.action.sum()),
        policy_sequences=float(t.policy_rows.sum()),
        world_tokens=float(t.selected.sum()),
        world_sequences=float(t.real_rows.sum()),
    )


def _world_weights(t: Targets, cfg: EchoConfig, dens: Denominators) -> torch.Tensor:
    """(B, T) world weights w (without λ): ``c_{i,t} · s_i / D`` for the configured normalization."""
    per_row = t.obs_count if cfg.sequence_denominator == "full_observation" else t.selected.sum(dim=1)
    return term_weights(
        t.coeffs, cfg.normalization, dens.world_tokens, dens.world_sequences, per_row, cfg.constant_denominator
    )


def _policy_weights(t: Targets, cfg: EchoConfig, dens: Denominators) -> torch.Tensor:
    """(B, T) policy weights u: ``a_{i,t} · s_i / D_policy``."""
    mask = t.action.to(torch.float64)
    p = cfg.policy
    return term_weights(
        mask, p.normalization, dens.policy_tokens, dens.policy_sequences, mask.sum(dim=1), p.constant_denominator
    )


def _accumulation_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 for float64 inputs, float32 otherwise (bf16/fp16 log-probs are summed in float32)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _weighted_nll(logps: torch.Tensor, selected: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``-Σ w·ℓ`` over ``selected``; unselected positions are replaced by 0 before the product, so a placeholder
    log-prob (-inf, NaN) can never leak into the sum or its gradient. Empty selection: a graph-connected zero."""
    acc = _accumulation_dtype(logps)
    masked = torch.where(selected, logps, torch.zeros((), dtype=logps.dtype, device=logps.device))
    return -(masked.to(acc) * weights.to(acc)).sum()


def _connected_zero(x: torch.Tensor) -> torch.Tensor:
    """A scalar 0 that is part of ``x``'s graph (``backward()`` works, every gradient is exactly 0)."""
    none = torch.zeros_like(x, dtype=torch.bool)
    return torch.where(none, x, torch.zeros((), dtype=x.dtype, device=x.device)).to(_accumulation_dtype(x)).sum()


def _core_policy_term(
    logps: torch.Tensor, batch: EchoBatch, cfg: EchoConfig, t: Targets, dens: Denominators
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if batch.advantages is None:
        if t.policy_rows.any():
            raise ValueError("advantages are required unless every row is verifier-free (or pass policy_loss=)")
        return _connected_zero(logps), no_policy_metrics()  # the §6 key set never depends on the batch
    per_token, pmetrics = policy_token_losses(
        logps, t.action, batch.advantages, batch.old_logps, batch.ref_logps, cfg.policy
    )
    acc = _accumulation_dtype(logps)
    return (per_token.to(acc) * _policy_weights(t, cfg, dens).to(acc)).sum(), pmetrics


def _mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``total / count`` as float32, NaN when ``count`` is 0 (no data is not a perfect score)."""
    c = count.float()
    return torch.where(c > 0, total.float() / c.clamp(min=1), torch.full_like(c, math.nan))


def _count_metrics(batch: EchoBatch, t: Targets) -> dict[str, torch.Tensor]:
    """Token, rollout and length counts: what each term trains in this batch."""
    rid = batch.role_ids
    targetable = target_positions(rid, batch.includes_sequence_start)
    m: dict[str, torch.Tensor] = {}
    for role in Role:
        m[f"echo/tokens/{role.value}"] = (targetable & (rid == role.code)).sum().float()
    m["echo/tokens/policy"] = t.action.sum().float()
    m["echo/tokens/selected"] = t.selected.sum().float()
    m["echo/rollouts/total"] = t.real_rows.sum().float()
    m["echo/rollouts/env_kept"] = (t.real_rows & t.selected.any(dim=1)).sum().float()
    m["echo/rollouts/verifier_free"] = (t.real_rows & ~t.policy_rows).sum().float()
    starts = t.action & ~torch.nn.functional.pad(t.action[:, :-1], (1, 0), value=False)
    m["echo/length/policy_tokens"] = _mean(t.action.sum(), t.policy_rows.sum())
    m["echo/length/world_tokens"] = _mean(t.selected.sum(), t.real_rows.sum())
    m["echo/length/turns"] = _mean(starts.sum(), t.policy_rows.sum())
    return m


def _metrics(
    lp_env: torch.Tensor,
    batch: EchoBatch,
    cfg: EchoConfig,
    t: Targets,
    loss: torch.Tensor,
    policy: torch.Tensor,
    world: torch.Tensor,
    unscaled: torch.Tensor,
    lam: float,
) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        nll = torch.where(t.selected, -lp_env.detach().float(), torch.zeros((), device=lp_env.device))
        m: dict[str, torch.Tensor] = {
            "echo/loss": loss.detach().float(),
            "echo/policy_loss": policy.detach().float(),
            "echo/world_loss": world.detach().float(),
            "echo/world_loss_unscaled": unscaled.detach().float(),
            "echo/world_model_coeff": torch.tensor(lam, dtype=torch.float32, device=lp_env.device),
            "echo/env_ce_per_token": _mean(nll.sum(), t.selected.sum()),
        }
        for role in sorted(cfg.target_roles, key=lambda r: r.code):
            mask = t.selected & (batch.role_ids == role.code)
            m[f"echo/ce_per_token/{role.value}"] = _mean(torch.where(mask, nll, 0.0).sum(), mask.sum())
        m.update(_count_metrics(batch, t))
    return m
