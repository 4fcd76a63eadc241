"""Fixtures for the docker tier: a reachable engine, the env images, and one running container per env.

No engine -> every docker test SKIPs with a loud reason, unless ``OPENENV_ECHO_REQUIRE_DOCKER=1`` (set by
scripts/docker/ci-tier.sh), which turns that into a failure. With ``OPENENV_ECHO_COMPOSE_PROJECT=<project>`` the
env servers are the containers of that running docker-compose project; otherwise each env gets a hardened
container from ``DockerProvider`` for the session.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openenv_echo.envs import ENVIRONMENTS
from openenv_echo.providers import DockerProvider, ProviderError, docker_client
from openenv_echo.providers.docker import DEFAULT_BASE_IMAGE, LOCAL_BASE_IMAGE

ROOT = Path(__file__).resolve().parents[2]
ENVS = tuple(ENVIRONMENTS)
REQUIRE_DOCKER = os.environ.get("OPENENV_ECHO_REQUIRE_DOCKER") == "1"
COMPOSE_PROJECT = os.environ.get("OPENENV_ECHO_COMPOSE_PROJECT") or None


def _no_engine(reason: str) -> None:
    banner = f"DOCKER TIER NOT RUN: {reason}"
    if REQUIRE_DOCKER:
        pytest.fail(banner + " (OPENENV_ECHO_REQUIRE_DOCKER=1)", pytrace=False)
    pytest.skip(banner + " -- start an engine with scripts/docker/start-dockerd.sh")


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    try:
        client = docker_client(timeout_s=60)
    except ProviderError as e:
        _no_engine(str(e))
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_engine: Any) -> str:
    """BASE_IMAGE from the environment, else the local debootstrap base if built, else python:3.11-slim."""
    explicit = os.environ.get("BASE_IMAGE")
    if explicit:
        return explicit
    try:
        docker_engine.images.get(LOCAL_BASE_IMAGE)
        return LOCAL_BASE_IMAGE
    except Exception:
        return DEFAULT_BASE_IMAGE


@pytest.fixture(scope="session")
def env_image(docker_engine: Any, base_image: str) -> Callable[[str], str]:
    """``env_image("echo") -> tag``: builds ``openenv-echo/<env>:latest`` from the checkout once per session
    (layer-cached, so cheap after docker-compose built it)."""
    built: dict[str, str] = {}

    def build(env: str) -> str:
        if env not in built:
            provider = DockerProvider.for_env(ENVIRONMENTS[env], root=ROOT, base_image=base_image, client=docker_engine)
            provider.build()
            built[env] = provider.image
        return built[env]

    return build


def _compose_url(client: Any, project: str, service: str, index: int = 1) -> str | None:
    containers = client.containers.list(
        filters={
            "label": [
                f"com.docker.compose.project={project}",
                f"com.docker.compose.service={service}",
                f"com.docker.compose.container-number={index}",
            ]
        }
    )
    for c in containers:
        binding = (c.attrs["NetworkSettings"]["Ports"] or {}).get("8000/tcp")
        if binding:
            return f"http://127.0.0.1:{binding[0]['HostPort']}"
    return None


@pytest.fixture(scope="session")
def env_server(docker_engine: Any, env_image: Callable[[str], str], base_image: str) -> Iterator[Callable[[str], str]]:
    """``env_server("sql") -> base_url`` of a running, hardened container of that env (one per session)."""
    providers: dict[str, DockerProvider] = {}
    urls: dict[str, str] = {}

    def get(env: str) -> str:
        if env in urls:
            return urls[env]
        if COMPOSE_PROJECT:
            url = _compose_url(docker_engine, COMPOSE_PROJECT, env)
            if url is None:
                pytest.fail(f"docker-compose project {COMPOSE_PROJECT!r} has no running {env!r} service")
            urls[env] = url
            return url
        engine: dict[str, Any] = {}
        if ENVIRONMENTS[env].needs_docker:  # the shell env's server starts its episodes' containers on this engine
            engine = {"docker_socket": "/var/run/docker.sock", "env": {"BASE_IMAGE": base_image}}
        provider = DockerProvider(
            env_image(env), client=docker_engine, name=f"openenv-echo-test-{env}-{os.getpid()}", **engine
        )
        providers[env] = provider
        urls[env] = provider.start()
        return urls[env]

    yield get
    for provider in providers.values():
        provider.stop()


@pytest.fixture(scope="session")
def shell_task_images(docker_engine: Any, base_image: str) -> Iterator[dict[str, str]]:
    """Every shipped Harbor task's image, built once for the tier by the shell env's own runtime (the tags its
    servers look up, so they never build again; only the git task's build uses the network, for Debian's mirror).
    ``BASE_IMAGE`` is set for the servers the tests start. Removed at the end unless ``KEEP_DOCKER=1``."""
    from shell_env.server import task_suite
    from shell_env.server.runtime import IMAGE_LABEL, ShellRuntime

    os.environ.setdefault("BASE_IMAGE", base_image)
    runtime = ShellRuntime(pool_size=0)
    try:
        images = {task.name: runtime.image_for(task) for task in task_suite().tasks}
    finally:
        runtime.close()
    yield images
    if os.environ.get("KEEP_DOCKER") != "1":
        for image in docker_engine.images.list(filters={"label": IMAGE_LABEL}):
            try:
                docker_engine.images.remove(image.id, force=True)
            except Exception:
                pass
