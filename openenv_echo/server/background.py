"""``BackgroundServer``: a real uvicorn server on a free loopback port, in a thread of this process.

For tests, benchmarks and notebooks; production uses ``serve`` (or the local-process / Docker providers).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from .serve import uvicorn_config


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class BackgroundServer:
    """``with BackgroundServer(app) as url: ...`` serves ``app`` until the block ends."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int | None = None) -> None:
        import uvicorn

        self.app = app
        self.host = host
        self.port = port or free_port(host)
        self._server = uvicorn.Server(uvicorn_config(app, host, self.port, app.state.limits))
        self._thread = threading.Thread(target=self._server.run, name=f"uvicorn:{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 15.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
