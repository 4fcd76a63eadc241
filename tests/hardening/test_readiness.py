"""Readiness says when a new session would fail for a reason outside the server: the shell env's Docker engine.

A shell server whose engine does not answer still lives (``/health`` 200: restarting it would not bring the engine
back) but is not ready (``/ready`` 503 naming the engine), so an orchestrator routes new sessions elsewhere; a
reset there fails with the same reason. The engine is made unreachable with ``DOCKER_HOST`` (a socket path that does
not exist), so this holds on a machine with a running engine too. With an engine: tests/containers/test_shell_env.py.
"""

from __future__ import annotations

import httpx
import pytest

from openenv_echo import EnvClient
from openenv_echo.server import free_port
from tests.hardening.cost_server import LiveServer

UNREACHABLE = "unix:///nonexistent/openenv-echo-test/docker.sock"


def _with_probes(env: str) -> tuple[LiveServer, str]:
    probe_port = free_port()
    return LiveServer(env, "--probe-port", str(probe_port)), f"http://127.0.0.1:{probe_port}"


def test_ready_names_an_unreachable_engine_and_health_stays_200(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", UNREACHABLE)
    live, probe = _with_probes("shell")
    try:
        assert httpx.get(f"{probe}/health", trust_env=False, timeout=5).status_code == 200
        ready = httpx.get(f"{probe}/ready", trust_env=False, timeout=10)
        assert ready.status_code == 503, ready.text
        assert "needs a Docker engine" in ready.json()["reason"] and "nonexistent" in ready.json()["reason"]
        assert httpx.get(f"{probe}/ready", trust_env=False, timeout=10).json() == ready.json()  # cached, same answer
        with EnvClient(live.url) as client, pytest.raises(Exception, match="needs a Docker engine"):
            client.reset(seed=0)
        assert httpx.get(f"{live.url}/health", trust_env=False, timeout=5).status_code == 200  # still serving
    finally:
        live.stop()


def test_an_env_that_needs_nothing_outside_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", UNREACHABLE)
    live, probe = _with_probes("terminal")
    try:
        ready = httpx.get(f"{probe}/ready", trust_env=False, timeout=10)
        assert ready.status_code == 200 and ready.json()["reason"] is None
    finally:
        live.stop()
