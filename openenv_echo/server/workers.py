"""Environment instances in worker processes: forked from a pre-warmed fork server, under OS limits, killed on overrun.

Threads cannot preempt Python code, so a step that runs away cannot be stopped inside the server process. An env
class with ``BLOCKING = True`` therefore gets one worker process per session, forked by a fork server (a
single-threaded process that has the env modules imported already, so a fork costs a few ms). In the worker, RLIMIT_AS bounds
memory above the baseline, RLIMIT_FSIZE the files it may write, RLIMIT_CPU each call's CPU time (a backstop);
a call that overruns its wall-time budget is answered ``STEP_TIMEOUT`` and the process is SIGKILLed. Sessions
never share a worker, so one session's step cannot stall another and the OS scheduler shares the cores fairly.

Resets run on a second thread of the worker. The kernel's fair scheduler charges each thread for the CPU it used:
a world build (~100 steps of CPU) on the thread that steps would push the session's next step behind every other
session's, so the first step of each episode would wait far longer than the rest. On its own thread the build's
charge stays with the builds.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import pickle
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ..wire import ErrorCode
from .environment import EnvError, Environment

# starting a worker talks to the fork server over one socket: starts go through one thread, one at a time
_STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openenv-echo-workers")
_START_TIMEOUT_S = 30.0
_FRAME_HEADER = 4
# workers yield the cores to the server process: however many sessions are busy, the event loop that moves their
# frames (and answers /health) is scheduled first
_WORKER_NICENESS = 10


@dataclass(frozen=True)
class WorkerLimits:
    """OS limits of one worker process (from ``ServerLimits``)."""

    memory_bytes: int
    file_bytes: int
    cpu_s_per_call: float | None


class WorkerFailed(Exception):
    """The worker could not answer (killed, out of memory, crashed): its env instance is gone."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class WorkerFactoryError(Exception):
    """The env class's constructor raised inside the worker."""


# -- inside the worker -------------------------------------------------------------------------------------


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _apply_limits(limits: WorkerLimits) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    address_space = _vm_bytes() + limits.memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


def _arm_cpu_limit(cpu_s: float | None) -> None:
    if cpu_s is None:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(used.ru_utime + used.ru_stime + cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))  # SIGXCPU at soft kills the worker


def _serve(conn: Connection, env_cls: type[Environment[Any, Any]], limits: WorkerLimits) -> None:
    """The worker's loop: build the env, then answer ``(method, args, kwargs)`` requests until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which then closes its workers
    os.nice(_WORKER_NICENESS)
    try:
        env = env_cls()
    except BaseException as e:
        conn.send(("factory_error", f"{type(e).__name__}: {e}"))
        return
    builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openenv-echo-reset")
    builder.submit(int).result()  # its thread starts now, before the limits: its stack is not the session's memory
    _apply_limits(limits)
    conn.send(("ready", None))
    while True:
        try:
            method, args, kwargs = conn.recv()
        except (EOFError, OSError):
            env.close()
            return
        _arm_cpu_limit(limits.cpu_s_per_call)
        try:
            if method == "reset":
                result = builder.submit(_dispatch, env, method, args, kwargs).result()
            else:
                result = _dispatch(env, method, args, kwargs)
            reply: tuple[Any, ...] = ("ok", result)
        except EnvError as e:
            reply = ("env_error", e.code.value, str(e))
        except MemoryError:
            reply = ("memory", None)
        except RecursionError:
            reply = ("error", "RecursionError: the step nested too deeply")
        except Exception as e:
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except MemoryError:
            reply = ("memory", None)
            conn.send(reply)
        if reply[0] == "memory":
            os._exit(3)  # the heap may be inconsistent after a failed allocation: this instance is done


def _dispatch(env: Environment[Any, Any], method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if method == "state":
        return env.state.model_dump(mode="json")
    if method not in ("reset", "step"):
        raise EnvError(f"unknown worker method {method!r}")
    return getattr(env, method)(*args, **kwargs)


# -- in the server ------------------------------------------------------------------------------------------


class WorkerEnv:
    """The server's handle on one env instance living in its own worker process."""

    BLOCKING = True

    def __init__(
        self, pid: int, pidfd: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: WorkerLimits
    ) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self.limits = limits
        self._reader = reader
        self._writer = writer
        self._alive = True
        self.done = False  # the last observation's ``done`` (tool lists report it without a call)

    @classmethod
    async def start(cls, env_cls: type[Environment[Any, Any]], limits: WorkerLimits) -> WorkerEnv:
        """Fork a worker for a new ``env_cls`` instance; raises ``WorkerFactoryError`` if its constructor raises."""
        loop = asyncio.get_running_loop()
        pid, pidfd, sock = await loop.run_in_executor(_STARTER, _fork_server().fork, env_cls, limits)
        reader, writer = await asyncio.open_connection(sock=sock)
        worker = cls(pid, pidfd, reader, writer, limits)
        try:
            reply = await worker._exchange(None, _START_TIMEOUT_S)
        except BaseException:
            worker.kill()
            raise
        if reply[0] != "ready":
            worker.kill()
            raise WorkerFactoryError(reply[1])
        return worker

    @property
    def alive(self) -> bool:
        return self._alive

    async def call(
        self,
        method: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Run ``env.<method>(*args, **kwargs)`` in the worker; the env's own ``EnvError``s are re-raised as such."""
        if not self._alive:
            raise WorkerFailed(ErrorCode.EPISODE_NOT_STARTED, "this session's environment is gone: send a reset")
        try:
            reply = await self._exchange((method, args, kwargs or {}), timeout_s)
        except asyncio.TimeoutError:
            self.kill()
            raise WorkerFailed(
                ErrorCode.STEP_TIMEOUT,
                f"the step did not finish within {timeout_s}s: it was stopped and the episode abandoned; "
                "reset to start anew",
            ) from None
        except (EOFError, OSError):
            self.kill()
            raise WorkerFailed(
                ErrorCode.STEP_TIMEOUT,
                f"the step was stopped (over its CPU budget of {self.limits.cpu_s_per_call}s, or its worker crashed); "
                "the episode was abandoned, reset to start anew",
            ) from None
        kind = reply[0]
        if kind == "ok":
            return reply[1]
        if kind == "env_error":
            raise EnvError(reply[2], ErrorCode(reply[1]))
        if kind == "memory":
            self.kill()
            raise WorkerFailed(
                ErrorCode.EXECUTION_ERROR,
                f"the step exceeded the session's memory limit ({self.limits.memory_bytes >> 20} MB above baseline): "
                "it was stopped and the episode abandoned; reset to start anew",
            )
        raise EnvError(reply[1])

    async def _exchange(self, request: tuple[Any, ...] | None, timeout_s: float | None) -> Any:
        """Send ``request`` (None: only read) and read the reply, without ever blocking the event loop.

        The pipe is read asynchronously, frame by frame: a worker descheduled halfway through writing a reply (they
        run at a lower priority than the server) holds up only its own session. A call interrupted halfway (timed
        out, cancelled) leaves the pipe mid-frame, so the worker is killed: nothing can be read from it safely."""
        try:
            return await asyncio.wait_for(self._roundtrip(request), timeout_s)
        except BaseException:
            self.kill()
            raise

    async def _roundtrip(self, request: tuple[Any, ...] | None) -> Any:
        if request is not None:
            payload = pickle.dumps(request, pickle.HIGHEST_PROTOCOL)
            self._writer.write(struct.pack("!i", len(payload)) + payload)
            await self._writer.drain()
        # multiprocessing.Connection's framing (the worker's side): a signed 4-byte length, -1 then 8 bytes if huge
        (size,) = struct.unpack("!i", await self._reader.readexactly(_FRAME_HEADER))
        if size == -1:
            (size,) = struct.unpack("!Q", await self._reader.readexactly(8))
        return pickle.loads(await self._reader.readexactly(size))

    def kill(self) -> None:
        """SIGKILL the worker now (its env state is lost)."""
        if self._alive:
            self._alive = False
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except OSError:
                pass  # already gone
        self._release()

    def close(self) -> None:
        """Close the pipe: the worker closes its env and exits (the fork server reaps it)."""
        self._alive = False
        self._release()

    def _release(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()
            os.close(self._pidfd)


# -- the fork server ----------------------------------------------------------------------------------------


class _ForkServer:
    """A single-threaded process that imported the env modules once and forks one worker per request.

    Forking the server process itself would copy its threads' locks mid-use; the fork server has no threads.
    Requests are ``pickle((env_cls, limits))``; the reply is the worker's pid and, as an SCM_RIGHTS fd, the
    server's end of a socket pair whose other end the worker holds.
    """

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # one malloc arena: the reset thread's own arena would give each world's pages back to the kernel and fault
        # them in again on the next reset (half of a loaded server's CPU went to that)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "MALLOC_ARENA_MAX": "1"}
        code = f"from openenv_echo.server.workers import _fork_server_main; _fork_server_main({theirs.fileno()})"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL
        )
        theirs.close()
        self._sock = ours
        if _recv_exact(ours, 5) != b"ready":  # the preload is done: forks are cheap from now on
            raise RuntimeError("the fork server did not start")

    def warm(self, env_cls: type[Environment[Any, Any]]) -> None:
        self._request(env_cls, None)

    def fork(self, env_cls: type[Environment[Any, Any]], limits: WorkerLimits) -> tuple[int, int, socket.socket]:
        msg, fds = self._request(env_cls, limits)
        if not fds:
            raise WorkerFactoryError(msg.decode(errors="replace") or "the fork server is gone")
        pid = int(msg.decode())
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # exited already (its constructor failed): the reply is waiting in the pipe
            pidfd = os.open("/dev/null", os.O_RDONLY)
        return pid, pidfd, socket.socket(fileno=fds[0])

    def _request(self, env_cls: type[Environment[Any, Any]], limits: WorkerLimits | None) -> tuple[bytes, list[int]]:
        request = pickle.dumps((env_cls, limits))
        self._sock.sendall(len(request).to_bytes(4, "big") + request)
        msg, fds, _, _ = socket.recv_fds(self._sock, 64, 1)
        return msg, fds


_fork_server_lock = threading.Lock()
_fork_server_instance: _ForkServer | None = None


async def prewarm(env_cls: type[Environment[Any, Any]]) -> None:
    """Start the fork server and warm ``env_cls`` in it now, so the first session pays neither."""
    await asyncio.get_running_loop().run_in_executor(_STARTER, lambda: _fork_server().warm(env_cls))


def _fork_server() -> _ForkServer:
    global _fork_server_instance
    with _fork_server_lock:
        if _fork_server_instance is None or _fork_server_instance.process.poll() is not None:
            _fork_server_instance = _ForkServer()
        return _fork_server_instance


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _warm(env_cls: type[Environment[Any, Any]]) -> None:
    try:
        env = env_cls()
        env.reset(seed=0)
        env.close()
    except Exception:
        pass  # a class that cannot be built here will say so in its worker, to the session that asks for it
    gc.collect()
    gc.freeze()  # the collector no longer walks (and so copies) the warm objects in every worker


def _fork_server_main(fd: int) -> None:
    """Entry point of the fork server process: fork a worker per request until the server is gone.

    A request without limits only warms its env class: imports its module, builds and resets one instance (which
    fills lazy caches) and freezes the heap, so that every later fork starts warm and shares those pages.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps exited workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=fd)
    control.sendall(b"ready")
    while True:
        try:
            size = int.from_bytes(_recv_exact(control, 4), "big")
            env_cls, limits = pickle.loads(_recv_exact(control, size))
        except EOFError:
            return
        except Exception as e:  # an env class this process cannot import
            control.sendall(f"{type(e).__name__}: {e}".encode()[:60])
            continue
        if limits is None:
            _warm(env_cls)
            control.sendall(b"warm")
            continue
        server_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # the worker
            control.close()
            server_end.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _serve(Connection(worker_end.detach()), env_cls, limits)
            finally:
                os._exit(0)
        worker_end.close()
        socket.send_fds(control, [str(pid).encode()], [server_end.fileno()])
        server_end.close()
