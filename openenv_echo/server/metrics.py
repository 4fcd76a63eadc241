"""Prometheus metrics of one env server (``GET /metrics``): sessions, steps, latencies, errors, bytes, tokens.

Each app owns its own ``CollectorRegistry``, so several servers in one process (tests, benchmarks) never share
counters. Names follow Prometheus conventions: ``openenv_echo_`` prefix, ``_total`` counters, ``_seconds``
histograms. Recording is a few dictionary lookups and float adds per frame: cheap next to a step.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Step latency buckets: sub-millisecond echo steps up to the step timeout's range.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServerMetrics:
    """The metric families of one server; ``env`` labels every series so fleets of mixed envs aggregate cleanly."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, env: str) -> None:
        self.env = env
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sessions_active = Gauge(
            "openenv_echo_sessions_active", "Sessions open now (WebSocket, MCP and HTTP-created).", ["env"], registry=r
        ).labels(env)
        self.sessions = Counter(
            "openenv_echo_sessions", "WebSocket sessions (/ws and /mcp) opened since start.", ["env"], registry=r
        ).labels(env)
        self.capacity_refusals = Counter(
            "openenv_echo_capacity_refusals", "Sessions refused with CAPACITY_REACHED.", ["env"], registry=r
        ).labels(env)
        self._steps = Counter(
            "openenv_echo_steps",
            "Steps by outcome: ok, done (the episode ended), error (an error reply).",
            ["env", "outcome"],
            registry=r,
        )
        self._steps_by_outcome = {o: self._steps.labels(env, o) for o in ("ok", "done", "error")}
        self.step_seconds = Histogram(
            "openenv_echo_step_duration_seconds", "Step latency inside the server.", ["env"],
            buckets=LATENCY_BUCKETS, registry=r,
        ).labels(env)  # fmt: skip
        self.reset_seconds = Histogram(
            "openenv_echo_reset_duration_seconds", "Reset latency inside the server.", ["env"],
            buckets=LATENCY_BUCKETS, registry=r,
        ).labels(env)  # fmt: skip
        self._errors = Counter("openenv_echo_errors", "Error replies by code.", ["env", "code"], registry=r)
        self.received_bytes = Counter(
            "openenv_echo_received_bytes", "Bytes of request frames and bodies received.", ["env"], registry=r
        ).labels(env)
        self.sent_bytes = Counter("openenv_echo_sent_bytes", "Bytes of replies sent.", ["env"], registry=r).labels(env)
        self.tokens_attached = Counter(
            "openenv_echo_tokens_attached", "Segment-body token ids attached on request.", ["env"], registry=r
        ).labels(env)

    def watch_sessions(self, count: Callable[[], int]) -> None:
        """Read the active-session gauge from ``count`` at scrape time (nothing to update per session)."""
        self.sessions_active.set_function(count)

    def step(self, seconds: float, *, done: bool) -> None:
        self.step_seconds.observe(seconds)
        self._steps_by_outcome["done" if done else "ok"].inc()

    def step_failed(self) -> None:
        self._steps_by_outcome["error"].inc()

    def error(self, code: str) -> None:
        self._errors.labels(self.env, code).inc()

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)
