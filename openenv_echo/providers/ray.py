"""``RayProvider``: a fleet of env server replicas as Ray actors, on an existing Ray cluster or a local one.

Each replica is one actor process that serves the env with uvicorn on its node's address (loopback on a local
cluster), so a replica killed by Ray, the OS or a node failure takes exactly its server with it. The provider
keeps the fleet whole: ``check()`` names dead replicas with Ray's cause of death, ``heal()`` replaces them, and
``urls`` lists the live ones for an ``EnvPool`` to spread sessions over.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Any

import httpx

from ..server.env_spec import EnvSpec
from ..server.limits import ServerLimits
from .base import DEFAULT_TAIL, ProviderError, ServerProvider, tail_lines


class _LogBuffer(logging.Handler):
    """The server's recent log lines, kept in the actor for ``logs()``."""

    def __init__(self, capacity: int = 2000) -> None:
        super().__init__()
        self.lines: deque[str] = deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def keep_on_loopback() -> None:
    """Make a Ray started from this process a one-machine cluster on 127.0.0.1.

    Ray otherwise swaps 127.0.0.1 for the machine's outward address. The switch is read from the environment when
    ``ray`` is first imported (and inherited by the processes Ray starts), so it is set there and, in case ``ray``
    was imported already (some libraries import it), on the loaded constants too.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import sys

    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        setattr(constants, "ENABLE_RAY_CLUSTER", False)  # noqa: B010 (a module attribute mypy cannot see)


def _node_address() -> str:
    """The address this actor's Ray node was started with (``--node-ip-address``; loopback on a local cluster)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node["NodeID"] == node_id:
            return str(node["NodeManagerAddress"])
    raise RuntimeError(f"this actor's node {node_id} is not in the cluster's node table")


class _Replica:
    """Actor body: serve ``env_name`` on a free port of this node until the actor dies."""

    def __init__(self, env_name: str, target: str, limits: dict[str, Any], host: str | None) -> None:
        import uvicorn

        from ..server.app import create_app
        from ..server.background import free_port
        from ..server.env_spec import load_target
        from ..server.serve import uvicorn_config

        self.logs_handler = _LogBuffer()
        self.logs_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "openenv_echo"):
            logging.getLogger(name).addHandler(self.logs_handler)
        if host is None:
            host = _node_address()
        self.host = host
        app = create_app(load_target(target), limits=ServerLimits(**limits))
        self.port = free_port(host)
        self.server = uvicorn.Server(uvicorn_config(app, host, self.port, app.state.limits, log_level="info"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server for {env_name!r} did not start:\n" + self.logs(DEFAULT_TAIL))
            time.sleep(0.02)

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def logs(self, tail: int = DEFAULT_TAIL) -> str:
        return tail_lines("\n".join(self.logs_handler.lines), tail)


class RayProvider(ServerProvider):
    """``replicas`` servers of the env ``spec`` (``openenv_echo.envs.spec_of("echo")``) as Ray actors; ``address`` is
    an existing cluster ("auto", "127.0.0.1:6379", "ray://...") or None for a local one started on demand.

    ``num_cpus`` is reserved per replica (placement); ``spread=True`` asks Ray to put replicas on different nodes.
    ``limits`` are ``ServerLimits`` fields, validated here. ``base_url`` is the first live replica; ``urls`` all.
    """

    def __init__(
        self,
        spec: EnvSpec,
        replicas: int = 2,
        *,
        address: str | None = None,
        num_cpus: float = 0.5,
        spread: bool = True,
        host: str | None = None,
        startup_timeout_s: float = 60.0,
        **limits: Any,
    ) -> None:
        super().__init__()
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        self.spec = spec
        self.env_name = spec.name
        self.replicas = replicas
        self.address = address
        self.num_cpus = num_cpus
        self.spread = spread
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.limits = ServerLimits.model_validate({**_env_defaults(spec), **limits}).model_dump()
        self.label = f"ray:{spec.name}"
        self._actors: list[Any] = []
        self._urls: list[str] = []
        self._dead: dict[str, str] = {}  # url -> cause, for replicas found dead and not yet replaced

    # -- fleet ---------------------------------------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        """Base URLs of the replicas (live or not yet found dead)."""
        return list(self._urls)

    def _ray(self) -> Any:
        if self.address is None:
            keep_on_loopback()
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        return ray

    def _spawn(self) -> tuple[Any, str]:
        ray = self._ray()
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "max_restarts": 0, "max_concurrency": 4}
        if self.spread:
            options["scheduling_strategy"] = "SPREAD"
        actor = ray.remote(_Replica).options(**options).remote(self.env_name, self.spec.target, self.limits, self.host)
        try:
            url = ray.get(actor.url.remote(), timeout=self.startup_timeout_s)
        except Exception as e:
            ray.kill(actor)
            raise ProviderError(f"{self.label}: a replica did not start: {e}", source=self.label) from e
        return actor, url

    def _launch(self) -> str:
        for _ in range(self.replicas):
            actor, url = self._spawn()
            self._actors.append(actor)
            self._urls.append(url)
        return self._urls[0]

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(trust_env=False, timeout=2.0) as http:
            for url in self._urls:
                while True:
                    try:
                        if http.get(url + "/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise ProviderError(f"{self.label}: {url} not healthy in {timeout_s:g}s", logs=self.logs())
                    time.sleep(0.1)

    def dead_replicas(self) -> dict[str, str]:
        """URL -> cause of death for every replica whose actor no longer answers."""
        ray = self._ray()
        for actor, url in zip(self._actors, self._urls):
            if url in self._dead:
                continue
            try:
                ray.get(actor.pid.remote(), timeout=10)
            except Exception as e:  # RayActorError, ActorDiedError, GetTimeoutError
                self._dead[url] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return dict(self._dead)

    def heal(self) -> dict[str, str]:
        """Replace every dead replica with a new one; returns old URL -> new URL."""
        replaced: dict[str, str] = {}
        for url in list(self.dead_replicas()):
            i = self._urls.index(url)
            actor, new = self._spawn()
            self._actors[i], self._urls[i] = actor, new
            del self._dead[url]
            replaced[url] = new
        if replaced:
            self._base_url = self._urls[0]
            self.wait_ready(self.startup_timeout_s)
        return replaced

    def replica_pids(self) -> dict[str, int]:
        """URL -> pid of each live replica's actor process (for diagnosis and fault tests)."""
        ray = self._ray()
        dead = self.dead_replicas()
        return {u: ray.get(a.pid.remote()) for a, u in zip(self._actors, self._urls) if u not in dead}

    def placement(self) -> dict[str, str]:
        """URL -> Ray node id of each live replica."""
        ray = self._ray()
        dead = self.dead_replicas()
        return {u: ray.get(a.node_id.remote()) for a, u in zip(self._actors, self._urls) if u not in dead}

    # -- ServerProvider ------------------------------------------------------------------------------------------
    def _terminate(self) -> None:
        if self._actors:
            ray = self._ray()
            for actor in self._actors:
                try:
                    ray.kill(actor)
                except Exception:
                    pass
        self._actors, self._urls, self._dead = [], [], {}

    def logs(self, tail: int = DEFAULT_TAIL) -> str:
        if not self._actors:
            return ""
        ray = self._ray()
        parts = []
        for actor, url in zip(self._actors, self._urls):
            if url in self._dead:
                parts.append(f"== {url} (dead: {self._dead[url]})")
                continue
            try:
                parts.append(f"== {url}\n{ray.get(actor.logs.remote(tail), timeout=10)}")
            except Exception as e:
                parts.append(f"== {url} (no logs: {type(e).__name__})")
        return "\n".join(parts)

    def exit_status(self) -> str | None:
        if not self._actors:
            return None
        dead = self.dead_replicas()
        if not dead:
            return None
        return f"{len(dead)} of {len(self._urls)} replicas dead: " + "; ".join(f"{u}: {c}" for u, c in dead.items())


def _env_defaults(spec: EnvSpec) -> dict[str, Any]:
    """The env's own ``ServerLimits`` defaults (the shell env's longer step timeout); none when its class does not
    import here (a replica then reports why it did not start)."""
    try:
        return dict(spec.load().DEFAULT_LIMITS)
    except ImportError:
        return {}
