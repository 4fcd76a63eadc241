"""The harness's end of one agent shell: start it under the driver, run one command, read its output and report.

``ShellLink`` talks to ``driver`` over any ``Transport`` (in the sandbox a ``docker exec`` socket, in the tests a
local process): it sends ``c`` records and reads the driver's records off the transport's stdout frames; whatever
the transport's stderr carries (the driver's or the engine's own complaints, e.g. "OCI runtime exec failed") is
harness text, kept in ``problems``, never the command's output. The harness's control data (step end, exit status,
working directory) arrives only in ``m`` records, which no program of the agent's can write into its output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import driver as driver_module
from .render import Ending
from .scripts import SHELL_INIT, command_line
from .streams import STDERR, STDOUT, CommandOutput, RecordDecoder, Report, parse_report, record

DRIVER_SOURCE = Path(driver_module.__file__).read_text(encoding="utf-8")
DRIVER_ARGV = ["python3", "-I", "-S", "-c", DRIVER_SOURCE]
"""The driver's command line (the agent's uid, then the directories to try, follow): isolated mode, so nothing of the
agent's is imported."""
START_S = 30.0
"""How long a new shell may take to report that it started (a loaded machine, a container at its pids limit)."""


class Transport(Protocol):
    """A bidirectional byte stream to the driver process: stdin in, (stream, bytes) frames out."""

    eof: bool

    def send(self, data: bytes, timeout_s: float = 10.0) -> None: ...

    def read(self, timeout_s: float) -> list[tuple[int, bytes]]: ...

    def close(self) -> None: ...


class ShellStartError(RuntimeError):
    """The driver did not start a shell (its complaint, or the engine's, is the message)."""


@dataclass
class StepResult:
    output: CommandOutput
    ending: Ending
    report: Report | None = None
    exit_status: int | None = None
    """The command's status (``exited``) or the shell's (``shell_exit``)."""
    problems: list[str] = field(default_factory=list)
    """Harness-side text (the driver's stderr, a garbled report): shown as ``warning``, never as output."""


class ShellLink:
    """One agent shell under its driver (see the module docstring)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.records = RecordDecoder()
        self.pid = 0
        self.cwd = b"/"
        self.flags = ""
        self.debug_trap = b""
        self.exit_status: int | None = None
        self.problems: list[str] = []
        self._queue: list[tuple[bytes, bytes]] = []

    def start(self, timeout_s: float = START_S) -> None:
        """Wait for the driver's ``r`` record (the shell's pid and directory) and define the harness's function."""
        deadline = time.monotonic() + timeout_s
        while True:
            for kind, payload in self._next(deadline):
                if kind == b"r":
                    pid, _, cwd = payload.partition(b"\0")
                    self.pid, self.cwd = int(pid or 0), cwd
                    self.transport.send(record(b"c", SHELL_INIT))
                    return
            if self.transport.eof or time.monotonic() >= deadline:
                ended = "its driver ended without a word" if self.transport.eof else f"no answer in {timeout_s:g} s"
                why = " ".join(self.problems).strip() or ended
                raise ShellStartError(f"the agent's shell did not start: {why[-500:]}")

    def _next(self, deadline: float) -> list[tuple[bytes, bytes]]:
        if self._queue:
            queued, self._queue = self._queue, []
            return queued
        out: list[tuple[bytes, bytes]] = []
        for stream, payload in self.transport.read(max(deadline - time.monotonic(), 0.0)):
            if stream == STDOUT:
                out += self.records.feed(payload)
            elif payload:
                self.problems.append(payload.decode("utf-8", "replace"))
        return out

    def run(self, command: str, timeout_s: float, cap_bytes: int, flood_bytes: int) -> StepResult:
        """Run ``command``; returns when its report arrives, the shell ends, ``timeout_s`` passes or the output
        passes ``flood_bytes`` (then the caller stops the agent's processes, ``drain``s, and ``finish``es the
        output)."""
        output = CommandOutput(cap_bytes)
        result = StepResult(output, "exited")
        try:
            self.transport.send(record(b"c", command_line(command, self.flags, self.debug_trap)), max(timeout_s, 5))
        except OSError:
            self.transport.eof = True
        deadline = time.monotonic() + timeout_s
        while True:
            if self.transport.eof and not self._queue:
                result.ending = "shell_exit"
                break
            if time.monotonic() >= deadline:
                result.ending = "timeout"
                break
            done = False
            for kind, payload in self._next(deadline):
                if done:
                    self._queue.append((kind, payload))
                elif kind == b"o":
                    output.feed(STDOUT, payload)
                elif kind == b"e":
                    output.feed(STDERR, payload)
                elif kind == b"m":
                    report = parse_report(payload)
                    if report is None:
                        result.ending = "bad_report"
                        result.problems.append(f"an end report the harness did not write ({len(payload)} bytes)")
                    else:
                        result.report, result.exit_status = report, report.status
                        self.cwd, self.flags, self.debug_trap = report.cwd, report.flags, report.debug_trap
                    done = True
                elif kind == b"x":
                    status = int(payload or b"0")
                    self.exit_status = (status >> 8) & 0xFF if status & 0x7F == 0 else 128 + (status & 0x7F)
                    result.ending, result.exit_status = "shell_exit", self.exit_status
                    done = True
            if done:
                break
            if output.total_bytes > flood_bytes:
                result.ending = "flood"
                break
        result.problems += self.problems
        self.problems = []
        return result

    def drain(self, output: CommandOutput, timeout_s: float, flood_bytes: int) -> int | None:
        """After a kill or a shell exit: read what the pipes still held until the driver ends (or ``timeout_s``);
        returns the shell's status if the driver reported it."""
        deadline = time.monotonic() + timeout_s
        while not (self.transport.eof and not self._queue) and time.monotonic() < deadline:
            for kind, payload in self._next(deadline):
                if kind in (b"o", b"e") and output.total_bytes <= flood_bytes:
                    output.feed(STDOUT if kind == b"o" else STDERR, payload)
                elif kind == b"x":
                    status = int(payload or b"0")
                    self.exit_status = (status >> 8) & 0xFF if status & 0x7F == 0 else 128 + (status & 0x7F)
        return self.exit_status

    def close(self) -> None:
        self.transport.close()
