"""Fixtures for the tokenization tests: real tokenizers of every local family (built once, cached on disk)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def toks() -> dict[str, Any]:
    """``{"qwen": ..., "llama": ..., "qwen3": ...}``: real HF fast tokenizers with real chat templates."""
    from openenv_echo.tokenization import FAMILIES, build_tokenizer

    return {family: build_tokenizer(family) for family in FAMILIES}


@pytest.fixture(params=["qwen", "llama"])
def stable_tok(request: pytest.FixtureRequest, toks: dict[str, Any]) -> Any:
    """The prefix-stable families (TITO works)."""
    return toks[request.param]


@pytest.fixture(params=["qwen", "llama", "qwen3"])
def any_tok(request: pytest.FixtureRequest, toks: dict[str, Any]) -> Any:
    return toks[request.param]


@pytest.fixture(scope="session")
def foreign_toks() -> dict[str, Any]:
    """Tokenizers unlike the local families (SentencePiece/Unigram, another byte-level BPE), built here."""
    from .foreign import FOREIGN, build_foreign

    return {kind: build_foreign(kind) for kind in FOREIGN}


@pytest.fixture(params=["qwen", "llama", "unigram", "bytebpe"])
def stable_any(request: pytest.FixtureRequest, toks: dict[str, Any], foreign_toks: dict[str, Any]) -> Any:
    """Every prefix-stable tokenizer: the local families and the foreign ones."""
    return {**toks, **foreign_toks}[request.param]


@pytest.fixture(params=["qwen", "llama", "qwen3", "unigram", "bytebpe"])
def every_tok(request: pytest.FixtureRequest, toks: dict[str, Any], foreign_toks: dict[str, Any]) -> Any:
    return {**toks, **foreign_toks}[request.param]
