"""A live ``openenv-echo serve`` process for the cost catalogue: its process tree, its temp dir, raw WS sessions.

The catalogue drives one server per env through raw frames (so every error frame is seen as sent) and measures
the server from outside: the RSS of the server and its session workers, the bytes under its ``TMPDIR``, its pid.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil
from websockets.sync.client import ClientConnection, connect

CANARY_ENV = "OPENENV_ECHO_TEST_CANARY"


class LiveServer:
    """``python -m openenv_echo.cli serve <env>`` on a free port, with a private TMPDIR and a canary env var."""

    def __init__(self, env: str, *flags: str) -> None:
        from openenv_echo.server import free_port

        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"openenv-echo-{env}-"))
        self.canary = "canary-" + uuid.uuid4().hex
        environ = {**os.environ, "TMPDIR": str(self.tmp), CANARY_ENV: self.canary}
        cmd = [sys.executable, "-m", "openenv_echo.cli", "serve", env, "--port", str(self.port), "--log-level", "error"]
        self.proc = subprocess.Popen([*cmd, *flags], env=environ, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/health", trust_env=False, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{env} server did not start")
            time.sleep(0.1)
        self.pid = self.proc.pid

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)  # the private TMPDIR

    # -- measurements ---------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def workers(self) -> set[int]:
        """Pids of the session workers (children of the fork server, itself a child of the server)."""
        pids = set()
        for p in psutil.Process(self.pid).children(recursive=True):
            try:
                if p.ppid() != self.pid:
                    pids.add(p.pid)
            except psutil.NoSuchProcess:  # a closed session's worker exiting right now
                pass
        return pids

    def tree_rss_mb(self) -> float:
        procs = [psutil.Process(self.pid), *psutil.Process(self.pid).children(recursive=True)]
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total / 2**20

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.tmp.rglob("*") if f.is_file())

    def host_facts(self) -> list[str]:
        """Strings that would reveal the host: its name, paths, the canary env var, today's date, pids."""
        today = time.gmtime()
        facts = [
            self.canary,
            str(self.tmp),
            os.getcwd(),
            sys.prefix,
            time.strftime("%Y-%m-%d", today),
            time.strftime("%d/%b/%Y", today),
            f"pid {self.pid}",
        ]
        if socket.gethostname() not in ("localhost", ""):
            facts.append(socket.gethostname())
        return facts

    # -- sessions -------------------------------------------------------------------------------------
    def session(self) -> Session:
        return Session(self)


class Session:
    """One raw WebSocket session: ``send`` returns the reply frame as a dict (strict JSON checked)."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        before = server.workers()
        self.ws: ClientConnection = connect(server.url.replace("http", "ws") + "/ws", max_size=None, open_timeout=30)
        self.worker: int | None = None
        self._before = before

    def send(self, frame: dict[str, Any] | str, timeout: float = 60) -> dict[str, Any]:
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))
        reply = self.ws.recv(timeout=timeout)
        parsed = strict_loads(reply)
        if self.worker is None:
            new = self.server.workers() - self._before
            self.worker = min(new) if new else None
        return parsed

    def reset(self, **data: Any) -> dict[str, Any]:
        return self.send({"type": "reset", "data": data})

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return self.send({"type": "step", "data": action})

    def worker_peak_mb(self) -> float:
        """Peak resident memory of this session's worker (VmHWM), 0 without a worker."""
        if self.worker is None:
            return 0.0
        for line in Path(f"/proc/{self.worker}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def close(self) -> None:
        self.ws.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} in a reply: not strict JSON")


def strict_loads(text: str | bytes) -> Any:
    """Parse a reply as strict JSON (no NaN/Infinity); raises on anything else."""
    return json.loads(text, parse_constant=_no_constant)


def observation_text(reply: dict[str, Any]) -> str:
    assert reply["type"] == "observation", reply
    return "".join(s["text"] for s in reply["data"]["observation"]["segments"])
