"""The reference demo end to end: server -> expert data -> tokenizer + model -> start checkpoint -> references ->
RL arms over seeds and the λ sweep -> λ chosen on validation -> held-out curves -> report.

Phases (wall time of each, and the machine's load average, go into ``report.json``):

1. start the env's server (local process, or ``--docker``) and record the scripted expert on the train,
   validation and test seeds through the client;
2. train a ChatML byte-level BPE tokenizer on the generic corpus and the *train* episodes' text and build the model
   (or load SmolLM2);
3. the start checkpoint, trained the way agents usually are: LM pretraining on generic text (the Python standard
   library's docstrings), then SFT on the train episodes with the action tokens as the only targets; the reference
   lines (uniform, unigram, bigram of the training env text, the start checkpoint) on the same held-out targets;
4. for each RL seed, from the start weights and AdamW state, with the same prompt seeds, sampler seed and budget:
   GRPO + ECHO at every λ of the sweep (λ = 0 is the GRPO arm) and the direct-CE arm: policy-sampled rollouts ->
   TITO sequences -> ``echo_loss`` -> AdamW, with validation env CE and success at every curve point;
5. λ chosen on validation (``choose_lambda``); the chosen arms evaluated on test at every curve point; per-seed
   results, means with 95% intervals, the share of the start -> direct-CE gap each arm closes; ``report.json``,
   ``summary.md`` and the PNG.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .config import DemoConfig


def run_demo(cfg: DemoConfig, command: str | None = None) -> dict[str, Any]:
    """Run the demo; writes ``report.json``, ``summary.md`` and ``echo_world_model.png`` into ``cfg.out``; returns
    the report."""
    from .experiment import run_experiment

    cfg.validate()
    with torch_settings(cfg.threads):
        return run_experiment(cfg, command)


@contextlib.contextmanager
def torch_settings(threads: int) -> Iterator[None]:
    """Thread count and deterministic algorithms for the run, restored afterwards (the demo may run in-process,
    e.g. in a test, and must not change global torch state for whoever runs next)."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det, warn_only=old_warn)
