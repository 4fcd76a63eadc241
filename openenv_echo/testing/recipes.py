"""Pieces the runnable trainer recipes (``examples/trainers/<trainer>/train.py``) share: a tiny offline model, the
terminal env's worlds and action format (the shell env's too: same actions, seeds pick its tasks), and a per-role
gradient probe that shows where the loss's gradient goes."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import torch

from ..adapters.rollouts import Rollout, Sampler, group_reset_options, run_rollouts
from ..roles import PAD_ROLE_CODE, Role

SYSTEM_PROMPT = (
    "You are the on-call engineer on a Linux host with an incident. Run one shell command per turn; when you know "
    "the cause, answer with `submit <kind> <service>`."
)
SHELL_PROMPT = (
    "You work in a bash shell in a Linux container. Run one command per turn; when the task is done, answer with "
    "`submit`."
)
RECIPE_ENVS: dict[str, str] = {"terminal": SYSTEM_PROMPT, "shell": SHELL_PROMPT}
"""Envs a recipe's ``--env`` may name, with their system prompt; both take ``{"command": text}`` actions. ``shell``
runs real bash in a container per episode (it needs a Docker engine)."""


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
    from ..tokenization import build_tokenizer

    tok = build_tokenizer("qwen")
    return tiny_causal_lm(tok, seed=seed), tok


def terminal_worlds(n: int, max_steps: int, first_seed: int = 0) -> list[dict[str, Any]]:
    """Reset options of ``n`` worlds (one per GRPO group): a seed each, and the episode's step cap (the terminal and
    shell envs both take them)."""
    return [{"seed": first_seed + i, "max_steps": max_steps} for i in range(n)]


def command_action(text: str) -> dict[str, Any]:
    """The terminal env's action for a sampled action text."""
    return {"command": text.strip()}


BREVITY_PER_TOKEN = 1e-3
"""Reward shaping of the recipes: each completion token costs this much, so that a random model's GRPO groups
have non-zero advantages (shorter episodes score higher) while the env's reward dominates."""


def recipe_parser(doc: str) -> argparse.ArgumentParser:
    """The command line every recipe shares (``doc``'s first line is its description); a recipe adds its own."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--world-model-coeff", type=float, default=0.05)
    ap.add_argument("--model", default=None, help="from_pretrained path (default: a tiny random Qwen2, offline)")
    ap.add_argument("--groups", type=int, default=2, help="worlds (GRPO groups) per step")
    ap.add_argument("--group-size", type=int, default=4, help="completions per world")
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=12, help="per action")
    ap.add_argument("--max-completion-length", type=int, default=384)
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    ap.add_argument("--probe", action="store_true", help="print the gradient reaching each role's predictions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the per-step metrics here")
    return ap


def step_rollouts(
    base_url: str, tokenizer: Any, sampler: Sampler, a: argparse.Namespace, step: int, env: str = "terminal"
) -> list[Rollout]:
    """Step ``step``'s (from 1) episodes: ``a.groups`` fresh worlds of ``env`` (a seed and the step cap each: a
    terminal host, or a shell task), each played ``a.group_size`` times at once (a GRPO group shares its world),
    token-in-token-out; in group order."""
    worlds = terminal_worlds(a.groups, max_steps=a.max_turns, first_seed=a.seed + (step - 1) * a.groups)
    return run_rollouts(
        base_url,
        tokenizer,
        sampler,
        group_reset_options(worlds, a.group_size),
        [[{"role": "system", "content": RECIPE_ENVS[env]}]] * (a.groups * a.group_size),
        to_action=command_action,
        max_turns=a.max_turns,
        max_completion_length=a.max_completion_length,
        max_new_tokens=a.max_new_tokens,
    )


def shaped_rewards(rewards: Sequence[float], completion_lengths: Sequence[int]) -> torch.Tensor:
    """The env's rewards minus ``BREVITY_PER_TOKEN`` per completion token (float64, one per episode)."""
    return torch.tensor(rewards, dtype=torch.float64) - BREVITY_PER_TOKEN * torch.tensor(
        completion_lengths, dtype=torch.float64
    )


def write_metrics(path: str | None, world_model_coeff: float, rows: list[dict[str, Any]]) -> None:
    """The recipe's per-step metrics as JSON at ``path`` (nothing when None)."""
    if path:
        with open(path, "w") as f:
            json.dump({"world_model_coeff": world_model_coeff, "steps": rows}, f, indent=1)


class RoleGradients:
    """Sums |∂loss/∂log p(token)| per role over the positions of a (B, T) log-prob tensor: how much of the loss's
    gradient reaches the prediction of each kind of token. Attach with ``watch`` on a grad-enabled tensor."""

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
    """One line of per-step metrics: ``step 1 | loss=0.123 | ...`` (keys that are absent are skipped), then the
    gradient probe's per-role totals when ``values`` holds them (``| grad→ action=... env_output=...``)."""
    parts = [f"step {step}"]
    for k in keys:
        if k in values and values[k] is not None:
            v = values[k]
            parts.append(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}")
    line = " | ".join(parts)
    if "grad" in values:
        line += " | grad→ " + " ".join(f"{k}={v:.3g}" for k, v in sorted(values["grad"].items()))
    return line


__all__ = [
    "BREVITY_PER_TOKEN",
    "SYSTEM_PROMPT",
    "RoleGradients",
    "command_action",
    "format_metrics",
    "load_model",
    "recipe_parser",
    "shaped_rewards",
    "step_rollouts",
    "terminal_worlds",
    "tiny_causal_lm",
    "write_metrics",
]
