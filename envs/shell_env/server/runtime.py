"""The shell env's side of the Docker engine, shared by every session of one server process.

* **Images**: each task's ``environment/`` is built once into ``openenv-echo-shell/<task>:<digest>`` (the digest
  covers the directory's files and the base image, so an edit rebuilds), with the project's base image as
  ``BASE_IMAGE``; a task without a Dockerfile runs on the base image itself.
* **Pool**: after a session takes a container for a task, a replacement for that task is started in the background,
  so the next reset of that task finds one ready; at most ``OPENENV_ECHO_SHELL_POOL`` (default 4) wait, the least
  recently used task's first to go.
* **Ownership**: every container the env creates (an episode's sandbox, one waiting in the pool, the never-started
  one a task image's working directory is copied from; ``sandbox.KIND_LABEL`` says which) carries the label
  ``io.openenv-echo.shell=<host>/<pid>/<start time>`` of the server process that made it. ``remove_orphans`` (at server start) removes the containers of owners that are gone (a
  crashed or restarted server on this host or in a container of this engine; an owner elsewhere after a day);
  ``close`` removes this process's own. Sessions remove theirs when the
  episode ends, on reset, on disconnect and on idle timeout.

All Docker calls run on the runtime's threads (``call``); the event loop never waits on the engine.
"""

from __future__ import annotations

import asyncio
import atexit
import datetime
import hashlib
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from .sandbox import Sandbox, SandboxSpec, app_tar, workdir_tar
from .tasks import BASE_IMAGE, SUITE_DIR, HarborTask, load_task

T = TypeVar("T")

OWNER_LABEL = "io.openenv-echo.shell"
TASK_LABEL = "io.openenv-echo.shell.task"
IMAGE_LABEL = "io.openenv-echo.shell.image"
IMAGE_REPOSITORY = "openenv-echo-shell"
DEFAULT_POOL = 4
UNKNOWN_OWNER_MAX_AGE_S = 24 * 3600.0
"""Containers of an owner whose liveness cannot be checked (another host, a pod) are removed once this old."""
_THREADS = 32


class EngineUnavailable(RuntimeError):
    """No Docker engine answers (or the base image is missing); the message says how to get one."""


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_token() -> str:
    """This server process: ``<hostname>/<pid>/<start time in clock ticks>`` (a restart gives a new token)."""
    return f"{socket.gethostname()}/{os.getpid()}/{_start_time(os.getpid())}"


def owner_alive(token: str, client: Any) -> bool | None:
    """Whether the server process named by ``token`` still runs: on this host, its pid with the same start time;
    in a container of this engine (hostname = container id), that container running; None when that cannot be known
    (another host, a pod)."""
    host, _, rest = token.partition("/")
    pid, _, started = rest.partition("/")
    if host == socket.gethostname():
        return pid.isdigit() and _start_time(int(pid)) == started
    if len(host) == 12 and all(c in "0123456789abcdef" for c in host):
        try:
            return bool(client.containers.get(host).status == "running")
        except Exception:
            return False
    return None


def _age_s(container: Any) -> float:
    created = str(container.attrs.get("Created", ""))[:19]  # 2026-01-31T12:00:00[.fraction]Z, UTC
    try:
        return time.time() - datetime.datetime.fromisoformat(created).replace(tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return 0.0


def _digest(path: Path, base: str) -> str:
    h = hashlib.sha256(base.encode())
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


class ShellRuntime:
    """Docker client, task images, the container pool and ownership (see the module docstring)."""

    def __init__(self, pool_size: int | None = None) -> None:
        self.pool_size = (
            int(os.environ.get("OPENENV_ECHO_SHELL_POOL", DEFAULT_POOL)) if pool_size is None else pool_size
        )
        self.base_image = os.environ.get("BASE_IMAGE") or BASE_IMAGE
        self.owner = owner_token()
        self.executor = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="openenv-echo-shell")
        self._client: Any = None
        self._lock = threading.RLock()
        self._build_locks: dict[str, threading.Lock] = {}
        self._specs: dict[str, SandboxSpec] = {}
        self._pool: OrderedDict[str, list[Sandbox]] = OrderedDict()
        self._filling: set[str] = set()
        self._live: set[Sandbox] = set()
        self._closed = False
        self.cold_starts = 0
        self.warm_starts = 0

    # -- the engine ----------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                from openenv_echo.providers.base import ProviderError
                from openenv_echo.providers.docker import docker_client

                try:
                    self._client = docker_client(timeout_s=120)
                except ProviderError as e:
                    raise EngineUnavailable(str(e)) from None
            return self._client

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the runtime's threads."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def labels(self, task: str) -> dict[str, str]:
        return {OWNER_LABEL: self.owner, TASK_LABEL: task}

    def remove_orphans(self) -> int:
        """Remove the containers whose owner server is gone (or, when that cannot be known, that are older than
        ``UNKNOWN_OWNER_MAX_AGE_S``); returns how many."""
        removed = 0
        for container in self.client.containers.list(all=True, filters={"label": OWNER_LABEL}):
            token = container.labels.get(OWNER_LABEL, "")
            if token == self.owner:
                continue
            alive = owner_alive(token, self.client)
            if alive is False or (alive is None and _age_s(container) > UNKNOWN_OWNER_MAX_AGE_S):
                try:
                    container.remove(force=True, v=True)
                    removed += 1
                except Exception:
                    pass
        return removed

    # -- images --------------------------------------------------------------------------------------------
    def image_for(self, task: HarborTask) -> str:
        """The task's image, built now if it is missing (one build per task at a time)."""
        if task.dockerfile is None:
            self._require_base()
            return self.base_image
        base_id = self._require_base()
        tag = f"{IMAGE_REPOSITORY}/{task.name}:{_digest(task.environment_dir, base_id + self.base_image)}"
        with self._lock:
            lock = self._build_locks.setdefault(task.name, threading.Lock())
        with lock:
            try:
                self.client.images.get(tag)
                return tag
            except Exception:
                pass
            self._build(task, tag)
        return tag

    def _require_base(self) -> str:
        try:
            return str(self.client.images.get(self.base_image).id)
        except EngineUnavailable:
            raise
        except Exception:
            raise EngineUnavailable(
                f"the base image {self.base_image} is missing: build it with scripts/docker/build-base-image.sh "
                "(or set BASE_IMAGE to one the engine has)"
            ) from None

    def _build(self, task: HarborTask, tag: str) -> None:
        timeout = task.config.get("environment", {}).get("build_timeout_sec", 600)
        log: list[str] = []
        stream = self.client.api.build(
            path=str(task.environment_dir),
            tag=tag,
            buildargs={"BASE_IMAGE": self.base_image},
            labels={IMAGE_LABEL: task.name},
            rm=True,
            forcerm=True,
            decode=True,
            timeout=int(timeout) if isinstance(timeout, (int, float)) else 600,
        )
        for chunk in stream:
            if "error" in chunk:
                tail = "\n".join(log[-20:])
                raise RuntimeError(f"building the image of task {task.name} failed: {chunk['error'].strip()}\n{tail}")
            text = chunk.get("stream")
            if text and text.strip():
                log.append(text.rstrip())

    def spec_for(self, task: HarborTask) -> SandboxSpec:
        image = self.image_for(task)
        with self._lock:
            spec = self._specs.get(task.name)
        if spec is None or spec.image != image:
            spec = SandboxSpec(
                task.name,
                image,
                task.workdir,
                task.limits,
                workdir_tar(self.client, image, task.workdir, self.labels(task.name)),
            )
            with self._lock:
                self._specs[task.name] = spec
        return spec

    def generated_spec(self, task: HarborTask) -> SandboxSpec:
        """What a generated instance's containers are made of before its files come in: its family's shipped
        image and limits, an empty working directory. Shared by every instance of the family (one pool entry,
        ``<family>+generated``)."""
        assert task.image_of is not None
        shipped = load_task(SUITE_DIR / task.image_of)
        image = self.image_for(shipped)
        return SandboxSpec(f"{shipped.name}+generated", image, shipped.workdir, shipped.limits, None)

    # -- containers ----------------------------------------------------------------------------------------
    def acquire(self, task: HarborTask) -> Sandbox:
        """A ready sandbox for ``task``: a pooled one if waiting, else a new one; then the pool is refilled. A
        generated instance (``image_of``) gets one of its family's empty ones, its files unpacked now (before the
        refill starts: a container's start takes both cores for a while, and the reset waits on the unpacking)."""
        if task.image_of is None:
            spec, files = self.spec_for(task), None
        else:
            spec, files = self.generated_spec(task), app_tar(task.environment_dir / "app")
        sandbox = self._take(spec)
        try:
            if files is not None:
                sandbox.fill(files)
        except BaseException:
            self.release(sandbox)
            raise
        finally:
            if self.pool_size > 0:
                self.executor.submit(self._refill, spec)
        return sandbox

    def _take(self, spec: SandboxSpec) -> Sandbox:
        sandbox = None
        with self._lock:
            waiting = self._pool.get(spec.task)
            if waiting:
                sandbox = waiting.pop()
                self._pool.move_to_end(spec.task)
        if sandbox is not None and sandbox.spec.image == spec.image and sandbox.status() == "running":
            self.warm_starts += 1
        else:
            if sandbox is not None:
                self.release(sandbox)
            sandbox = self._create(spec)
            self.cold_starts += 1
        return sandbox

    def _create(self, spec: SandboxSpec) -> Sandbox:
        sandbox = Sandbox.create(self.client, spec, self.labels(spec.task))
        with self._lock:
            closed = self._closed
            if not closed:
                self._live.add(sandbox)
        if closed:
            sandbox.remove()
            raise RuntimeError("the shell runtime is shut down")
        return sandbox

    def _refill(self, spec: SandboxSpec) -> None:
        with self._lock:
            if self._closed or spec.task in self._filling or self._pool.get(spec.task):
                return
            self._filling.add(spec.task)
        try:
            sandbox = self._create(spec)
        except Exception:
            return
        finally:
            with self._lock:
                self._filling.discard(spec.task)
        evicted: list[Sandbox] = []
        with self._lock:
            self._pool.setdefault(spec.task, []).append(sandbox)
            self._pool.move_to_end(spec.task)
            while sum(len(v) for v in self._pool.values()) > self.pool_size:
                oldest = next(iter(self._pool))
                evicted.append(self._pool[oldest].pop(0))
                if not self._pool[oldest]:
                    del self._pool[oldest]
        for old in evicted:
            self.release(old)

    def release(self, sandbox: Sandbox) -> None:
        """Remove ``sandbox``'s container now (call on the runtime's threads)."""
        sandbox.remove()
        with self._lock:
            self._live.discard(sandbox)

    def release_later(self, sandbox: Sandbox) -> None:
        """Remove ``sandbox``'s container on the runtime's threads (callable from the event loop)."""
        try:
            self.executor.submit(self.release, sandbox)
        except RuntimeError:  # the executor is shut down: do it here
            self.release(sandbox)

    def warm(self, task: str | None = None) -> int:
        """Containers waiting in the pool (for ``task``, or ``<family>+generated``, or all)."""
        with self._lock:
            if task is not None:
                return len(self._pool.get(task, ()))
            return sum(len(v) for v in self._pool.values())

    def close(self) -> None:
        """Remove every container of this runtime (pooled and in use) and stop its threads."""
        with self._lock:
            self._closed = True
            live = list(self._live)
            self._pool.clear()
        for sandbox in live:
            self.release(sandbox)
        self.executor.shutdown(wait=True, cancel_futures=True)
        for sandbox in list(self._live):  # created by a call that was still running
            self.release(sandbox)


_runtime: ShellRuntime | None = None
_users = 0
_runtime_lock = threading.Lock()


def runtime() -> ShellRuntime:
    """This process's runtime (made on first use; closed by the last server that used it, or at exit)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = ShellRuntime()
            atexit.register(_close_at_exit, _runtime)
        return _runtime


def _close_at_exit(rt: ShellRuntime) -> None:
    """Remove what a runtime still holds when the interpreter exits (an env used without a server)."""
    if not rt._closed:
        rt.close()


def attach() -> ShellRuntime:
    """A server starts using the runtime (``ShellEnvironment.startup``)."""
    global _users
    with _runtime_lock:
        _users += 1
    return runtime()


def detach() -> ShellRuntime | None:
    """A server stops; the last one out gets the runtime to close (and a later server makes a new one)."""
    global _runtime, _users
    with _runtime_lock:
        _users = max(_users - 1, 0)
        if _users or _runtime is None:
            return None
        closing, _runtime = _runtime, None
        return closing


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` (for tests and benchmarks of the pool)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
