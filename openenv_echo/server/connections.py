"""Connection hygiene at the transport: a cap on open connections, a deadline for request headers, JSON refusals.

uvicorn's h11 protocol, extended: a connection over ``max_connections`` is answered 429 and closed before its
request is read; a connection that has not sent complete request headers ``header_timeout_s`` after it opened
(or after its previous response) is answered 408 and closed, so a slow client cannot hold a connection slot; a
request h11 cannot parse gets a JSON 400 instead of plain text. Body timeouts are the app's (``_RequestGuard``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from .limits import ServerLimits


def _raw_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"code": code, "message": message, "detail": None}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded_http_protocol(limits: ServerLimits) -> type[H11Protocol]:
    """The uvicorn ``http`` protocol class enforcing ``limits`` (pass it as ``uvicorn.Config(http=...)``)."""

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _armed_cycle: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.write(
                    _raw_response(
                        429,
                        "Too Many Requests",
                        "CAPACITY_REACHED",
                        f"server at its limit of {limits.max_connections} open connections; retry later",
                    )
                )
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._armed_cycle = self.cycle
            self._deadline = self.loop.call_later(limits.header_timeout_s, self._headers_overdue)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _headers_overdue(self) -> None:
            self._deadline = None
            if self.cycle is self._armed_cycle and not self.transport.is_closing():  # no request began in time
                self.transport.write(
                    _raw_response(
                        408,
                        "Request Timeout",
                        "REQUEST_TIMEOUT",
                        f"no complete request headers within {limits.header_timeout_s}s",
                    )
                )
                self.transport.close()

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._disarm()  # the WebSocket has its own keepalive pings and the sessions' idle reaper
            super().handle_websocket_upgrade(event)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on this keep-alive connection gets the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            self.transport.write(_raw_response(400, "Bad Request", "INVALID_HTTP", msg))
            self.transport.close()

    return GuardedH11Protocol
