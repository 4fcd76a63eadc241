"""docker-compose: ``--scale`` gives every replica its own loopback port and each one serves episodes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from openenv_echo.client import EnvClient

from .conftest import REQUIRE_DOCKER, ROOT

pytestmark = pytest.mark.docker

PROJECT = f"openenv-echo-scale-test-{os.getpid()}"


def _compose_cmd() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    message = "neither docker-compose nor `docker compose` is installed"
    if REQUIRE_DOCKER:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def compose(docker_engine: Any, env_image: Callable[[str], str]) -> Iterator[Callable[..., str]]:
    env_image("echo")  # the compose service uses the image tag built from the checkout
    base = [*_compose_cmd(), "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml")]

    def run(*args: str) -> str:
        proc = subprocess.run([*base, *args], capture_output=True, text=True, timeout=180, cwd=ROOT)
        assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    yield run
    subprocess.run([*base, "down", "--remove-orphans", "--timeout", "5"], capture_output=True, timeout=120, cwd=ROOT)


def _replicas(client: Any, service: str) -> list[Any]:
    return client.containers.list(
        all=True, filters={"label": [f"com.docker.compose.project={PROJECT}", f"com.docker.compose.service={service}"]}
    )


def test_scale_echo_to_two_healthy_replicas(compose: Callable[..., str], docker_engine: Any) -> None:
    compose("up", "-d", "--no-build", "--scale", "echo=2", "echo")
    deadline = time.monotonic() + 90
    while True:
        replicas = _replicas(docker_engine, "echo")
        health = [c.attrs["State"].get("Health", {}).get("Status") for c in replicas]
        if len(replicas) == 2 and health == ["healthy", "healthy"]:
            break
        assert time.monotonic() < deadline, f"replicas not healthy in time: {health}"
        assert "unhealthy" not in health and all(c.status != "exited" for c in replicas), health
        time.sleep(0.5)
        for c in replicas:
            c.reload()

    ports = set()
    for index in (1, 2):
        host, _, port = compose("port", f"--index={index}", "echo", "8000").strip().rpartition(":")
        assert host == "127.0.0.1"
        ports.add(int(port))
    low, _, high = os.environ.get("ECHO_PORTS", "8101-8110").partition("-")
    assert len(ports) == 2 and all(int(low) <= p <= int(high or low) for p in ports)  # the service's range, no clash

    for port in sorted(ports):
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/health", trust_env=False).json() == {"status": "healthy"}
        with EnvClient(url) as client:
            client.reset(seed=port)
            assert client.step({"message": f"replica {port}"}).segments[1].text == f"replica {port}\n"
            assert client.state()["step_count"] == 1
    for c in _replicas(docker_engine, "echo"):
        host = c.attrs["HostConfig"]
        assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"] and c.attrs["Config"]["User"] == "65532:65532"
