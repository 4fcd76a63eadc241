"""One locked-down container per episode: the agent's real bash, its limits, and the task's verifier.

The container (``Sandbox.create``) runs the task's image with no network, a read-only root filesystem, every
capability dropped but the few its root processes need (``ROOT_CAPABILITIES``: the agent's uid holds none, and
``no-new-privileges`` keeps it so), the task's pids, memory (swap included) and CPU limits, and writable tmpfs
mounts only (each its own, so filling one fills no other): the working directory (``storage_mb``, owned by the
agent, filled with what the image holds there), ``/tmp`` (64 MB), ``/logs/agent`` (the agent's), ``/logs/verifier``
and ``/tests`` (root's: the agent can plant neither a reward nor a test, nor fill their room). Its main process is
the supervisor of ``scripts``; the agent's shell is a ``docker exec`` of the ``driver`` as ``AGENT_UID``, which runs
bash (``link``).

Every call here blocks (Docker's API): the runtime calls them on its threads, never on the event loop.
"""

from __future__ import annotations

import io
import math
import os
import socket
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openenv_echo.providers.docker import container_status

from .link import DRIVER_ARGV, ShellLink, ShellStartError
from .render import CommandResult, Ending
from .scripts import AGENT_UID, KILL_WAIT_S, SUPERVISOR
from .streams import STDOUT, FrameDecoder, shown
from .tasks import (
    CONTAINER_AGENT_LOG_DIR,
    CONTAINER_REWARD_JSON,
    CONTAINER_REWARD_TXT,
    CONTAINER_TESTS_DIR,
    CONTAINER_VERIFIER_DIR,
    TaskLimits,
)

ROOT_CAPABILITIES = ("KILL", "DAC_OVERRIDE", "FOWNER", "CHOWN", "SETUID", "SETGID")
"""All the container keeps (every other capability is dropped): its root processes (the supervisor, which stops the
agent's processes, and the task's verifier, which like Harbor's runs as root over the agent's files and runs the
agent's programs as the agent's uid with ``setpriv``) use them; the agent's uid holds none, and
``no-new-privileges`` keeps it from gaining any."""
TMP_MB = 64
AGENT_LOGS_MB = 16
VERIFIER_LOGS_MB = 16
TESTS_MB = 64
FLOOD_FACTOR = 64
"""A command that writes more than this many times the output cap is killed (reading it all would cost the server)."""
LOG_TAIL = 20
EXIT_WAIT_S = 30.0
"""How long an exec's exit status may take to show in the engine after its output ended (a loaded machine)."""
_DRAIN_S = 2.0
KIND_LABEL = "io.openenv-echo.shell.kind"
"""What a container of the shell env is for: ``sandbox`` (an episode's, or one waiting in the pool) or
``workdir-copy`` (created, never started, to copy a task image's working directory)."""
_SHELL_ENV = {"HOME": "/tmp", "TMPDIR": "/tmp", "TERM": "dumb", "USER": "agent", "LOGNAME": "agent"}


class SandboxLost(Exception):
    """The container died (killed, removed, engine gone) under the episode; ``logs`` are its last log lines."""

    def __init__(self, message: str, logs: str, status: str) -> None:
        super().__init__(message)
        self.logs = logs
        self.status = status


@dataclass(frozen=True)
class SandboxSpec:
    """What one task's containers are made of."""

    task: str
    image: str
    workdir: str
    limits: TaskLimits
    workdir_tar: bytes | None
    """The image's working directory as a tar (``docker cp`` of it), unpacked into the tmpfs at start."""


@dataclass
class VerifierResult:
    reward: float
    output: str
    """The end of what ``test.sh`` printed (for metadata, not the agent's observation)."""
    problem: str | None
    """Why the reward is 0 regardless of the tests (no reward file, a bad one, a timeout), if so."""
    seconds: float


def _raw(sock: Any) -> socket.socket:
    """The socket under docker-py's ``SocketIO`` wrapper."""
    raw = getattr(sock, "_sock", sock)
    assert isinstance(raw, socket.socket)
    return raw


class _Channel:
    """One attached stream (an exec or the main process): send bytes, read demultiplexed frames."""

    def __init__(self, sock: Any) -> None:
        self.wrapper = sock
        self.sock = _raw(sock)
        self.frames = FrameDecoder()
        self.eof = False

    def send(self, data: bytes, timeout_s: float = 10.0) -> None:
        self.sock.settimeout(timeout_s)
        self.sock.sendall(data)

    def read(self, timeout_s: float) -> list[tuple[int, bytes]]:
        """Frames that arrive within ``timeout_s`` (an empty list on timeout; ``eof`` set when the stream ends)."""
        self.sock.settimeout(max(timeout_s, 0.001))
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return []
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return []
        return self.frames.feed(data)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _tar_dir(path: Path) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.add(path, arcname=".")
    return raw.getvalue()


def app_tar(path: Path) -> bytes:
    """``path`` as a working-directory tar in ``workdir_tar``'s layout (one top directory, stripped on unpacking)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.add(path, arcname="app")
    return raw.getvalue()


def workdir_tar(client: Any, image: str, workdir: str, labels: dict[str, str]) -> bytes | None:
    """The image's ``workdir`` as a tar, read from a created (never started) container carrying ``labels`` (so the
    orphan sweep finds it if the server dies meanwhile); None if the image has no such directory."""
    import docker.errors

    container = client.containers.create(
        image, command=["true"], network_disabled=True, labels={**labels, KIND_LABEL: "workdir-copy"}
    )
    try:
        chunks, _ = container.get_archive(workdir)
        return b"".join(chunks)
    except docker.errors.NotFound:
        return None
    finally:
        container.remove(force=True)


class Sandbox:
    """A started task container with its supervisor attached and the agent's shell running."""

    def __init__(self, client: Any, container: Any, spec: SandboxSpec) -> None:
        self.client = client
        self.container = container
        self.spec = spec
        self.cwd_bytes = spec.workdir.encode()
        self._supervisor: _Channel | None = None
        self._shell: ShellLink | None = None
        self._notices: list[str] = []
        """Harness notices of a shell restart, shown with the step that caused it."""
        self._reported: set[int] = set()
        self._oom_seen = 0
        self._refused_seen = 0

    # -- life cycle ----------------------------------------------------------------------------------------
    @classmethod
    def create(cls, client: Any, spec: SandboxSpec, labels: dict[str, str]) -> Sandbox:
        """Start a container for ``spec`` and make it ready (supervisor attached, workdir filled, shell up). On any
        failure the container is removed before the error propagates."""
        from docker.types import Ulimit

        limits = spec.limits
        container = client.containers.create(
            spec.image,
            command=["bash", "-c", SUPERVISOR],
            stdin_open=True,
            init=True,
            user="0:0",
            working_dir=spec.workdir,
            hostname="sandbox",
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            cap_add=list(ROOT_CAPABILITIES),
            security_opt=["no-new-privileges"],
            pids_limit=limits.pids,
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(limits.cpus * 1e9),
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            tmpfs={
                spec.workdir: f"rw,nosuid,nodev,size={limits.storage_mb}m,uid={AGENT_UID},gid={AGENT_UID},mode=0755",
                "/tmp": f"rw,nosuid,nodev,size={TMP_MB}m,mode=1777",
                CONTAINER_AGENT_LOG_DIR: (
                    f"rw,nosuid,nodev,noexec,size={AGENT_LOGS_MB}m,uid={AGENT_UID},gid={AGENT_UID},mode=0755"
                ),
                CONTAINER_VERIFIER_DIR: f"rw,nosuid,nodev,noexec,size={VERIFIER_LOGS_MB}m,mode=0755",
                CONTAINER_TESTS_DIR: f"rw,nosuid,nodev,size={TESTS_MB}m,mode=0755",
            },
            labels={**labels, KIND_LABEL: "sandbox"},
            log_config={"type": "json-file", "config": {"max-size": "256k", "max-file": "1"}},
        )
        sandbox = cls(client, container, spec)
        shell: ShellLink | None = None
        try:
            container.start()
            sandbox._supervisor = _Channel(
                container.attach_socket(params={"stdin": 1, "stdout": 1, "stream": 1, "logs": 0})
            )
            sandbox.supervise("status -1")  # answered once the supervisor has set up the log mounts
            shell = sandbox._spawn_shell()  # the driver's Python starts while the work directory is filled
            if spec.workdir_tar is not None:
                sandbox.fill(spec.workdir_tar)
            sandbox._adopt_shell(shell)
        except BaseException:
            if shell is not None:
                shell.close()
            sandbox.remove()
            raise
        return sandbox

    def fill(self, workdir_tar: bytes) -> None:
        """Unpack ``workdir_tar`` (one top directory, stripped) into the working directory, as the agent: the
        supervisor does it (``fill``), so no exec through the engine is on a reset's path."""
        if "\n" in self.spec.workdir:
            raise ValueError(f"working directory {self.spec.workdir!r} holds a line break")
        answer = self.supervise(f"fill {len(workdir_tar)} {self.spec.workdir}", timeout_s=60, payload=workdir_tar)
        if answer.split(" ", 2)[:2] != ["filled", "0"]:
            raise RuntimeError(f"could not fill {self.spec.workdir}: {answer[-500:]}")

    @property
    def cwd(self) -> str:
        """The shell's working directory as shown (the text rule of ``streams``)."""
        return shown(self.cwd_bytes)

    def remove(self) -> None:
        """Remove the container (and so every process in it); never raises."""
        for channel in (self._shell, self._supervisor):
            if channel is not None:
                channel.close()
        try:
            self.container.remove(force=True, v=True)
        except Exception:
            pass

    def logs(self, tail: int = LOG_TAIL) -> str:
        try:
            raw = self.container.logs(tail=tail)
        except Exception as e:
            return f"(no logs: {e})"
        return str(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw)

    def status(self) -> str:
        """``running``, or how the container ended (state, exit code, OOM, error)."""
        try:
            return container_status(self.container) or "running"
        except Exception:  # the engine itself is gone
            return "unknown: the engine does not answer"

    def lost(self, what: str) -> SandboxLost:
        status = self.status()
        return SandboxLost(f"the episode's container is gone ({status}) {what}", self.logs(), status)

    # -- plumbing ------------------------------------------------------------------------------------------
    def exec(
        self,
        argv: list[str],
        *,
        user: str = "0:0",
        stdin: bytes | None = None,
        timeout_s: float = 30.0,
        workdir: str | None = None,
        environment: dict[str, str] | None = None,
        cap_bytes: int = 65536,
    ) -> tuple[int | None, bytes, bool]:
        """Run ``argv`` in the container to its end or ``timeout_s``: ``(exit_code, output, timed_out)`` (output is
        stdout and stderr as they came, its first ``cap_bytes``; on timeout every other process is killed)."""
        import docker.errors

        try:
            exec_id = self.client.api.exec_create(
                self.container.id, argv, stdin=stdin is not None, user=user, workdir=workdir, environment=environment
            )["Id"]
            channel = _Channel(self.client.api.exec_start(exec_id, socket=True))
        except docker.errors.APIError as e:
            if self.status() != "running":
                raise self.lost(f"(while starting {argv[0]})") from e
            raise
        out = bytearray()
        try:
            if stdin is not None:
                channel.send(stdin, timeout_s)
                channel.sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + timeout_s
            while not channel.eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill_all(f"{argv[0]} over {timeout_s:g} s")
                    return None, bytes(out), True
                for _, payload in channel.read(left):
                    out += payload[: max(cap_bytes - len(out), 0)]
        finally:
            channel.close()
        return self._exit_code(exec_id), bytes(out), False

    def _exit_code(self, exec_id: str) -> int | None:
        """The exit status of an exec whose output has ended. The engine records it only once it has handled the
        process's exit, which on a loaded machine comes well after the stream's end (0.5 s was not always enough:
        a verifier that had written its reward read as "no reward"), so this waits up to ``EXIT_WAIT_S``."""
        deadline = time.monotonic() + EXIT_WAIT_S
        pause = 0.005
        while True:
            info = self.client.api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def supervise(self, request: str, timeout_s: float = 10.0, payload: bytes = b"") -> str:
        """One supervisor request (with the bytes it reads after its line, if any), its one-line answer."""
        channel = self._supervisor
        if channel is None or channel.eof:
            raise self.lost("(its supervisor is gone)")
        try:
            channel.send(request.encode() + b"\n" + payload, timeout_s)
        except OSError as e:
            raise self.lost("(its supervisor is gone)") from e
        line = b""
        deadline = time.monotonic() + timeout_s
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if channel.eof or left <= 0:
                raise self.lost(f"(its supervisor did not answer {request!r})")
            for stream, payload in channel.read(left):
                if stream == STDOUT:
                    line += payload
        return line.decode("utf-8", "replace").strip()

    def kill_all(self, why: str) -> int:
        """SIGKILL every process but the supervisor (the agent's shell and all it started); returns how many the
        supervisor still saw afterwards (0 unless one would not die within ``KILL_WAIT_S``)."""
        words = self.supervise(f"kill {why.split()[0] if why else 'request'}", timeout_s=KILL_WAIT_S + 20).split()
        return int(words[1]) if len(words) == 2 and words[0] == "killed" and words[1].isdigit() else 1

    def start_shell(self) -> None:
        """A new agent shell (under its driver, ``link``) in the last known directory, else the task's working
        directory, else ``/`` (a notice says so): a restart never fails on a directory that is gone."""
        self._adopt_shell(self._spawn_shell())

    def _spawn_shell(self) -> ShellLink:
        """Start the driver's exec (it starts bash on its own; ``_adopt_shell`` waits for it)."""
        import docker.errors

        if self._shell is not None:
            self._shell.close()
            self._shell = None
        argv = [*DRIVER_ARGV, str(AGENT_UID), os.fsdecode(self.cwd_bytes), self.spec.workdir]
        try:  # started as root: the driver drops to the agent's uid itself (see ``driver._become``)
            exec_id = self.client.api.exec_create(
                self.container.id, argv, stdin=True, user="0:0", workdir="/", environment=_SHELL_ENV
            )["Id"]
            return ShellLink(_Channel(self.client.api.exec_start(exec_id, socket=True)))
        except (docker.errors.APIError, OSError) as e:
            if self.status() != "running":
                raise self.lost("(while starting the agent's shell)") from e
            raise RuntimeError(f"could not start the agent's shell: {e}") from e

    def _adopt_shell(self, link: ShellLink) -> None:
        wanted = self.cwd_bytes
        try:
            link.start()
        except (ShellStartError, OSError) as e:
            link.close()
            if self.status() != "running":
                raise self.lost("(while starting the agent's shell)") from e
            raise RuntimeError(f"could not start the agent's shell: {e}") from e
        self._shell = link
        self.cwd_bytes = link.cwd
        if link.cwd != wanted:
            self._notices.append(
                f"[harness: the shell's working directory {shown(wanted)} is gone: the new shell starts in {self.cwd}]"
            )

    # -- the agent's commands ------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float, cap_bytes: int) -> CommandResult:
        """Run one command line in the agent's shell within ``timeout_s`` and the output cap. A command over its
        time, writing ``FLOOD_FACTOR`` times the cap, or ending with a report the harness did not write is killed
        with every agent process; so is everything after a step at the container's pids limit (``pids_reset``).
        The shell is then restarted (``start_shell``)."""
        link = self._shell
        if link is None:
            self.start_shell()
            link = self._shell
        assert link is not None
        flood = FLOOD_FACTOR * cap_bytes
        step = link.run(command, timeout_s, cap_bytes, flood)
        ending: Ending = step.ending
        exit_status = step.exit_status
        restart = ending != "exited"
        if ending in ("timeout", "flood", "bad_report"):
            self.kill_all(ending)
            link.drain(step.output, _DRAIN_S, flood)
        elif ending == "shell_exit":
            if self.status() != "running":
                raise self.lost("while the command ran")
            exit_status = link.exit_status if exit_status is None else exit_status
        self.cwd_bytes = link.cwd
        oom, refused, background = self._status(-1 if restart else link.pid)
        pids_reset = refused > 0 and not restart
        if pids_reset:  # what a fork bomb leaves would slow every later step: the documented rule stops it
            self.kill_all("pids")
            link.drain(step.output, _DRAIN_S, flood)
            restart = True
        step.output.finish()
        if restart:
            self.start_shell()
        notices, self._notices = self._notices, []
        return CommandResult(
            chunks=step.output.chunks,
            total_bytes=step.output.total_bytes,
            cap_bytes=cap_bytes,
            ending=ending,
            exit_status=exit_status,
            cwd=self.cwd,
            timeout_s=timeout_s,
            background=[] if restart else background,
            oom_kills=oom,
            memory_mb=self.spec.limits.memory_mb,
            forks_refused=refused,
            pids_max=self.spec.limits.pids,
            pids_reset=pids_reset,
            problems=step.problems,
            notices=notices,
        )

    def _status(self, shell_pid: int) -> tuple[int, int, list[tuple[int, str]]]:
        """OOM kills and forks refused at the pids limit since the last step, and the agent's processes left
        running that no earlier step reported (one supervisor round trip)."""
        words = self.supervise(f"status {shell_pid}").split()
        if len(words) < 3 or words[0] != "status" or not (words[1].isdigit() and words[2].isdigit()):
            return 0, 0, []
        oom, self._oom_seen = int(words[1]) - self._oom_seen, int(words[1])
        refused, self._refused_seen = int(words[2]) - self._refused_seen, int(words[2])
        found = []
        for item in words[3:]:
            pid, _, name = item.partition(":")
            if pid.isdigit() and int(pid) not in self._reported:
                self._reported.add(int(pid))
                found.append((int(pid), name))
        return max(oom, 0), max(refused, 0), found

    # -- the verifier --------------------------------------------------------------------------------------
    def verify(self, tests_dir: Path, timeout_s: float, environment: dict[str, str], workdir: str) -> VerifierResult:
        """Harbor's verifier, on a container the agent can no longer touch: every agent process is stopped (and
        checked gone) first; ``tests/`` goes to ``/tests``; ``test.sh`` runs as root in ``workdir``; whatever it
        left running is stopped; then the reward is read from ``/logs/verifier``, its own tmpfs that only root can
        write (the agent's uid, and so every agent program the tests run as that uid, cannot write or fill it)."""
        began = time.monotonic()
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        left = self.kill_all("verifier")
        if left:
            return VerifierResult(
                0.0, "", f"{left} agent process(es) survived the kill: the tests did not run", time.monotonic() - began
            )
        code, out, _ = self.exec(["tar", "-x", "-C", CONTAINER_TESTS_DIR], stdin=_tar_dir(tests_dir), timeout_s=60)
        if code != 0:
            raise RuntimeError(f"could not upload tests/: {out.decode(errors='replace')[-500:]}")
        code, out, timed_out = self.exec(
            ["bash", f"{CONTAINER_TESTS_DIR}/test.sh"],
            timeout_s=timeout_s,
            workdir=workdir,
            environment=environment or None,
        )
        text = out.decode("utf-8", "replace")[-4000:]
        if timed_out:
            return VerifierResult(0.0, text, f"the verifier ran over its {timeout_s:g} s", time.monotonic() - began)
        self.kill_all("verifier-done")  # nothing the tests started may write later
        reward, problem = self._read_reward()
        return VerifierResult(reward, text, problem, time.monotonic() - began)

    def _read_reward(self) -> tuple[float, str | None]:
        """``reward.txt`` if it exists (as a regular file, else the reward is 0: no fallback), else
        ``reward.json``; read by the supervisor (root, from the verifier's own mount) over its channel. An answer
        it cannot give raises (the episode ends in an error, never in a reward the submission did not earn)."""
        answer = self.supervise("reward")
        verdict, _, rest = answer.partition(" ")
        if verdict == "none":
            return 0.0, f"the verifier wrote no {CONTAINER_REWARD_TXT} or {CONTAINER_REWARD_JSON}"
        if verdict == "bad":
            return 0.0, f"{rest} is not a regular file"
        path, _, body = rest.partition(" ")
        if verdict != "ok" or path not in (CONTAINER_REWARD_TXT, CONTAINER_REWARD_JSON):
            raise RuntimeError(f"could not read the verifier's reward: the supervisor answered {answer[:200]!r}")
        if path == CONTAINER_REWARD_TXT:
            return _parse_reward(body, CONTAINER_REWARD_TXT)
        return _parse_reward_json(body)


def _parse_reward(text: str, where: str) -> tuple[float, str | None]:
    try:
        value = float(text.strip())
    except ValueError:
        return 0.0, f"{where} holds {text.strip()[:40]!r}, not a number"
    if not math.isfinite(value):
        return 0.0, f"{where} holds {value}, not a finite number"
    return value, None


def _parse_reward_json(text: str) -> tuple[float, str | None]:
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return 0.0, f"{CONTAINER_REWARD_JSON} is not JSON"
    if isinstance(data, dict) and "reward" in data:
        value = data["reward"]
    elif isinstance(data, dict) and len(data) == 1:
        value = next(iter(data.values()))
    else:
        return (
            0.0,
            f'{CONTAINER_REWARD_JSON} has no "reward" (keys: {sorted(data)[:5] if isinstance(data, dict) else "none"})',
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0, f"{CONTAINER_REWARD_JSON}: the reward {value!r} is not a number"
    return _parse_reward(str(value), CONTAINER_REWARD_JSON)
