"""What every server provider shares: the ``ProviderError`` type, readiness polling and the lifecycle protocol.

A provider starts an environment server somewhere (a local process, a Docker container) and hands back a base URL
for ``EnvClient``. Its job beyond that is diagnosis: when the server does not come up, or dies later, the error
must carry the server's own last log lines, because that is where the cause is.
"""

from __future__ import annotations

import atexit
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

DEFAULT_TAIL = 50
RUNNING: weakref.WeakSet[ServerProvider] = weakref.WeakSet()
"""Providers whose server is up: each adds itself when it launches and leaves when it stops; the rest are stopped
at interpreter exit, so a script that forgets ``stop()`` leaves no server behind."""


@atexit.register
def _stop_all() -> None:
    for provider in list(RUNNING):
        try:
            provider.stop()
        except Exception:
            pass


class ProviderError(RuntimeError):
    """A server could not be started, became unhealthy or died. ``logs`` holds its last log lines."""

    def __init__(self, message: str, *, logs: str = "", source: str = "") -> None:
        self.message = message
        self.logs = logs
        self.source = source
        text = message
        if logs.strip():
            text += f"\n--- last log lines of {source or 'the server'} ---\n{logs.rstrip()}"
        super().__init__(text)


class ServerProvider(ABC):
    """Lifecycle of one environment server: ``start() -> base_url``, ``stop()``, ``logs()``, ``check()``.

    Use as a context manager (``with provider: ...`` starts and stops it) or hand it to
    ``EnvClient.from_provider``. ``start`` is idempotent while the server runs.
    """

    #: Human-readable name used in error messages (container name, "local:echo", ...).
    label: str = "server"
    #: Readiness deadline used by ``start``.
    startup_timeout_s: float = 30.0

    def __init__(self) -> None:
        self._base_url: str | None = None

    # -- to implement -------------------------------------------------------------------------------------------
    @abstractmethod
    def _launch(self) -> str:
        """Start the server and return its base URL (readiness is checked by ``start``)."""

    @abstractmethod
    def _terminate(self) -> None:
        """Stop the server and release its resources; must tolerate a server that already died."""

    @abstractmethod
    def logs(self, tail: int = DEFAULT_TAIL) -> str:
        """The last ``tail`` lines the server wrote (stdout and stderr)."""

    @abstractmethod
    def exit_status(self) -> str | None:
        """None while the server process runs, else a short description of how it ended."""

    # -- lifecycle ----------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise ProviderError(f"{self.label} is not started; call start() first")
        return self._base_url

    @property
    def started(self) -> bool:
        return self._base_url is not None

    def start(self) -> str:
        """Start the server (if not already running), wait for ``/health`` and return the base URL."""
        if self._base_url is not None:
            self.check()
            return self._base_url
        try:
            url = self._launch()
            self._base_url = url
            self.wait_ready(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return url

    def stop(self) -> None:
        """Stop the server. Safe to call twice and after the server died."""
        self._terminate()
        self._base_url = None

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Poll ``GET /health`` until it answers 200; raise ``ProviderError`` (with logs) on death or timeout."""
        url = self.base_url.rstrip("/") + "/health"
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        with httpx.Client(trust_env=False, timeout=2.0) as http:
            while True:
                self._raise_if_dead("did not become healthy")
                try:
                    response = http.get(url)
                    if response.status_code == 200:
                        return
                    last = f"HTTP {response.status_code}"
                except httpx.HTTPError as e:
                    last = type(e).__name__
                if time.monotonic() >= deadline:
                    raise ProviderError(
                        f"{self.label}: GET /health did not return 200 within {timeout_s:g}s (last: {last})",
                        logs=self.logs(),
                        source=self.label,
                    )
                time.sleep(0.1)

    def is_running(self) -> bool:
        return self._base_url is not None and self.exit_status() is None

    def check(self) -> None:
        """Raise ``ProviderError`` with the last log lines if the server is not running any more."""
        if self._base_url is None:
            raise ProviderError(f"{self.label} is not started")
        self._raise_if_dead("is not running")

    def error_from(self, exc: BaseException) -> ProviderError:
        """Wrap an exception raised while talking to the server (e.g. a client error) with the server's
        state and last log lines, so a crash inside the server is reported where it is seen."""
        status = self.exit_status() if self._base_url is not None else "not started"
        state = f"server {status}" if status else "server still running"
        return ProviderError(
            f"{self.label}: {type(exc).__name__}: {exc} ({state})", logs=self.logs(), source=self.label
        )

    @contextmanager
    def reporting(self) -> Iterator[ServerProvider]:
        """``with provider.reporting(): client.step(...)`` re-raises any error as a ``ProviderError`` with logs."""
        try:
            yield self
        except ProviderError:
            raise
        except Exception as e:
            raise self.error_from(e) from e

    def _raise_if_dead(self, what: str) -> None:
        status = self.exit_status()
        if status is not None:
            raise ProviderError(f"{self.label} {what}: {status}", logs=self.logs(), source=self.label)

    def __enter__(self) -> ServerProvider:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label} url={self._base_url}>"


def tail_lines(text: str, tail: int) -> str:
    """The last ``tail`` lines of ``text`` (all of it for ``tail <= 0``)."""
    lines = text.splitlines()
    return "\n".join(lines[-tail:] if tail > 0 else lines)
