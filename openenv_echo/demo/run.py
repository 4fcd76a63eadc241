"""The reference demo end to end: server -> expert data -> tokenizer + model -> start checkpoint -> references ->
RL arms over seeds and the λ sweep -> λ chosen on validation -> test once -> report.

Phases (wall time of each goes into ``report.json``):

1. start the terminal env server (local process, or ``--docker``) and record the scripted expert on the train,
   validation and test seeds through the client;
2. train a ChatML byte-level BPE tokenizer on the *train* episodes' text and build the model (or load SmolLM2);
3. the start checkpoint: LM pretraining on the train episodes' action and env_output tokens; the reference lines
   (uniform, unigram, bigram of the training env text, the start checkpoint) on the same held-out targets;
4. for each RL seed, from the start weights, with the same prompt seeds, sampler seed and budget: GRPO + ECHO at
   every λ of the sweep (λ = 0 is the GRPO arm) and the direct-CE arm: policy-sampled rollouts -> TITO sequences ->
   ``echo_loss`` -> AdamW, with validation env CE and success every ``eval_every`` steps;
5. λ chosen on validation (``choose_lambda``); every arm's final checkpoint evaluated once on test; per-seed
   results, means with 95% intervals, the share of the start -> direct-CE gap each arm closes; ``report.json``,
   ``summary.md`` and the PNG.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch

from .config import DemoConfig
from .model import build_scratch_model, count_parameters, load_smollm2, model_cache_dir
from .rollout import messages


class Clock:
    """Wall time per phase, and the process's CPU time (on a shared machine the wall time depends on the load)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.cpu0 = time.process_time()
        self.last = self.start
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.last, 2)
        self.last = now
        return self.phases[name]

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 2)

    def cpu(self) -> float:
        return round(time.process_time() - self.cpu0, 2)


def corpus_of(trajectories: list[Any]) -> list[str]:
    """Tokenizer training text: every message, action and observation of the given (train) episodes."""
    texts = [m["content"] for m in messages()]
    for t in trajectories:
        if t.reset is not None:
            texts.append(t.reset.text)
        for st in t.steps:
            texts.append(st.action_text or "")
            texts.append(st.observation.text)
    return [x for x in texts if x]


def build_policy(cfg: DemoConfig, train_episodes: list[Any]) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """(model, tokenizer, description) for ``cfg.model``."""
    from ..tokenize import build_tokenizer
    from ..tokenizer_identity import tokenizer_identity

    if cfg.model == "smollm2":
        model, tok = load_smollm2(model_cache_dir())
        tok_info: dict[str, Any] = {
            "family": "SmolLM2 (its own byte-level BPE + ChatML template)",
            "trained_on": "pretrained",
        }
    else:
        corpus = corpus_of(train_episodes)
        tok = build_tokenizer("qwen", corpus=corpus, vocab_size=cfg.vocab_size)
        model = build_scratch_model(cfg.model, tok, max_positions=cfg.max_context + 64, seed=cfg.seed)
        tok_info = {
            "family": "qwen (ChatML byte-level BPE, openenv_echo.tokenize.build_tokenizer)",
            "trained_on": f"text of the {len(train_episodes)} train-seed expert episodes only",
            "corpus_chars": sum(map(len, corpus)),
            "requested_vocab": cfg.vocab_size,
        }
    ident = tokenizer_identity(tok)
    c: Any = model.config  # the HF model's config (typed as a plain Module here)
    info = {
        "kind": cfg.model,
        "class": type(model).__name__,
        "parameters": count_parameters(model),
        "hidden_size": c.hidden_size,
        "layers": c.num_hidden_layers,
        "heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size,
        "tokenizer": {
            **tok_info,
            "vocab": len(tok),
            "fingerprint": ident.fingerprint,
            "chat_template": "ChatML; observations as tool messages",
        },
    }
    return model, tok, info


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
