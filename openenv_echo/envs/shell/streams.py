"""Reading a command's output off Docker's attach stream: frames, end markers, the per-step cap, UTF-8.

Docker multiplexes a non-TTY exec's stdout and stderr on one connection as frames (an 8-byte header: stream id,
three zero bytes, a big-endian payload length), each write of the process in order per stream. ``FrameDecoder``
splits that byte stream; ``CommandOutput`` turns the frames of one step into the ordered chunks the observation
shows: consecutive frames of one stream are merged, stdout and stderr stay interleaved as they arrived, the end
markers (``scripts.command_line``) are cut out, and only the first ``cap_bytes`` bytes are kept (the rest is
counted). Everything here is pure: the tests feed it bytes.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field

from .scripts import MARK, stderr_marker, stdout_marker

STDOUT, STDERR = 1, 2


class FrameDecoder:
    """Incremental decoder of Docker's multiplexed stream: ``feed(bytes) -> [(stream, payload), ...]``."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        frames: list[tuple[int, bytes]] = []
        while len(self._buf) >= 8:
            size = int.from_bytes(self._buf[4:8], "big")
            if len(self._buf) < 8 + size:
                break
            frames.append((self._buf[0], bytes(self._buf[8 : 8 + size])))
            del self._buf[: 8 + size]
        return frames


@dataclass
class _Stream:
    """One stream's marker search state: bytes held back while they may be the start of the marker."""

    marker: bytes
    held: bytearray = field(default_factory=bytearray)
    done: bool = False
    tail: bytes = b""
    """What followed the marker's prefix up to its closing ``MARK`` (stdout: status, pid, cwd)."""


@dataclass
class CommandOutput:
    """The output of one command, as the frames arrive (see the module docstring)."""

    nonce: str
    cap_bytes: int
    chunks: list[tuple[int, str]] = field(default_factory=list)
    """``(stream, text)`` in arrival order, consecutive same-stream text merged."""
    total_bytes: int = 0
    """Every byte the command wrote (markers excluded), kept or not."""

    def __post_init__(self) -> None:
        self._streams = {STDOUT: _Stream(stdout_marker(self.nonce)), STDERR: _Stream(stderr_marker(self.nonce))}
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in (STDOUT, STDERR)}
        self._kept = 0

    @property
    def complete(self) -> bool:
        """Both end markers seen: the command finished and all it wrote before has been read."""
        return all(s.done for s in self._streams.values())

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.cap_bytes

    def marker_fields(self) -> tuple[int, int, str] | None:
        """``(exit_status, shell_pid, cwd)`` from the stdout marker, once seen."""
        out = self._streams[STDOUT]
        if not out.done:
            return None
        status, pid, cwd = out.tail.decode("utf-8", "replace").split(" ", 2)
        return int(status), int(pid), cwd

    def feed(self, stream: int, data: bytes) -> None:
        """One frame's payload (frames of other stream ids, e.g. stdin echoes, are ignored)."""
        state = self._streams.get(stream)
        if state is None:
            return
        if state.done:  # a background process writing after the marker: it belongs to the next step
            self._keep(stream, data)
            return
        buf = state.held + data
        state.held = bytearray()
        at = buf.find(state.marker)
        if at >= 0:
            self._keep(stream, bytes(buf[:at]))
            rest = buf[at + len(state.marker) :]
            if stream == STDERR:
                state.done = True
                self._keep(stream, bytes(rest))
                return
            end = rest.find(MARK)
            if end < 0:  # the marker's fields are still coming
                state.held = bytearray(buf[at:])
                return
            state.tail, state.done = bytes(rest[:end]), True
            self._keep(stream, bytes(rest[end + 1 :]))
            return
        # hold back a suffix that may be the start of the marker
        keep = len(buf)
        for n in range(min(len(state.marker) - 1, len(buf)), 0, -1):
            if state.marker.startswith(bytes(buf[-n:])):
                keep = len(buf) - n
                break
        state.held = bytearray(buf[keep:])
        self._keep(stream, bytes(buf[:keep]))

    def finish(self) -> None:
        """The stream ended (the shell died): flush what was held back and the decoders."""
        for stream, state in self._streams.items():
            if state.held:
                self._keep(stream, bytes(state.held))
                state.held = bytearray()
            self._append(stream, self._decoders[stream].decode(b"", final=True))

    def _keep(self, stream: int, data: bytes) -> None:
        if not data:
            return
        self.total_bytes += len(data)
        room = self.cap_bytes - self._kept
        if room <= 0:
            return
        data = data[:room]
        self._kept += len(data)
        self._append(stream, self._decoders[stream].decode(data))

    def _append(self, stream: int, text: str) -> None:
        if not text:
            return
        if self.chunks and self.chunks[-1][0] == stream:
            self.chunks[-1] = (stream, self.chunks[-1][1] + text)
        else:
            self.chunks.append((stream, text))
