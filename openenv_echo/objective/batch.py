"""``EchoBatch``: the per-token and per-row tensors the ECHO loss reads besides the log-probs."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from .selection import check_role_ids


@dataclass
class EchoBatch:
    """Role ids plus the RL inputs of one (micro-)batch, all aligned with the ``logps`` tensor.

    * ``role_ids`` (B, T) int: role of token t as a target, -1 on padding.
    * ``advantages`` (B,) or (B, T): policy advantages (may be ``None`` only for a verifier-free batch).
    * ``old_logps`` (B, T): log-probs of the policy that sampled (``None``: on-policy, the detached current ones).
    * ``ref_logps`` (B, T): reference log-probs for the KL term (needed when ``policy.kl_coeff > 0``).
    * ``obs_count`` (B,): |O_i| overrides (e.g. counted before truncation); default: counted from ``role_ids``.
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
        check_role_ids(self.role_ids)
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

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.role_ids.shape)  # type: ignore[return-value]

    def rows(self, index: slice | torch.Tensor) -> EchoBatch:
        """The sub-batch of the given rows (micro-batching, data-parallel sharding)."""
        updates = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                updates[f.name] = v[index]
        return replace(self, **updates)
