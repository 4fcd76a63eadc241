"""The reference demo end to end: server -> expert data -> tokenizer + model -> start checkpoint -> references ->
the λ sweep on validation -> the arms on test -> report, tables, plot and verdict.

Phases (wall time of each, and the machine's load average, go into ``report.json``):

1. start the env's server (local process, or ``--docker``) and record the scripted expert on the train,
   validation and test seeds through the client;
2. train a ChatML byte-level BPE tokenizer on the generic corpus only (as a pretrained LM's never saw the task)
   and build the model (or load SmolLM2);
3. the start checkpoint: LM pretraining on generic text (the Python standard library's docstrings), then SFT on the
   train episodes with the action tokens as the only targets, kept a language model elsewhere (``sft_teacher``);
   the reference lines (uniform, unigram to 4-gram of the training env text) on the same held-out targets;
4. the λ sweep: on each sweep seed, GRPO + ECHO at every λ (λ = 0 is the GRPO arm), each from the start weights with
   a fresh AdamW, on its own policy-sampled rollouts; λ chosen on their final validation figures (``choose_lambda``).
   A default run sweeps nothing: its λ is the env's recorded sweep's choice and its start the recorded start
   (``recorded``), which fits one seed of every arm in the reference budget;
5. for each arm seed: GRPO, GRPO + ECHO at the chosen λ and direct CE (on the GRPO run's rollouts), evaluated on
   test at every curve point; per-world figures, paired worlds × seeds bootstrap intervals, the share of the start
   -> direct-CE gap, the targets; ``report.json``, ``summary.md``, ``verdict.json`` and the PNG after every seed.
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
    from .recorded import recorded_selection

    cfg.validate()
    if not cfg.sweep_seeds:
        recorded_selection(cfg)  # a run without a sweep needs its λ pre-registered: refuse before any work
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
