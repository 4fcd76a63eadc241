"""What a stored checkpoint must match to be reused, and its file format: the start checkpoint's settings
(``start_key``) and an RL run's (``resume_key``). A stored file holds ``{"key", "obj"}``; a file made under another
key is ignored, so a changed setting retrains instead of reusing. A start also names the tokenizer it was trained
with, which is not a setting (the generic corpus is this Python's standard library): one trained with another is
refused (``check_start_tokenizer``)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from .config import DemoConfig

START_FIELDS = (
    "env",
    "model",
    "seed",
    "n_train",
    "n_val",
    "task_kinds",
    "max_env_steps",
    "max_context",
    "max_action_tokens",
    "vocab_size",
    "generic_steps",
    "generic_batch",
    "generic_len",
    "generic_lr",
    "generic_warmup",
    "sft_steps",
    "sft_batch",
    "sft_lr",
    "sft_warmup",
    "sft_replay",
    "sft_teacher",
    "sft_eval_every",
    "micro_batch",
)
"""The settings the start checkpoint depends on (its stored copy is reused whenever they match)."""


def start_key(cfg: DemoConfig) -> str:
    d = cfg.to_dict()
    return json.dumps({k: d[k] for k in START_FIELDS} | {"n_test": d["n_test"]}, sort_keys=True)


RUN_ONLY_FIELDS = (
    "out", "progress", "threads", "workers", "n_seeds", "sweep_seeds", "lambdas", "train_start", "test_curve"
)  # fmt: skip
"""Settings that change where a run's output goes, how it is shown, how it is spread over threads and workers, how
many seeds and which λ are planned, whether the start is trained or loaded and at which steps a run is evaluated on
test (a stored run's test curve is checked against that instead), never what a run trains (a run at λ is the same run
under any grid that holds λ, so a wider grid trains only its new λ)."""


ARM_FIELDS = {
    "direct_ce": ("direct_ce_lr",),
    "grpo_echo": (
        "echo_world_lr",
        "echo_world_optimizer",
        "echo_normalization",
        "echo_world_surgery",
        "echo_world_varied_only",
        "echo_world_steps",
        "echo_action_kl",
        "echo_anchor",
    ),
}
"""Settings only one arm reads: another arm's run stored under other values is reused."""

LATER_FIELDS = ("rl_kl",)
"""Settings every arm reads (direct CE through the GRPO run's rollouts) that came after runs were stored: they enter
a run's key only away from their default, so that the stored runs stay reusable."""


def resume_key(cfg: DemoConfig, arm: str = "direct_ce") -> str:
    """What a stored run of ``arm`` must match to be reused: every setting it depends on, that is all but where
    output goes, how it is shown, the thread and worker counts, how many seeds and which λ are planned and the other
    arms' own settings (``ARM_FIELDS``). An arm's own setting, and a later one (``LATER_FIELDS``), enters only away
    from its default: runs stored before it existed had none."""
    d = cfg.to_dict()
    at_default = {f.name for f in fields(DemoConfig) if d[f.name] == f.default}
    later = tuple(f for f in LATER_FIELDS if f in at_default)
    for k in (
        RUN_ONLY_FIELDS + later + tuple(f for a, fs in ARM_FIELDS.items() for f in fs if a != arm or f in at_default)
    ):
        d.pop(k)
    d["start"] = "generic LM pretraining, then SFT with action tokens the only targets"
    return json.dumps(d, sort_keys=True)


def save_stored(path: Path, key: str, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"key": key, "obj": obj}, tmp)
    tmp.replace(path)


class ForeignStart(ValueError):
    """A stored start checkpoint trained with another tokenizer than the one this run builds: its weights index
    other token ids, so no run may go on from it (nor retrain over it silently)."""


def check_start_tokenizer(path: Path, start: dict[str, Any], fingerprint: str) -> None:
    """Refuse the start stored at ``path`` unless it was trained with the tokenizer of ``fingerprint`` (a start
    stored before starts carried their tokenizer's fingerprint cannot be checked and is taken as it is)."""
    theirs = start.get("tokenizer", fingerprint)
    if theirs != fingerprint:
        raise ForeignStart(
            f"{path}: this start was trained with another tokenizer (fingerprint {theirs[:12]}) than the one this "
            f"run builds ({fingerprint[:12]}), from another generic corpus (another Python's standard library): "
            "train a start where this tokenizer is built"
        )


def load_stored(path: Path, key: str) -> Any:
    """A stored checkpoint's contents if it was made under ``key`` (``start_key`` or ``resume_key``), else None."""
    if not path.is_file():
        return None
    data = torch.load(path, weights_only=False)
    return data["obj"] if data.get("key") == key else None
