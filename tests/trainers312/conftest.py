"""The Python 3.12 trainer tier (``make test-trainers``, in .venv-trainers): SkyRL's loss path and worker step,
skyrl-gym, SkyRL's local Tinker-API server. Without skyrl (another venv, or no python3.12 on the machine) only
``test_tier.py`` is collected, and it reports the skip and why."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("skyrl") is None:
    collect_ignore_glob = ["test_skyrl*.py", "test_tinker*.py", "test_recipes*.py"]


@pytest.fixture(scope="session")
def qwen_tokenizer() -> Any:
    from openenv_echo.tokenization import build_tokenizer

    return build_tokenizer("qwen")
