"""An append-only line journal: durable appends under an fsync policy, and reading back from a file cut anywhere.

Knows nothing of trajectories: it stores lines. Each ``append`` is one ``os.write`` of whole lines on an
``O_APPEND`` descriptor, so a process killed at any point leaves every appended line intact and at most one torn
line at the end; ``read_lines`` yields complete lines only and reports a torn tail instead of returning it.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

FsyncPolicy = Literal["always", "episode", "never"]
"""When the journal calls ``fsync``: after every record, at each episode's end (the default), or never.

A killed *process* loses nothing under any policy (written lines sit in the OS page cache); the policy decides what
survives a crash of the *machine*."""

FSYNC_POLICIES: tuple[FsyncPolicy, ...] = ("always", "episode", "never")


class Journal:
    """Appends lines to a file; thread-safe; one writer per process, several processes may share a file."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: FsyncPolicy = "episode") -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, not {fsync!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._repair_tail()

    def _repair_tail(self) -> None:
        """If a previous writer died mid-line, start on a fresh line so the next record stays readable."""
        size = os.fstat(self._fd).st_size
        if size:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def append(self, lines: str, *, boundary: bool = False) -> None:
        """Append ``lines`` (each ending in a newline) in one write; ``boundary`` marks an episode's end (fsync)."""
        data = memoryview(lines.encode("utf-8"))
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"journal {self.path} is closed")
            while data:  # a regular-file write is whole in practice; loop for the pathological short write
                data = data[os.write(self._fd, data) :]
            if self.fsync == "always" or (boundary and self.fsync == "episode"):
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` for every complete line; a torn last line (no newline) is skipped with a warning.

    Torn lines left in the middle by a writer that died and a later writer that started a fresh line are not
    JSON; the caller decides what a complete line that does not parse means (``is_torn`` helps).
    """
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                warnings.warn(f"{path}:{lineno}: ignoring a torn last record ({len(line)} bytes)", stacklevel=3)
                return
            if line.strip():
                yield lineno, line
