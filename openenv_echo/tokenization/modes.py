"""``tokenize_sequences``: a recorded trajectory to training sequences in the mode its chat template needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..trajectory import Trajectory
from .stepwise import tokenize_stepwise
from .template import template_mode
from .tito import tokenize_trajectory
from .tokenized import TokenizedTrajectory

MODES = ("auto", "tito", "stepwise")


def tokenize_sequences(
    traj: Trajectory,
    tokenizer: Any,
    *,
    mode: str = "auto",
    observation_role: str = "tool",
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    add_special_tokens: bool = True,
    action_text_fallback: str = "json",
) -> list[TokenizedTrajectory]:
    """``mode="tito"``: one sequence (``tokenize_trajectory``); ``"stepwise"``: one per assistant turn
    (``tokenize_stepwise``); ``"auto"``: what ``template_mode`` reports for this template."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    kw: dict[str, Any] = {
        "observation_role": observation_role,
        "chat_template": chat_template,
        "template_kwargs": template_kwargs,
        "add_special_tokens": add_special_tokens,
        "action_text_fallback": action_text_fallback,
    }
    if mode == "auto":
        mode = template_mode(
            tokenizer, observation_role, chat_template=chat_template, template_kwargs=template_kwargs
        ).mode
    if mode == "tito":
        return [tokenize_trajectory(traj, tokenizer, **kw)]
    return tokenize_stepwise(traj, tokenizer, **kw)
