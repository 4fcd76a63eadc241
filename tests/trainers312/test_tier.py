"""Whether the tier ran here: a visible skip with the reason when this interpreter cannot run it."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest


def test_trainer_tier_is_available() -> None:
    if importlib.util.find_spec("skyrl") is None:
        reason = os.environ.get("OPENENV_ECHO_NO_PY312") or (
            f"skyrl is not installed in this Python {sys.version_info[0]}.{sys.version_info[1]} venv: the tier runs "
            "in .venv-trainers (make test-trainers)"
        )
        pytest.skip(reason)
    assert sys.version_info[:2] >= (3, 12)
