"""Fixtures for the adapter tests: a real offline tokenizer with a real chat template, and tiny real models."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The project's offline byte-level BPE tokenizer with the ChatML template (built once, cached on disk)."""
    from openenv_echo.tokenize import build_tokenizer

    return build_tokenizer("qwen")


def tiny_qwen2(vocab_size: int, seed: int = 0, hidden: int = 32, layers: int = 2):
    """A tiny random ``Qwen2ForCausalLM`` built from a config (no download)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg).float()
