"""``EnvPool``: spread env sessions over server replicas, keep each on its replica, route around dead ones.

A pool holds base URLs (a list, or a fleet provider with ``urls``/``heal()`` such as ``RayProvider``). ``lease()``
hands out the live replica with the fewest sessions; an episode stays on the URL it leased. When a replica is
found dead (``mark_dead``, or a lost connection followed by a failed health check) it leaves the rotation, the provider is
asked to replace it, and the next episode starts elsewhere: an episode is restarted, never resumed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import httpx

from .errors import ConnectionLostError, EnvClientError


class NoReplicaError(EnvClientError):
    """Every replica of the pool is dead (and none could be replaced)."""


class FleetProvider(Protocol):
    """What a pool needs of a fleet: its replica URLs and a way to replace dead ones."""

    @property
    def urls(self) -> list[str]: ...

    def heal(self) -> dict[str, str]: ...


class EnvPool:
    """Least-loaded placement of sessions over replica URLs; thread-safe (sync and async runners share it)."""

    def __init__(self, replicas: Sequence[str] | FleetProvider) -> None:
        self._provider: FleetProvider | None = None
        if isinstance(replicas, str):
            raise TypeError("EnvPool takes a list of base URLs or a fleet provider, not one URL")
        if isinstance(replicas, Sequence):
            urls = [str(u) for u in replicas]
        else:
            self._provider = replicas
            urls = list(replicas.urls)
        if not urls:
            raise ValueError("EnvPool needs at least one replica URL")
        self._load: dict[str, int] = {u.rstrip("/"): 0 for u in urls}
        self._dead: set[str] = set()
        self._lock = threading.Lock()
        self.replaced: dict[str, str] = {}  # old URL -> new URL, for reports

    @property
    def live(self) -> list[str]:
        with self._lock:
            return [u for u in self._load if u not in self._dead]

    def sessions(self) -> dict[str, int]:
        """Leased sessions per live replica."""
        with self._lock:
            return {u: n for u, n in self._load.items() if u not in self._dead}

    def acquire(self) -> str:
        """The live replica with the fewest leases (ties: first listed); ``NoReplicaError`` when none is left."""
        with self._lock:
            live = [u for u in self._load if u not in self._dead]
            if not live:
                raise NoReplicaError(f"no live replica left in the pool ({len(self._dead)} dead: {sorted(self._dead)})")
            url = min(live, key=lambda u: self._load[u])
            self._load[url] += 1
            return url

    def release(self, url: str) -> None:
        with self._lock:
            if self._load.get(url, 0) > 0:
                self._load[url] -= 1

    def mark_dead(self, url: str) -> None:
        """Take ``url`` out of rotation and, with a fleet provider, replace it (the new replica joins the pool)."""
        url = url.rstrip("/")
        with self._lock:
            if url in self._dead or url not in self._load:
                return
            self._dead.add(url)
        if self._provider is not None:
            replaced = self._provider.heal()
            with self._lock:
                for old, new in replaced.items():
                    self.replaced[old.rstrip("/")] = new.rstrip("/")
                    self._load.setdefault(new.rstrip("/"), 0)

    def suspect(self, url: str, timeout_s: float = 2.0) -> bool:
        """A session on ``url`` was cut: keep it if ``GET /health`` answers, else ``mark_dead``; True if dead."""
        try:
            healthy = httpx.get(url.rstrip("/") + "/health", trust_env=False, timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            healthy = False
        if not healthy:
            self.mark_dead(url)
        return not healthy

    @contextmanager
    def lease(self) -> Iterator[str]:
        """``with pool.lease() as url:`` one episode's replica; a ``ConnectionLostError`` inside marks it dead."""
        url = self.acquire()
        try:
            yield url
        except ConnectionLostError:
            self.suspect(url)
            raise
        finally:
            self.release(url)

    def __repr__(self) -> str:
        return f"<EnvPool live={self.live} dead={sorted(self._dead)}>"


def as_pool(target: Any) -> EnvPool | None:
    """``target`` as a pool if it is one (or a fleet provider), else None (a plain URL)."""
    if isinstance(target, EnvPool):
        return target
    if hasattr(target, "urls") and hasattr(target, "heal"):
        return EnvPool(target)
    return None
