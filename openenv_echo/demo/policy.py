"""The demo's policy: a tokenizer trained on the generic corpus only, and a model built from scratch (or SmolLM2).

The tokenizer never sees episode text, as a real pretrained LM's tokenizer never saw the task: env text is spelled
in subwords the generic phase trained, so the start predicts it better than a uniform guess. (A tokenizer that also
learned the episodes' strings gave them embeddings no generic text ever trained: the start's validation env CE sat
at a uniform guess.)"""

from __future__ import annotations

from typing import Any

import torch

from .config import DemoConfig
from .corpus import GenericCorpus
from .envs import DemoEnv
from .model import build_scratch_model, count_parameters, load_smollm2, model_cache_dir
from .rollout import messages


def corpus_of(env: DemoEnv, trajectories: list[Any]) -> list[str]:
    """Episode text: the system prompt, and every message, action and observation of the given (train) episodes
    (the report counts its characters; the demo's tokenizer never trains on it)."""
    texts = [m["content"] for m in messages(env)]
    for t in trajectories:
        if t.reset is not None:
            texts.append(t.reset.text)
        for st in t.steps:
            texts.append(st.action_text or "")
            texts.append(st.observation.text)
    return [x for x in texts if x]


def build_policy(
    cfg: DemoConfig, env: DemoEnv, generic: GenericCorpus, train_episodes: list[Any]
) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """(model, tokenizer, description) for ``cfg.model``."""
    from ..tokenization import build_tokenizer
    from ..tokenizer_identity import tokenizer_identity

    if cfg.model == "smollm2":
        model, tok = load_smollm2(model_cache_dir())
        tok_info: dict[str, Any] = {
            "family": "SmolLM2 (its own byte-level BPE + ChatML template)",
            "trained_on": "pretrained",
        }
    else:
        episodes = corpus_of(env, train_episodes)
        tok = build_tokenizer("qwen", corpus=list(generic.texts), vocab_size=cfg.vocab_size)
        model = build_scratch_model(cfg.model, tok, max_positions=cfg.max_context + 64, seed=cfg.start_seed)
        tok_info = {
            "family": "qwen (ChatML byte-level BPE, openenv_echo.tokenization.build_tokenizer)",
            "trained_on": "the generic corpus only (never episode text)",
            "corpus_chars": {"generic": generic.chars},
            "train_episode_chars": sum(map(len, episodes)),
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
