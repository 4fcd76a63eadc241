"""WebSocket sessions: one environment per connection, a capacity limit and an idle reaper."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .environment import Environment
from .workers import WorkerEnv

EnvHandle = Environment[Any, Any] | WorkerEnv
"""A session's env: an instance in this process, or a handle on one in its worker process (``BLOCKING`` envs)."""


class CapacityReached(Exception):
    def __init__(self, active: int, limit: int) -> None:
        super().__init__(f"Server at capacity: {active}/{limit} sessions active; retry when one closes")
        self.active = active
        self.limit = limit


@dataclass(eq=False)
class Session:
    """One env instance and its state. ``env`` is None after a timed-out step orphaned the old instance.

    A WS ``/ws`` connection owns its session; one made by JSON-RPC ``openenv/session/create`` (``http``) lives
    until ``openenv/session/close`` or the idle reaper, and a WebSocket may attach to it (``attached``).
    """

    id: str
    env: EnvHandle | None
    http: bool = False
    attached: bool = False
    closing: bool = False
    return_tokens: bool = False
    last_activity: float = field(default_factory=time.monotonic)
    busy: bool = False
    on_expire: Callable[[], Awaitable[None]] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def touch(self) -> None:
        self.last_activity = time.monotonic()


class SessionManager:
    """Counts live sessions against ``max_sessions`` and reaps idle ones."""

    def __init__(
        self, factory: Callable[[], Awaitable[EnvHandle]], max_sessions: int, idle_timeout_s: float | None
    ) -> None:
        self._factory = factory
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self._sessions: dict[str, Session] = {}
        self._reaper: asyncio.Task[None] | None = None

    @property
    def active(self) -> int:
        return len(self._sessions)

    async def open(self, http: bool = False) -> Session:
        """Reserve a slot and build the env; raises ``CapacityReached`` or whatever the factory raises."""
        if len(self._sessions) >= self.max_sessions:
            raise CapacityReached(len(self._sessions), self.max_sessions)
        session = Session(id=str(uuid.uuid4()), env=None, http=http)
        self._sessions[session.id] = session  # slot reserved before the factory runs
        try:
            session.env = await self._factory()
        except BaseException:
            del self._sessions[session.id]
            raise
        return session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    async def new_env(self) -> EnvHandle:
        return await self._factory()

    def close(self, session: Session) -> None:
        if self._sessions.pop(session.id, None) is not None and session.env is not None:
            _close_quietly(session.env)
            session.env = None

    def discard_env(self, session: Session) -> None:
        """Drop the session's env (after a timeout or a dead worker); the session itself stays open."""
        if session.env is not None:
            _close_quietly(session.env)
            session.env = None

    def close_all(self) -> None:
        for s in list(self._sessions.values()):
            self.close(s)

    # -- idle reaper ------------------------------------------------------------------------------------
    def start_reaper(self) -> None:
        if self.idle_timeout_s is not None and self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            try:
                await self._reaper
            except asyncio.CancelledError:
                pass
            self._reaper = None

    async def _reap_forever(self) -> None:
        assert self.idle_timeout_s is not None
        interval = min(max(self.idle_timeout_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            await self.reap_idle()

    async def reap_idle(self) -> int:
        """Expire sessions idle longer than the timeout (busy ones are never idle); returns how many."""
        if self.idle_timeout_s is None:
            return 0
        now = time.monotonic()
        expired = [s for s in self._sessions.values() if not s.busy and now - s.last_activity > self.idle_timeout_s]
        for s in expired:
            if s.on_expire is not None:
                try:
                    await s.on_expire()
                except Exception:
                    pass
            self.close(s)
        return len(expired)


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:
        pass
