"""The optimizers of the demo's training phases: AdamW for every phase, and for GRPO + ECHO's world term, optionally,
Adam with one second moment per parameter tensor (``TensorAdam``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from .config import WORLD_OPTIMIZERS

BETAS = (0.9, 0.95)


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.AdamW:
    """The optimizer of every phase: SFT continues the generic phase's state; every RL run starts a fresh one."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=0.0)


class TensorAdam(torch.optim.Optimizer):
    """Adam whose second moment is one number per parameter tensor (the EMA of its mean squared gradient).

    A tensor's root-mean-square step is AdamW's at the first step (``lr``), but within the tensor each coordinate
    moves in proportion to its own gradient instead of about ``lr`` whatever its size: a weight the loss barely
    reaches barely moves. This is Adam-mini's idea with one block per tensor; its package's partition (a block per
    attention head, and per token row of the embeddings and head) would normalise exactly the rows this is meant to
    leave unnormalised, so it is not used. No weight decay."""

    def __init__(
        self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = BETAS, eps: float = 1e-8
    ):
        if lr <= 0 or eps <= 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"TensorAdam needs lr > 0, eps > 0 and betas in [0, 1), not {lr}, {eps}, {betas}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros((), dtype=p.dtype, device=p.device)
                state["step"] += 1
                t = state["step"]
                state["m"].lerp_(p.grad, 1 - b1)
                state["v"].mul_(b2).add_(p.grad.square().mean(), alpha=1 - b2)
                denom = (state["v"] / (1 - b2**t)).sqrt().add_(group["eps"])
                p.add_(state["m"] / denom, alpha=-group["lr"] / (1 - b1**t))
        return loss


def make_world_optimizer(model: torch.nn.Module, lr: float, kind: str) -> torch.optim.Optimizer:
    """GRPO + ECHO's world-term optimizer (``WORLD_OPTIMIZERS``), fresh for every run."""
    if kind == "adamw":
        return make_optimizer(model, lr)
    if kind == "adam_tensorwise":
        return TensorAdam(model.parameters(), lr=lr)
    raise ValueError(f"world optimizer must be one of {WORLD_OPTIMIZERS}, not {kind!r}")
