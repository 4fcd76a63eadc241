"""Global denominators and the per-token weights of both terms.

Every normalization is written as ``Σ_{i,t} weight_{i,t} · value_{i,t}`` with
``weight_{i,t} = mask_{i,t} · s_i / D``: ``s_i`` depends only on row i (so micro-batching never splits it) and ``D``
is one global scalar. Computing ``D`` once over the whole optimizer batch (all micro-batches, all data-parallel
ranks) makes the sum of micro-batch losses equal the full-batch loss exactly (pitfalls P6, P7). The policy and
world terms get independent denominators, so env tokens never dilute the policy term (P5, P1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ._config import Normalization


@dataclass(frozen=True)
class Denominators:
    """Global counts over the optimizer batch: D for each term and normalization.

    ``policy_tokens``: action tokens of rows with a policy term; ``policy_sequences``: such rows;
    ``world_tokens``: selected world-model tokens (after filters); ``world_sequences``: real rows.
    Sum the local ones of every micro-batch (``total``), all-reduce them over data-parallel ranks
    (``all_reduce``) and rescale for rank-averaged gradients (``per_rank``).
    """

    policy_tokens: float
    policy_sequences: float
    world_tokens: float
    world_sequences: float

    def __add__(self, other: Denominators) -> Denominators:
        return Denominators(
            self.policy_tokens + other.policy_tokens,
            self.policy_sequences + other.policy_sequences,
            self.world_tokens + other.world_tokens,
            self.world_sequences + other.world_sequences,
        )

    @classmethod
    def total(cls, parts: Iterable[Denominators]) -> Denominators:
        """Sum of local denominators (e.g. over the micro-batches of one optimizer step)."""
        out: Denominators | None = None
        for p in parts:
            out = p if out is None else out + p
        if out is None:
            raise ValueError("no denominators to sum")
        return out

    def per_rank(self, world_size: int) -> Denominators:
        """Denominators for data parallelism with *mean*-reduced gradients (DDP/FSDP average over ranks).

        Each rank's loss is its share of the global sum divided by ``D / world_size``, so the average over ranks
        equals the single-process full-batch gradient.
        """
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        w = float(world_size)
        return Denominators(
            self.policy_tokens / w, self.policy_sequences / w, self.world_tokens / w, self.world_sequences / w
        )

    def all_reduce(self, group: Any = None, device: torch.device | str | None = None) -> Denominators:
        """Sum over a ``torch.distributed`` process group (every rank must call this); itself when not distributed."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return self
        t = self.as_tensor(device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        return Denominators.from_tensor(t)

    def as_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        return torch.tensor(
            [self.policy_tokens, self.policy_sequences, self.world_tokens, self.world_sequences],
            dtype=torch.float64,
            device=device,
        )

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> Denominators:
        v = [float(x) for x in t.tolist()]
        if len(v) != 4:
            raise ValueError(f"expected 4 values, got {len(v)}")
        return cls(*v)


def term_weights(
    mask_coeffs: torch.Tensor,
    mode: Normalization,
    tokens_denominator: float,
    sequences_denominator: float,
    per_row_count: torch.Tensor,
    constant: int | None,
) -> torch.Tensor:
    """(B, T) weights ``mask_coeffs · s_i / D`` of one term.

    ``per_row_count`` is the per-row count of the sequence_mean mode (selected tokens or |O_i|): ``s_i = 1/count``,
    and ``s_i = 0`` for a row whose count is 0 (nothing to average over: the row has no term). An empty
    denominator gives all-zero weights (the term is an exact zero, still connected to the graph by the caller).
    """
    if mode == "token_mean":
        denom = tokens_denominator
    elif mode == "sequence_mean":
        denom = sequences_denominator
    elif mode == "constant":
        if constant is None:
            raise ValueError("constant normalization needs a constant denominator")
        denom = sequences_denominator * float(constant)
    else:  # pragma: no cover - pydantic restricts the values
        raise ValueError(f"unknown normalization {mode!r}")
    if denom <= 0:
        return torch.zeros_like(mask_coeffs)
    if mode == "sequence_mean":
        count = per_row_count.to(mask_coeffs.dtype)
        scale = torch.where(count > 0, 1.0 / count.clamp(min=1e-30), torch.zeros_like(count))
        return mask_coeffs * (scale.unsqueeze(1) / denom)
    return mask_coeffs * (1.0 / denom)
