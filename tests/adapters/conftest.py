"""Fixtures for the adapter tests: a real offline tokenizer with a real chat template (tiny real models come from
``openenv_echo.testing.recipes.tiny_causal_lm``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The project's offline byte-level BPE tokenizer with the ChatML template (built once, cached on disk)."""
    from openenv_echo.tokenization import build_tokenizer

    return build_tokenizer("qwen")
