"""Server processes for client fault tests: a real ``openenv-echo serve`` that a test can kill, stop or restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from openenv_echo.server import free_port


class ServerProcess:
    """``openenv-echo serve ENV`` in its own process on a fixed free port, so it can come back on the same URL."""

    def __init__(self, env: str = "echo", *args: str) -> None:
        self.env, self.args = env, args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        cmd = [sys.executable, "-m", "openenv_echo.cli", "serve", self.env, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*cmd, "--log-level", "error", *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", trust_env=False, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server on port {self.port} did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.resume()
        self.kill()
