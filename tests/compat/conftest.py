"""Servers for the compatibility tier: each reference env on a real loopback uvicorn, driven by ``openenv``'s
own client classes (the compliance judge), never by openenv-echo's client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openenv_echo.envs import ENVIRONMENTS


@pytest.fixture(scope="module")
def env_urls() -> Iterator[dict[str, str]]:
    """Registry name -> base URL of a running server for every registered env that runs without a Docker engine
    (4 sessions each; the shell env's compatibility runs in tests/containers)."""
    from openenv_echo.envs import load_env
    from openenv_echo.server import BackgroundServer, ServerLimits, create_app

    servers = {
        name: BackgroundServer(create_app(load_env(name), limits=ServerLimits(max_sessions=4)))
        for name, spec in ENVIRONMENTS.items()
        if not spec.needs_docker
    }
    urls = {name: s.start() for name, s in servers.items()}
    yield urls
    for s in servers.values():
        s.stop()
