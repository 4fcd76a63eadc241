"""Pieces the runnable trainer recipes (``examples/trainers/<trainer>/train.py``) share: a tiny offline model, the
terminal env's worlds and action format, and a per-role gradient probe that shows where the loss's gradient goes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..roles import PAD_ROLE_CODE, Role

SYSTEM_PROMPT = (
    "You are the on-call engineer on a Linux host with an incident. Run one shell command per turn; when you know "
    "the cause, answer with `submit <kind> <service>`."
)


def tiny_causal_lm(tokenizer: Any, *, seed: int = 0, hidden: int = 32, layers: int = 2) -> torch.nn.Module:
    """A randomly initialised tiny ``Qwen2ForCausalLM`` for ``tokenizer`` (built from a config: no download)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model: torch.nn.Module = Qwen2ForCausalLM(cfg)
    model.float()
    return model


def load_model(name: str | None, *, seed: int = 0) -> tuple[torch.nn.Module, Any]:
    """``(model, tokenizer)``: ``name`` is a ``from_pretrained`` path/id, or None for the offline tiny model."""
    if name:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(name)
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(name)
        model.float()
        return model, tok
    from ..tokenize import build_tokenizer

    tok = build_tokenizer("qwen")
    return tiny_causal_lm(tok, seed=seed), tok


def terminal_worlds(n: int, max_steps: int, first_seed: int = 0) -> list[dict[str, Any]]:
    """Reset options of ``n`` terminal-env worlds (one per GRPO group): a seed each, and the episode's step cap."""
    return [{"seed": first_seed + i, "max_steps": max_steps} for i in range(n)]


def command_action(text: str) -> dict[str, Any]:
    """The terminal env's action for a sampled action text."""
    return {"command": text.strip()}


class RoleGradients:
    """Sums |∂loss/∂log p(token)| per role over the positions of a (B, T) log-prob tensor: how much of the loss's
    gradient reaches the prediction of each kind of token. Attach with :meth:`watch` on a grad-enabled tensor."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def watch(self, logps: torch.Tensor, role_ids: torch.Tensor) -> None:
        if not logps.requires_grad:
            return
        roles = role_ids.detach().clone()

        def hook(grad: torch.Tensor) -> None:
            for role in Role:
                g = grad[roles == role.code].abs().sum().item()
                self.totals[role.value] = self.totals.get(role.value, 0.0) + g
            self.totals["padding"] = self.totals.get("padding", 0.0) + grad[roles == PAD_ROLE_CODE].abs().sum().item()

        logps.register_hook(hook)  # type: ignore[no-untyped-call]

    def take(self) -> dict[str, float]:
        out, self.totals = self.totals, {}
        return out


def format_metrics(step: int, values: dict[str, Any], keys: Sequence[str]) -> str:
    """One line of per-step metrics: ``step 1 | loss=0.123 | ...`` (keys that are absent are skipped)."""
    parts = [f"step {step}"]
    for k in keys:
        if k in values and values[k] is not None:
            v = values[k]
            parts.append(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}")
    return " | ".join(parts)


__all__ = [
    "SYSTEM_PROMPT",
    "RoleGradients",
    "command_action",
    "format_metrics",
    "load_model",
    "terminal_worlds",
    "tiny_causal_lm",
]
