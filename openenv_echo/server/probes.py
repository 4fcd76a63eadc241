"""A second listener for orchestrators: liveness, readiness and metrics that a connection flood cannot starve.

The main port sheds load at the transport (``max_connections``: 429 before a request is read), so under a flood its
own ``/health`` is refused like everything else, and a liveness probe pointed at it would restart a pod that is only
shedding load, dropping every session on it. The probe port is a separate socket with its own small connection cap,
served by the same event loop, so an answer from it proves the loop is alive:

* ``GET /health``: 200 while the process serves (liveness: restart only a hung or dead server);
* ``GET /ready``: 200 while a new session would be accepted, 503 with the reason when the server is at its session
  or connection limit or the env says it cannot start one (``Environment.not_ready``: the shell env's Docker engine
  does not answer) (readiness: stop routing new sessions here, keep the pod);
* ``GET /metrics``: the same Prometheus exposition as the main port.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PROBE_MAX_CONNECTIONS = 16
"""Open connections the probe port accepts at once (probes and scrapes are few and short)."""


def probe_app(main: Any, open_connections: Any) -> Starlette:
    """The probe port's app over the main app's state; ``open_connections()`` counts the main port's connections."""
    state = main.state

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "healthy"})

    async def ready(request: Request) -> JSONResponse:
        limits, sessions = state.limits, state.sessions
        active, connections = sessions.active, open_connections()
        reasons = []
        if active >= limits.max_sessions:
            reasons.append(f"{active} of {limits.max_sessions} sessions in use")
        if connections >= limits.max_connections:
            reasons.append(f"{connections} of {limits.max_connections} connections open")
        env_reason = await state.env_cls.not_ready()
        if env_reason:
            reasons.append(env_reason)
        body = {
            "status": "not ready" if reasons else "ready",
            "reason": "; ".join(reasons) or None,
            "active_sessions": active,
            "max_sessions": limits.max_sessions,
            "open_connections": connections,
            "max_connections": limits.max_connections,
        }
        return JSONResponse(body, status_code=503 if reasons else 200)

    async def metrics(request: Request) -> Response:
        m = state.metrics
        return Response(m.exposition(), media_type=m.content_type)

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )
