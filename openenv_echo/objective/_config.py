"""``EchoConfig``: every knob of the ECHO objective, validated once, in one place.

The objective is ``L = L_policy(action tokens) + λ(step) · L_world(selected observation tokens)`` where both
terms come from the same per-token log-probs (one forward pass). ``world_model_coeff = 0`` is vanilla RL, bit
for bit. See ``rfcs/0004-echo-objective.md`` for the normative formulas; field docs here say what each knob does.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..roles import WORLD_LOSS_TARGETS, Role, WorldLossTarget, check_world_loss_target

Normalization = Literal["token_mean", "sequence_mean", "constant"]


class CoeffSchedule(BaseModel):
    """How ``world_model_coeff`` evolves with the optimizer step.

    * ``constant``: λ(step) = λ₀.
    * ``linear_decay``: λ₀ until ``start_step``, then linear to ``end_coeff`` over ``decay_steps``, then flat.
    * ``step``: λ₀ until ``boundaries[0]``; from ``boundaries[k]`` on, ``values[k]``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["constant", "linear_decay", "step"] = "constant"
    end_coeff: float | None = Field(default=None, ge=0.0, description="linear_decay: λ reached at the end.")
    decay_steps: int | None = Field(default=None, gt=0, description="linear_decay: steps from λ₀ to end_coeff.")
    start_step: int = Field(default=0, ge=0, description="linear_decay: step at which the decay starts.")
    boundaries: list[int] = Field(default_factory=list, description="step: steps at which λ changes.")
    values: list[float] = Field(default_factory=list, description="step: λ from each boundary on.")

    @model_validator(mode="after")
    def _check(self) -> CoeffSchedule:
        if self.kind == "linear_decay" and (self.end_coeff is None or self.decay_steps is None):
            raise ValueError("schedule kind 'linear_decay' needs end_coeff and decay_steps")
        if self.kind == "step":
            if not self.boundaries or len(self.boundaries) != len(self.values):
                raise ValueError("schedule kind 'step' needs boundaries and values of the same non-zero length")
            if any(b < 0 for b in self.boundaries) or any(
                b2 <= b1 for b1, b2 in zip(self.boundaries, self.boundaries[1:])
            ):
                raise ValueError("schedule boundaries must be non-negative and strictly increasing")
            if any(not math.isfinite(v) or v < 0 for v in self.values):
                raise ValueError("schedule values must be finite and >= 0")
        if self.kind == "constant" and (self.boundaries or self.values or self.end_coeff is not None):
            raise ValueError("schedule kind 'constant' takes no end_coeff/boundaries/values")
        return self

    def at(self, base: float, step: int) -> float:
        """λ at optimizer ``step`` for a schedule starting from ``base``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.kind == "constant":
            return base
        if self.kind == "linear_decay":
            assert self.end_coeff is not None and self.decay_steps is not None
            frac = min(1.0, max(0.0, (step - self.start_step) / self.decay_steps))
            return base + (self.end_coeff - base) * frac
        value = base
        for boundary, v in zip(self.boundaries, self.values):
            if step >= boundary:
                value = v
        return value


class PolicyLossConfig(BaseModel):
    """The policy term of the core loss (a GRPO/PPO clipped surrogate on action tokens only).

    Only used by the trainer-free core loss and the adapters that do not own a policy loss (SkyRL's pure function
    delegates the policy half to SkyRL). TRL and torchrl keep their own policy loss.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_eps_low: float = Field(default=0.2, ge=0.0, lt=1.0)
    clip_eps_high: float = Field(default=0.2, ge=0.0)
    kl_coeff: float = Field(default=0.0, ge=0.0, description="β of the k3 KL estimator to a reference policy.")
    normalization: Normalization = Field(
        default="token_mean",
        description="token_mean: Σ/N_action (DAPO); sequence_mean: per-sequence mean then mean over sequences "
        "(GRPO); constant: Σ/(N_seq·constant_denominator) (Dr.GRPO).",
    )
    constant_denominator: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> PolicyLossConfig:
        if self.normalization == "constant" and self.constant_denominator is None:
            raise ValueError("policy normalization 'constant' needs constant_denominator (e.g. max completion length)")
        return self


class RolloutFilterConfig(BaseModel):
    """Per-group rollout filters for the *world* term only (the policy term is never filtered here).

    Applied per prompt group. A rollout is dropped from the world loss when its valid-tool-call share or its
    parse-clean share is below the threshold. ``min_correct_share = θ`` then keeps every correct survivor plus at
    most ``floor(n_correct · (1-θ)/θ)`` incorrect ones (the first ones in batch order), so that at least a share θ
    of the kept rollouts is correct. θ = 0 keeps everything (no division by zero); θ = 1 keeps only correct ones; a
    group with no correct survivor and θ > 0 keeps nothing (counted as an empty group). ``None`` disables a filter.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_valid_tool_call_share: float | None = Field(default=None, ge=0.0, le=1.0)
    min_parse_clean_share: float | None = Field(default=None, ge=0.0, le=1.0)
    min_correct_share: float | None = Field(default=None, ge=0.0, le=1.0)

    @property
    def active(self) -> bool:
        return any(
            v is not None for v in (self.min_valid_tool_call_share, self.min_parse_clean_share, self.min_correct_share)
        )


class EchoConfig(BaseModel):
    """Configuration of the ECHO objective (world-model CE on observation tokens next to the policy loss).

    Defaults are the published ECHO setting except λ (0.0 = vanilla RL; the paper used 0.05 with
    ``normalization="sequence_mean", sequence_denominator="full_observation"``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    world_model_coeff: float = Field(
        default=0.0, ge=0.0, description="λ: weight of the world-model CE. 0 = vanilla RL (no env term at all)."
    )
    schedule: CoeffSchedule = Field(default_factory=CoeffSchedule, description="How λ changes with the step.")
    world_loss_target: WorldLossTarget = Field(
        default="env_only",
        description="Which tokens after the first action are CE targets: env_only (env_output bodies; the paper), "
        "warning_only, warning_plus_env (RFC 010's 'all'), or full_observation (every non-action token, chat "
        "scaffolding included). 'all' is refused as ambiguous (see openenv_echo.roles).",
    )
    role_coeffs: dict[Role, float] = Field(
        default_factory=dict,
        description="Per-role multipliers of λ for the selected roles (default 1.0 each); a role must be selected "
        "by world_loss_target to get a coefficient.",
    )
    normalization: Normalization = Field(
        default="token_mean",
        description="token_mean: Σ w·CE / N_selected (global); sequence_mean: Σ_i (Σ_t w·CE / n_i) / N_seq; "
        "constant: Σ w·CE / (N_seq · constant_denominator) (Dr.GRPO style).",
    )
    sequence_denominator: Literal["selected", "full_observation"] = Field(
        default="selected",
        description="sequence_mean only: n_i = selected tokens of row i, or |O_i| = observation body tokens "
        "(env_output + warning) of row i after its first action, as the paper uses (a row with |O_i| = 0 has no "
        "world term).",
    )
    constant_denominator: int | None = Field(default=None, gt=0, description="constant only: the constant C.")
    env_temperature: Literal["one", "rollout"] = Field(
        default="one",
        description="Temperature of the env CE: 'one' scores observations with the model's own distribution "
        "(T=1); 'rollout' reuses the policy log-probs as the trainer computed them (divided by the sampling "
        "temperature, as the SkyRL reference did). Identical when the sampling temperature is 1.",
    )
    verifier_free: bool = Field(
        default=False, description="Drop the policy term for the whole batch: train only λ·CE (no rewards)."
    )
    keep_zero_variance_env: bool = Field(
        default=True,
        description="Groups whose rewards are all equal have zero advantage; keep their env term (default).",
    )
    filters: RolloutFilterConfig = Field(default_factory=RolloutFilterConfig)
    policy: PolicyLossConfig = Field(default_factory=PolicyLossConfig)

    @field_validator("world_loss_target", mode="before")
    @classmethod
    def _known_target(cls, v: object) -> object:
        return check_world_loss_target(v) if isinstance(v, str) else v

    @field_validator("world_model_coeff")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("world_model_coeff must be finite")
        return v

    @field_validator("role_coeffs")
    @classmethod
    def _role_coeffs_finite(cls, v: dict[Role, float]) -> dict[Role, float]:
        for role, c in v.items():
            if role == Role.ACTION:
                raise ValueError("the action role is the policy target and cannot carry a world-model coefficient")
            if not math.isfinite(c) or c < 0:
                raise ValueError(f"role coefficient for {role.value} must be finite and >= 0, got {c}")
        return v

    @model_validator(mode="after")
    def _check(self) -> EchoConfig:
        selected = WORLD_LOSS_TARGETS[self.world_loss_target]
        extra = set(self.role_coeffs) - selected
        if extra:
            names = ", ".join(sorted(r.value for r in extra))
            raise ValueError(
                f"role_coeffs has {names}, which world_loss_target={self.world_loss_target!r} does not select "
                f"(it selects {sorted(r.value for r in selected)})"
            )
        if self.normalization == "constant" and self.constant_denominator is None:
            raise ValueError("normalization 'constant' needs constant_denominator (e.g. the max sequence length)")
        if self.verifier_free and self.world_model_coeff == 0 and self.schedule.kind == "constant":
            raise ValueError("verifier_free with world_model_coeff=0 trains nothing")
        return self

    # -- derived ---------------------------------------------------------------------------------------------
    def coeff_at(self, step: int = 0) -> float:
        """λ at optimizer ``step`` (after the schedule)."""
        return self.schedule.at(self.world_model_coeff, step)

    def role_coeff(self, role: Role) -> float:
        """Multiplier of λ for tokens of ``role`` (0 when the role is not a target). A selected role with
        coefficient 0 is treated as not selected: its tokens are in no count, no denominator and no metric."""
        if role not in WORLD_LOSS_TARGETS[self.world_loss_target]:
            return 0.0
        return float(self.role_coeffs.get(role, 1.0))

    @property
    def target_roles(self) -> frozenset[Role]:
        """The roles the world term trains: selected by ``world_loss_target`` and with a coefficient > 0."""
        return frozenset(r for r in WORLD_LOSS_TARGETS[self.world_loss_target] if self.role_coeff(r) > 0)
