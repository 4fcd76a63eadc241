"""TRL adapter, hidden-state capture: the policy forward's last hidden states, for the T = 1 world term without a
second forward (``env_temperature="one"`` with a sampling temperature ≠ 1)."""

from __future__ import annotations

from typing import Any

import torch


class _HiddenCapture:
    """Forward hook on the LM backbone that keeps the last hidden states of the policy forward (for T=1 CE)."""

    def __init__(self) -> None:
        self.chunks: list[torch.Tensor] = []

    def attach(self, model: torch.nn.Module) -> Any:
        backbone = _backbone(model)

        def hook(_module: Any, _args: Any, output: Any) -> None:
            h = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
            self.chunks.append(h)

        return backbone.register_forward_hook(hook)

    def take(self) -> torch.Tensor | None:
        h = torch.cat(self.chunks, dim=0) if self.chunks else None
        self.chunks = []
        return h


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    m: Any = getattr(model, "module", model)  # DDP / accelerate wrappers
    if hasattr(m, "get_base_model"):  # PEFT
        m = m.get_base_model()
    unwrapped: torch.nn.Module = m
    return unwrapped


def _backbone(model: torch.nn.Module) -> torch.nn.Module:
    base = _unwrap(model).base_model  # a transformers model's backbone (``PreTrainedModel.base_model``)
    assert isinstance(base, torch.nn.Module)
    return base
