"""Per-token log-probs in the shared target alignment, from a causal LM's logits."""

from __future__ import annotations

import torch


def token_logps(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(B, T) ``logps[:, t] = log p(ids[t] | ids[:t])`` from logits (B, T, V) of the same ids.

    ``logps[:, 0]`` has no predictor and is a 0.0 placeholder that no mask ever selects. ``temperature`` divides
    the logits first (use the rollout temperature for the policy term, 1.0 for a T=1 world-model CE; pitfall P18).
    """
    if logits.dim() != 3 or logits.shape[:2] != input_ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    scaled = logits[:, :-1].to(torch.promote_types(logits.dtype, torch.float32))
    if temperature != 1.0:
        scaled = scaled / temperature
    targets = input_ids[:, 1:].clamp(min=0).unsqueeze(-1)
    lp = scaled.gather(-1, targets).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    return torch.cat([lp.new_zeros(lp.shape[0], 1), lp], dim=1)
