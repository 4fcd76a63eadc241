"""``LocalProcessProvider``: an environment server as a child process on loopback (no Docker needed).

The embedded default: ``EnvClient.from_provider(LocalProcessProvider("echo"))`` runs
``python -m openenv_echo.cli serve echo --host 127.0.0.1 --port <free port>`` with the same interpreter, logs its
stdout/stderr to a temp file and stops it on ``stop()`` (or at interpreter exit, whichever comes first). The server
runs under ``openenv_echo.providers.parent_watch``, so it also stops when this process dies without running
either (SIGKILL, a test runner's timeout).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from ..server.background import free_port
from ..server.limits import ServerLimits
from .base import DEFAULT_TAIL, RUNNING, ProviderError, ServerProvider, tail_lines
from .parent_watch import guarded

_PORT_RETRIES = 3


class LocalProcessProvider(ServerProvider):
    """Serve environment ``env_name`` (a registry name or ``module:Class``) in a child Python process.

    ``limits`` are ``ServerLimits`` fields (``max_sessions=4``, ``idle_timeout_s=None``, ...); they are validated
    here and handed to the server as ``OPENENV_ECHO_*`` environment variables. ``port=None`` picks a free one
    (retried if another process grabs it first). ``env`` adds environment variables for the server process;
    ``cwd`` is its working directory (``python -m`` puts it first on the path: with a ``PYTHONPATH`` in ``env``, the
    server runs another checkout's code, as a before/after benchmark does).
    """

    def __init__(
        self,
        env_name: str,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        mode: Literal["simulation", "production"] = "simulation",
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
        startup_timeout_s: float = 30.0,
        log_level: str = "info",
        keep_log: bool = False,
        **limits: Any,
    ) -> None:
        super().__init__()
        if not env_name or not isinstance(env_name, str):
            raise ValueError("env_name must be a non-empty string (echo, terminal, sql or module:Class)")
        if mode not in ("simulation", "production"):
            raise ValueError(f"mode must be 'simulation' or 'production', not {mode!r}")
        self.limits = ServerLimits(**limits)  # bad names/values fail here, not in the child
        self.env_name = env_name
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.mode = mode
        self.python = python
        self.extra_env = dict(env or {})
        self.cwd = Path(cwd) if cwd is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.log_level = log_level
        self.keep_log = keep_log
        self.label = f"local:{env_name}"
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    # -- ServerProvider -----------------------------------------------------------------------------------------
    def start(self) -> str:
        attempts = 1 if self.requested_port else _PORT_RETRIES
        for attempt in range(attempts):
            try:
                return super().start()
            except ProviderError as e:
                if attempt + 1 < attempts and "address already in use" in e.logs.lower():
                    continue  # the free port was taken between picking and binding it
                raise
        raise AssertionError("unreachable")

    def _launch(self) -> str:
        self._cleanup_log()
        self.port = self.requested_port or free_port(self.host)
        fd, name = tempfile.mkstemp(prefix=f"openenv-echo-{_safe(self.env_name)}-", suffix=".log")
        self.log_path = Path(name)
        self._log_file = os.fdopen(fd, "wb", buffering=0)
        try:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=self._child_env(),
                cwd=self.cwd,
                start_new_session=True,  # Ctrl-C in a notebook does not kill the server mid-episode
            )
        except OSError as e:
            raise ProviderError(f"{self.label}: could not run {self.python}: {e}") from e
        RUNNING.add(self)
        return f"http://{_url_host(self.host)}:{self.port}"

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        RUNNING.discard(self)
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        if not self.keep_log:
            self._cleanup_log()

    def logs(self, tail: int = DEFAULT_TAIL) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return tail_lines(self.log_path.read_bytes().decode("utf-8", "replace"), tail)

    def exit_status(self) -> str | None:
        if self._proc is None:
            return "not running"
        code = self._proc.poll()
        return None if code is None else _describe(code)

    # -- helpers ------------------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def command(self) -> list[str]:
        """The server command line: ``openenv-echo serve`` through ``python -m`` (so the same venv is used), under a
        watchdog that stops it when this process dies."""
        return guarded(
            self.python, "openenv_echo.cli", "serve", self.env_name,
            "--host", self.host, "--port", str(self.port), "--mode", self.mode, "--log-level", self.log_level,
        )  # fmt: skip

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("_TYPER_STANDARD_TRACEBACK", "1")  # plain tracebacks in the log, not rich boxes
        env.setdefault("COLUMNS", "160")
        for name, value in self.limits.model_dump(exclude_unset=True).items():  # the rest: the env's own defaults
            env[f"OPENENV_ECHO_{name.upper()}"] = "none" if value is None else str(value)
        return env

    def _cleanup_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self.log_path is not None and not self.keep_log:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"exited on signal {signal.Signals(-code).name}"
        except ValueError:
            return f"exited on signal {-code}"
    return f"exited with code {code}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
