"""Shared fixtures: real servers on loopback, nothing mocked."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Ray (tests/fleet, and libraries that import it) must stay on loopback: read when ray is first imported
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


@pytest.fixture
def running_server() -> Iterator[Callable[..., str]]:
    """Factory: ``running_server(env, *, tokenizer=None, mode="simulation", **limits) -> base_url``.

    ``env`` is an Environment subclass, a registry name (``"echo"``), or a ready FastAPI app. The server is a real
    uvicorn server on a free 127.0.0.1 port, stopped at the end of the test.
    """
    from openenv_echo.envs import load_env
    from openenv_echo.server import BackgroundServer, ServerLimits, create_app

    servers: list[BackgroundServer] = []

    def start(env: Any, *, tokenizer: Any = None, mode: str = "simulation", **limits: Any) -> str:
        if isinstance(env, str):
            env = load_env(env)
        if isinstance(env, type):
            env = create_app(env, limits=ServerLimits(**limits), mode=mode, tokenizer=tokenizer)  # type: ignore[arg-type]
        server = BackgroundServer(env)
        servers.append(server)
        return server.start()

    yield start
    for s in servers:
        s.stop()
