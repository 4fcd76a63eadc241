"""Which verifiers this tier runs against: the tested release, or a skip that says where the tier runs."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

NOT_HERE = (
    "verifiers is not installed in this environment: the verifiers tier runs in .venv-verifiers (make test-verifiers)"
)


def test_verifiers_is_the_tested_release() -> None:
    if importlib.util.find_spec("verifiers") is None:
        pytest.skip(NOT_HERE)
    assert importlib.metadata.version("verifiers").startswith("0.4.")  # pyproject: verifiers>=0.4.0,<0.5
    from verifiers.v1.utils.loaders import environment_class, harness_class, taskset_class

    import openenv_echo_verifiers  # the plugin id resolves to our taskset, env and harness

    assert environment_class("openenv-echo-verifiers") is openenv_echo_verifiers.EchoEnv
    assert taskset_class("openenv-echo-verifiers") is openenv_echo_verifiers.EchoTaskset
    assert harness_class("openenv-echo-verifiers") is openenv_echo_verifiers.InProcessChatHarness
