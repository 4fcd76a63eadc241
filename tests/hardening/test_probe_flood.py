"""Orchestrator probes under a connection flood: the probe port answers while the main port sheds the flood.

A thousand half-open connections (connected, never a byte sent) fill the main port's connection cap; every
connection over it, ``GET /health`` included, is refused with 429. The probe listener (``--probe-port``) is a
separate socket with its own cap on the same event loop: its ``/health`` keeps answering 200 fast (liveness: the pod
is alive, only shedding load), its ``/ready`` says 503 with the reason (readiness: route new sessions elsewhere) and
its ``/metrics`` is still scraped. Bounded: 1000 sockets on loopback, closed at the end.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest

from openenv_echo.server import free_port
from tests.hardening.cost_server import LiveServer

FLOOD = 1000
MAX_CONNECTIONS = 64


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveServer, str]]:
    probe_port = free_port()
    live = LiveServer(
        "terminal", "--max-connections", str(MAX_CONNECTIONS), "--header-timeout", "30", "--probe-port", str(probe_port)
    )
    yield live, f"http://127.0.0.1:{probe_port}"
    live.stop()


def _refused(url: str) -> bytes:
    """What the main port answers a new connection: a raw read, since it may answer before any request is sent."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        return s.recv(4096)


def test_probe_port_answers_health_ready_metrics_when_idle(server: tuple[LiveServer, str]) -> None:
    _, probes = server
    assert httpx.get(probes + "/health", trust_env=False, timeout=5).json() == {"status": "healthy"}
    ready = httpx.get(probes + "/ready", trust_env=False, timeout=5)
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert "openenv_echo_sessions_active" in httpx.get(probes + "/metrics", trust_env=False, timeout=5).text
    assert httpx.get(probes + "/reset", trust_env=False, timeout=5).status_code == 404  # probes only, no env routes


def test_health_answers_within_100ms_under_a_flood_of_half_open_connections(server: tuple[LiveServer, str]) -> None:
    live, probes = server
    flood: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", live.port))
            flood.append(s)
        time.sleep(1.0)  # the server has accepted them all: the first MAX_CONNECTIONS held, the rest refused
        answer = _refused(live.url)
        assert answer.startswith(b"HTTP/1.1 429") and b"CAPACITY_REACHED" in answer, answer[:200]

        latencies, statuses = [], []
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            for _ in range(20):
                t0 = time.perf_counter()
                statuses.append(client.get(probes + "/health", headers={"connection": "close"}).status_code)
                latencies.append(time.perf_counter() - t0)
            ready = client.get(probes + "/ready")
            metrics = client.get(probes + "/metrics")
        assert statuses == [200] * 20
        assert statistics.quantiles(latencies, n=10)[-1] <= 0.100, latencies  # p90 of 20 fresh connections
        assert ready.status_code == 503 and "connections open" in ready.json()["reason"], ready.text
        assert metrics.status_code == 200 and "openenv_echo_sessions_active" in metrics.text
        assert _refused(live.url).startswith(b"HTTP/1.1 429")  # still shedding while the probes answered
    finally:
        for s in flood:
            s.close()
    deadline = time.monotonic() + 30
    while httpx.get(probes + "/ready", trust_env=False, timeout=5).status_code != 200:
        assert time.monotonic() < deadline, "the server never became ready again after the flood"
        time.sleep(0.2)
    assert httpx.get(live.url + "/health", trust_env=False, timeout=5).status_code == 200
    assert live.alive()


def test_probe_port_equal_to_main_port_is_a_usage_error() -> None:
    import subprocess
    import sys

    port = str(free_port())
    out = subprocess.run(
        [sys.executable, "-m", "openenv_echo.cli", "serve", "echo", "--port", port, "--probe-port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "probe-port" in out.stderr, out.stderr
