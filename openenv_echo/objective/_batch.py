"""``EchoBatch``: the per-token and per-row tensors the ECHO loss reads besides the log-probs."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from ..roles import PAD_ROLE_CODE, Role, observation_count

_MAX_CODE = max(r.code for r in Role)


def _check_role_ids(role_ids: torch.Tensor) -> None:
    """Raise a clear error unless ``role_ids`` is a (B, T) integer tensor of known role codes."""
    if not isinstance(role_ids, torch.Tensor):
        raise TypeError(f"role_ids must be a torch.Tensor, got {type(role_ids).__name__}")
    if role_ids.dim() != 2:
        raise ValueError(f"role_ids must have shape (B, T), got {tuple(role_ids.shape)}")
    if role_ids.dtype.is_floating_point or role_ids.dtype == torch.bool:
        raise TypeError(f"role_ids must be an integer tensor, got {role_ids.dtype}")
    if role_ids.numel():
        lo, hi = int(role_ids.min()), int(role_ids.max())
        if lo < PAD_ROLE_CODE or hi > _MAX_CODE:
            raise ValueError(f"role_ids has codes outside [{PAD_ROLE_CODE}, {_MAX_CODE}]: {lo}..{hi}")


@dataclass
class EchoBatch:
    """Role ids plus the RL inputs of one (micro-)batch, all aligned with the ``logps`` tensor.

    * ``role_ids`` (B, T) int: role of token t as a target, -1 on padding (``openenv_echo.roles``).
    * ``advantages`` (B,) or (B, T): policy advantages (may be ``None`` when the trainer owns the policy loss or
      the batch is verifier-free).
    * ``old_logps`` (B, T): log-probs of the policy that sampled (``None``: on-policy, the detached current ones).
    * ``ref_logps`` (B, T): reference log-probs for the KL term (needed when ``policy.kl_coeff > 0``).
    * ``obs_count`` (B,): |O_i| counted before truncation (``collate(...)["obs_count"]``); default: counted from
      ``role_ids`` with the same rule (``openenv_echo.roles.observation_count``). Never below the count of
      the observation tokens present.
    * ``verifier_free`` (B,) bool: rows without a reward signal; they get no policy term, only the env term.
    * ``env_keep`` (B,) bool: rows whose env term is kept (rollout filters, zero-variance rule); default all.
    * ``includes_sequence_start``: rows start at the real sequence start (the first real token is never a
      target); ``False`` for completion slices (TRL, SkyRL) whose first token is predicted by the prompt.
    """

    role_ids: torch.Tensor
    advantages: torch.Tensor | None = None
    old_logps: torch.Tensor | None = None
    ref_logps: torch.Tensor | None = None
    obs_count: torch.Tensor | None = None
    verifier_free: torch.Tensor | None = None
    env_keep: torch.Tensor | None = None
    includes_sequence_start: bool = True

    def __post_init__(self) -> None:
        _check_role_ids(self.role_ids)
        b, t = self.role_ids.shape
        if self.advantages is not None and tuple(self.advantages.shape) not in ((b,), (b, t)):
            raise ValueError(f"advantages must have shape ({b},) or ({b}, {t}), got {tuple(self.advantages.shape)}")
        for name in ("old_logps", "ref_logps"):
            v = getattr(self, name)
            if v is not None and tuple(v.shape) != (b, t):
                raise ValueError(f"{name} must have shape ({b}, {t}), got {tuple(v.shape)}")
        for name in ("obs_count", "verifier_free", "env_keep"):
            v = getattr(self, name)
            if v is not None and tuple(v.shape) != (b,):
                raise ValueError(f"{name} must have shape ({b},), got {tuple(v.shape)}")
        for name in ("verifier_free", "env_keep"):
            v = getattr(self, name)
            if v is not None and v.dtype != torch.bool:
                raise TypeError(f"{name} must be a bool tensor, got {v.dtype}")
        if self.obs_count is not None:
            present = observation_count(self.role_ids).to(self.obs_count.device)
            if bool((self.obs_count < present).any()):
                raise ValueError(
                    "obs_count is below the observation body tokens present after the first action in some row "
                    "(|O_i| counts env_output + warning after the first action, before truncation)"
                )

    @property
    def shape(self) -> tuple[int, int]:
        b, t = self.role_ids.shape
        return int(b), int(t)

    def rows(self, index: slice | torch.Tensor) -> EchoBatch:
        """The sub-batch of the given rows (micro-batching, data-parallel sharding)."""
        updates: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                updates[f.name] = v[index]
        return replace(self, **updates)
