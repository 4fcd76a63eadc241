"""``TokenizedTrajectory``: token ids with one role per token, and batch collation to torch tensors.

Conventions (normative text: ``rfcs/0003-token-masks.md``):

* ``role_ids[t]`` is the ``Role.code`` of token ``t`` (context 0, action 1, env_output 2, warning 3); in a
  batch, padding has ``PAD_ROLE_CODE`` (-1). Every real token has exactly one role.
* A boolean mask ``mask(role)[t]`` refers to token ``t`` **as a prediction target** (predicted by the logits
  at ``t-1``); position 0 of every sequence, and the first real token after left padding, is never a target,
  so every mask is False there. ``role_ids`` itself is not shifted.
* ``obs_count`` is |O|, the number of observation *body* tokens (``env_output`` + ``warning``) after the first
  action, of the whole trajectory **before truncation** (the paper's per-sequence normalizer; one definition,
  ``openenv_echo.roles.observation_count``); ``num_truncated`` counts the tokens cut from the tail. Masks only
  ever cover tokens that are present.
* Padding is carried by ``attention_mask`` and ``role_ids == -1``, never inferred from token values, so a pad
  id equal to the eos id cannot hide a real eos.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..roles import PAD_ROLE_CODE, Role, target_positions
from ..wire import TokenizerIdentity

if TYPE_CHECKING:
    import torch

MASK_KEYS: dict[Role, str] = {r: f"{r.value}_mask" for r in Role}


_ACT_B = bytes((Role.ACTION.code,))
_ENV_B = bytes((Role.ENV_OUTPUT.code,))
_WARN_B = bytes((Role.WARNING.code,))


def sequence_observation_count(role_ids: np.ndarray | bytes | bytearray) -> int:
    """``roles.observation_count`` of one sequence's role codes (int8 array or bytes), counted on the bytes:
    C speed, it runs for every sequence built."""
    b = role_ids if isinstance(role_ids, (bytes, bytearray)) else np.ascontiguousarray(role_ids, np.int8).tobytes()
    first = b.find(_ACT_B)
    if first < 0:
        return 0
    return b.count(_ENV_B, first + 1) + b.count(_WARN_B, first + 1)


@dataclass(eq=False)
class TokenizedTrajectory:
    """One sequence: ``input_ids`` and aligned ``role_ids`` (numpy, 1-D), plus per-sequence counts."""

    input_ids: np.ndarray
    role_ids: np.ndarray
    obs_count: int
    num_truncated: int = 0
    method: str = "tito"
    tokenizer: TokenizerIdentity | None = None
    episode_id: str | None = None
    reward: float | None = None
    stats: dict[str, int] = field(default_factory=dict)
    sampler_logprobs: np.ndarray | None = None
    """float32 per token: the sampler's log-probability of sampled action tokens, NaN elsewhere (None: none)."""
    sampling_temperature: float | None = None
    turn: int | None = None
    """Step-wise mode: the assistant turn (0-based) this sequence trains; None for a whole-episode sequence."""

    def __post_init__(self) -> None:
        self.input_ids = np.asarray(self.input_ids, dtype=np.int64).reshape(-1)
        self.role_ids = np.asarray(self.role_ids, dtype=np.int8).reshape(-1)
        if self.input_ids.shape != self.role_ids.shape:
            raise ValueError(f"input_ids has {self.input_ids.size} tokens but role_ids has {self.role_ids.size}")
        if self.sampler_logprobs is not None:
            self.sampler_logprobs = np.asarray(self.sampler_logprobs, dtype=np.float32).reshape(-1)
            if self.sampler_logprobs.shape != self.input_ids.shape:
                raise ValueError("sampler_logprobs must have one value per token (NaN where not sampled)")
        if self.role_ids.size and (self.role_ids.min() < 0 or self.role_ids.max() > 3):
            raise ValueError("role_ids must be Role codes 0..3 (padding only exists in collated batches)")
        if self.input_ids.size and self.input_ids.min() < 0:
            raise ValueError("input_ids must be non-negative")
        kept_obs = sequence_observation_count(self.role_ids)
        if self.obs_count < kept_obs:
            raise ValueError(
                f"obs_count={self.obs_count} is below the {kept_obs} observation body tokens present after the first "
                "action"
            )
        if self.num_truncated < 0:
            raise ValueError("num_truncated must be >= 0")

    def __len__(self) -> int:
        return int(self.input_ids.size)

    @property
    def roles(self) -> list[Role]:
        return [Role.from_code(int(c)) for c in self.role_ids]

    def mask(self, role: Role | str) -> np.ndarray:
        """Target mask of ``role``: True where token t has that role, never at t=0."""
        mask: np.ndarray = (self.role_ids == Role(role).code) & target_positions(self.role_ids)
        return mask

    def target_mask(self, roles: Iterable[Role | str]) -> np.ndarray:
        """Union of target masks (e.g. ``(env_output,)`` for the paper's ECHO target O')."""
        codes = [Role(r).code for r in roles]
        mask: np.ndarray = np.isin(self.role_ids, codes) & target_positions(self.role_ids)
        return mask

    def masks(self) -> dict[str, np.ndarray]:
        return {MASK_KEYS[r]: self.mask(r) for r in Role}

    def role_counts(self) -> dict[Role, int]:
        """Tokens per role (all positions, including t=0)."""
        counts = np.bincount(self.role_ids.astype(np.int64), minlength=4)
        return {r: int(counts[r.code]) for r in Role}

    def truncate(self, max_length: int) -> TokenizedTrajectory:
        """Keep the first ``max_length`` tokens (ids and roles together); the cut tail adds to
        ``num_truncated``; ``obs_count`` stays the pre-truncation |O|."""
        if not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be a positive int, got {max_length!r}")
        if len(self) <= max_length:
            return self
        return replace(
            self,
            input_ids=self.input_ids[:max_length].copy(),
            role_ids=self.role_ids[:max_length].copy(),
            sampler_logprobs=None if self.sampler_logprobs is None else self.sampler_logprobs[:max_length].copy(),
            num_truncated=self.num_truncated + len(self) - max_length,
            stats=dict(self.stats),
        )

    def role_text(self, tokenizer: Any, role: Role | str) -> str:
        """The tokens of ``role`` decoded in order, as one fragment (special tokens kept)."""
        from .fragment_encoding import fragment_codec

        ids = self.input_ids[self.role_ids == Role(role).code]
        return fragment_codec(tokenizer).decode(ids.tolist())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (ids and role codes as lists)."""
        return {
            "input_ids": self.input_ids.tolist(),
            "role_ids": self.role_ids.tolist(),
            "obs_count": int(self.obs_count),
            "num_truncated": int(self.num_truncated),
            "method": self.method,
            "tokenizer": None if self.tokenizer is None else self.tokenizer.model_dump(),
            "episode_id": self.episode_id,
            "reward": self.reward,
            "stats": dict(self.stats),
            "sampler_logprobs": logprobs_list(self.sampler_logprobs),
            "sampling_temperature": self.sampling_temperature,
            "turn": self.turn,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TokenizedTrajectory:
        missing = {"input_ids", "role_ids", "obs_count"} - set(d)
        if missing:
            raise ValueError(f"not a tokenized trajectory: missing {sorted(missing)}")
        tok = d.get("tokenizer")
        return cls(
            input_ids=np.asarray(d["input_ids"], dtype=np.int64),
            role_ids=np.asarray(d["role_ids"], dtype=np.int8),
            obs_count=int(d["obs_count"]),
            num_truncated=int(d.get("num_truncated", 0)),
            method=str(d.get("method", "tito")),
            tokenizer=None if tok is None else TokenizerIdentity.model_validate(tok),
            episode_id=d.get("episode_id"),
            reward=d.get("reward"),
            stats={str(k): int(v) for k, v in (d.get("stats") or {}).items()},
            sampler_logprobs=None
            if d.get("sampler_logprobs") is None
            else np.asarray([np.nan if v is None else v for v in d["sampler_logprobs"]], dtype=np.float32),
            sampling_temperature=d.get("sampling_temperature"),
            turn=d.get("turn"),
        )


def logprobs_list(values: np.ndarray | None) -> list[float | None] | None:
    """Per-token sampler log-probs as a JSON/Arrow list (None where a token was not sampled)."""
    if values is None:
        return None
    return [None if v != v else v for v in values.tolist()]  # v != v: NaN


def _pad_id(pad_token_id: int | None, tokenizer: Any) -> int:
    if pad_token_id is None and tokenizer is not None:
        pad_token_id = getattr(tokenizer, "pad_token_id", None)
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "eos_token_id", None)
    if pad_token_id is None:
        return 0  # any value works: padding is carried by attention_mask / role_ids, never by the id
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, (int, np.integer)) or pad_token_id < 0:
        raise ValueError(f"pad_token_id must be a non-negative int, got {pad_token_id!r}")
    return int(pad_token_id)


def collate(
    items: Sequence[TokenizedTrajectory],
    *,
    pad_token_id: int | None = None,
    tokenizer: Any = None,
    padding_side: str = "right",
    max_length: int | None = None,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """Pad (and first truncate, tail-first) a batch into torch tensors.

    Returns ``input_ids``, ``attention_mask``, ``position_ids`` (0.. over real tokens, 0 on padding),
    ``role_ids`` (-1 on padding) as int64 ``(B, T)``; the bool target masks ``context_mask``, ``action_mask``,
    ``env_output_mask``, ``warning_mask`` ``(B, T)`` (False on padding and on each row's first real token);
    and per-row int64 ``lengths`` (real tokens), ``obs_count`` (|O| before truncation) and ``num_truncated``.
    Sampler metadata: ``sampler_logprobs`` float32 ``(B, T)`` (the inference engine's log-probability of each
    sampled action token, aligned like the masks with token t; 0 where absent), ``sampler_logprobs_mask`` bool
    ``(B, T)`` (where it is present) and ``sampling_temperature`` float32 ``(B,)`` (NaN when unknown), for
    importance correction against the engine.
    ``pad_token_id`` defaults to the tokenizer's pad, then eos, then 0; its value never affects a mask.
    """
    import torch

    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    if not items:
        raise ValueError("cannot collate an empty batch")
    if pad_to_multiple_of is not None and (not isinstance(pad_to_multiple_of, int) or pad_to_multiple_of < 1):
        raise ValueError(f"pad_to_multiple_of must be a positive int, got {pad_to_multiple_of!r}")
    for i, it in enumerate(items):
        if not isinstance(it, TokenizedTrajectory):
            raise TypeError(f"items[{i}] is {type(it).__name__}, expected TokenizedTrajectory")
    pad = _pad_id(pad_token_id, tokenizer)
    rows = [it.truncate(max_length) if max_length is not None else it for it in items]
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    width = int(lengths.max()) if len(rows) else 0
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    width = max(width, 1)
    b = len(rows)
    ids = np.full((b, width), pad, dtype=np.int64)
    roles = np.full((b, width), PAD_ROLE_CODE, dtype=np.int64)
    attn = np.zeros((b, width), dtype=np.int64)
    pos = np.zeros((b, width), dtype=np.int64)
    for i, r in enumerate(rows):
        n = len(r)
        start = 0 if padding_side == "right" else width - n
        sl = slice(start, start + n)
        ids[i, sl] = r.input_ids
        roles[i, sl] = r.role_ids
        attn[i, sl] = 1
        pos[i, sl] = np.arange(n)
    out: dict[str, torch.Tensor] = {
        "input_ids": torch.from_numpy(ids),
        "attention_mask": torch.from_numpy(attn),
        "position_ids": torch.from_numpy(pos),
        "role_ids": torch.from_numpy(roles),
    }
    targetable = target_positions(roles)  # the shared rule: not padding, not a row's first real token
    for role in Role:
        out[MASK_KEYS[role]] = torch.from_numpy((roles == role.code) & targetable)
    logp = np.full((b, width), np.nan, dtype=np.float32)
    for i, r in enumerate(rows):
        if r.sampler_logprobs is not None:
            start = 0 if padding_side == "right" else width - len(r)
            logp[i, start : start + len(r)] = r.sampler_logprobs
    has_logp = ~np.isnan(logp)
    out["sampler_logprobs"] = torch.from_numpy(np.where(has_logp, logp, 0.0).astype(np.float32))
    out["sampler_logprobs_mask"] = torch.from_numpy(has_logp & (attn == 1))
    out["sampling_temperature"] = torch.tensor(
        [np.nan if r.sampling_temperature is None else r.sampling_temperature for r in rows], dtype=torch.float32
    )
    out["lengths"] = torch.from_numpy(lengths)
    out["obs_count"] = torch.tensor([r.obs_count for r in rows], dtype=torch.int64)
    out["num_truncated"] = torch.tensor([r.num_truncated for r in rows], dtype=torch.int64)
    return out
