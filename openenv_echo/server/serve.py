"""Run an app (or an environment class) under uvicorn with the WebSocket settings the limits need."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from .app import create_app
from .connections import guarded_http_protocol
from .environment import Environment
from .limits import ServerLimits
from .probes import PROBE_MAX_CONNECTIONS, probe_app


def uvicorn_config(app: Any, host: str, port: int, limits: ServerLimits, log_level: str = "warning") -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=guarded_http_protocol(limits),  # connection cap, header deadline, JSON transport errors
        ws="websockets-sansio",
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 * 1024,  # request line + headers
        # frames up to 4x the limit reach the app and get a MESSAGE_TOO_LARGE error frame; larger ones are
        # refused by the transport (close code 1009) before they are buffered
        ws_max_size=4 * limits.max_message_bytes,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        timeout_graceful_shutdown=5,
    )


def serve(
    app_or_env: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServerLimits | None = None,
    tokenizer: Any = None,
    log_level: str = "warning",
    probe_port: int | None = None,
) -> None:
    """Serve until interrupted. ``app_or_env`` is an app from ``create_app`` or an ``Environment`` subclass.

    ``probe_port``: also serve ``/health``, ``/ready`` and ``/metrics`` on a second listener that a flood of the
    main port cannot starve (``server.probes``; what orchestrators' probes should use).

    This process is the server's own: what it has built by now lives as long as it does, so it is frozen out of
    the garbage collector's full collections (which would otherwise walk it, pausing every session, each time)."""
    import uvicorn

    if isinstance(app_or_env, type) and issubclass(app_or_env, Environment):
        limits = limits or ServerLimits.from_env(defaults=app_or_env.DEFAULT_LIMITS)
        app = create_app(app_or_env, limits=limits, tokenizer=tokenizer)
    else:
        app = app_or_env
        limits = getattr(app.state, "limits", None) or limits or ServerLimits.from_env()
    server = uvicorn.Server(uvicorn_config(app, host, port, limits, log_level))
    probes = None
    if probe_port is not None:
        probe_limits = limits.model_copy(update={"max_connections": PROBE_MAX_CONNECTIONS, "header_timeout_s": 2.0})
        config = uvicorn_config(
            probe_app(app, lambda: len(server.server_state.connections)), host, probe_port, probe_limits, log_level
        )
        config.lifespan = "off"
        probes = uvicorn.Server(config)
    gc.collect()
    gc.freeze()
    if probes is None:
        server.run()
    else:
        asyncio.run(_serve_both(server, probes))


async def _serve_both(server: Any, probes: Any) -> None:
    """Run the main server and the probe listener on one loop; either one stopping stops the other."""
    probe_task = asyncio.create_task(probes.serve())
    try:
        await server.serve()
    finally:
        probes.should_exit = True
        await probe_task
