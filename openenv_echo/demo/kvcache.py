"""A KV-cache layer for the demo's sampler that writes new positions in place.

transformers' ``DynamicLayer`` appends each decoded token with ``torch.cat``, which copies the whole cache: on the
demo's small model, with 64 episodes of ~1,500 cached positions, those copies were a quarter of a rollout's time. A
turn's length is bounded (the cached positions, the fed chunk and at most ``max_action_tokens`` sampled ids), so the
sampler reserves that much once per turn and hands the model views of the filled part: the same tensors' values and
shapes as ``DynamicLayer``'s, without the copies."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
    """A ``DynamicLayer`` backed by a buffer of ``capacity`` positions; ``keys``/``values`` are views of its first
    ``length`` positions."""

    def __init__(self, capacity: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.capacity = capacity
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def reserve(
        self, like: tuple[torch.Tensor, torch.Tensor], shape: tuple[int, int, int, int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Allocate the keys' and values' buffers (dtypes and device of ``like``) for a batch whose first
        ``shape[2]`` positions are already cached; returns the views of those positions, for the caller to fill."""
        b, h, n, d = shape
        if n > self.capacity:
            raise ValueError(f"{n} cached positions exceed the reserved {self.capacity}")
        self._k, self._v = (x.new_zeros((b, h, self.capacity, d)) for x in like)
        return self._set(n)

    def row(self, i: int, length: int) -> ReservedLayer:
        """A layer over row ``i`` of this batch's buffers, its first ``length`` positions taken as cached: the
        positions a forward pass of that row alone adds are written into this batch's buffers."""
        assert self._k is not None and self._v is not None
        layer = ReservedLayer(self.capacity)
        layer._k, layer._v = self._k[i : i + 1], self._v[i : i + 1]
        layer._set(length)
        return layer

    def copy_row(self, src: int, dst: int) -> None:
        """Copy row ``src``'s buffered positions into row ``dst`` (an episode whose positions are ``src``'s)."""
        assert self._k is not None and self._v is not None
        self._k[dst], self._v[dst] = self._k[src], self._v[src]

    def fill(self, length: int) -> None:
        """Take the buffers' first ``length`` positions as cached (after rows were written through ``row``)."""
        self._set(length)

    def _set(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert self._k is not None and self._v is not None
        self.length = n
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]
        self.device = self._k.device
        self.is_initialized = True
        return self.keys, self.values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new positions after the cached ones and return every cached position (as ``DynamicLayer``)."""
        b, h, m, d = key_states.shape
        if self._k is None or self._v is None:
            self.reserve((key_states, value_states), (b, h, 0, d))
        assert self._k is not None and self._v is not None
        end = self.length + m
        if end > self.capacity:
            raise ValueError(f"the turn outgrew its reserved cache ({end} > {self.capacity} positions)")
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        return self._set(end)
