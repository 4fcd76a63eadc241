"""Reading the agent's shell: Docker's frames, the driver's records, the end report, the per-step cap, UTF-8.

Docker multiplexes a non-TTY exec's stdout and stderr on one connection as frames (an 8-byte header: stream id,
three zero bytes, a big-endian payload length); ``FrameDecoder`` splits that byte stream. The driver (``driver``)
writes records on its stdout (a kind byte, a 4-byte big-endian length, the payload); ``RecordDecoder`` splits them.
``CommandOutput`` turns the ``o``/``e`` records of one step into the chunks the observation shows; ``parse_report``
reads the ``m`` record. Everything here is pure: the tests feed it bytes.

**Text rule** (what ``env_output`` holds): the bytes each stream carried, decoded as UTF-8; every invalid sequence
becomes U+FFFD (Python's ``replace``: one per maximal invalid subsequence) and every NUL byte becomes U+FFFD too;
every other character (ESC and the other control characters included) is kept as written. A cut at the per-step
cap never splits a character: a character the cap would cut is left out whole.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

STDOUT, STDERR = 1, 2
REPLACEMENT = "\ufffd"


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


class RecordDecoder:
    """Incremental decoder of the driver's records: ``feed(bytes) -> [(kind, payload), ...]``."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self._buf += data
        records: list[tuple[bytes, bytes]] = []
        while len(self._buf) >= 5:
            size = int.from_bytes(self._buf[1:5], "big")
            if len(self._buf) < 5 + size:
                break
            records.append((bytes(self._buf[:1]), bytes(self._buf[5 : 5 + size])))
            del self._buf[: 5 + size]
        return records


def record(kind: bytes, payload: bytes) -> bytes:
    """One record of the driver's framing (the harness sends ``c`` records: bytes for the shell's stdin)."""
    return kind + len(payload).to_bytes(4, "big") + payload


@dataclass(frozen=True)
class Report:
    """The shell's end-of-step report (``scripts.SHELL_INIT``)."""

    status: int
    flags: str
    """The shell's ``$-`` (the harness keeps ``v`` and ``x`` for the next command)."""
    cwd: bytes
    debug_trap: bytes
    """The agent's ``trap -p DEBUG`` line (empty when it set none)."""


_FLAGS = re.compile(rb"[A-Za-z]*")
REPORT_FIELDS = 4
NO_TRAP = b"trap -- - DEBUG\n"
"""What ``trap -p DEBUG`` prints in POSIX mode when no DEBUG trap is set."""


def parse_report(data: bytes) -> Report | None:
    """The report in ``data``, or None when it is not one the harness's function writes (forged, cut, garbled)."""
    fields = data.split(b"\0")
    if len(fields) != REPORT_FIELDS + 1 or fields[-1]:
        return None
    status, flags, cwd, trap = fields[:REPORT_FIELDS]
    if not (status.isdigit() and int(status) <= 255 and _FLAGS.fullmatch(flags) and cwd.startswith(b"/")):
        return None
    if trap and not (trap.startswith(b"trap -- ") and trap.endswith(b" DEBUG\n")):
        return None
    if trap == NO_TRAP:
        trap = b""
    return Report(int(status), flags.decode(), cwd, trap)


def shown(data: bytes) -> str:
    """``data`` under the text rule of the module docstring (a whole buffer, e.g. a path)."""
    return data.decode("utf-8", "replace").replace("\0", REPLACEMENT)


@dataclass
class CommandOutput:
    """The output of one command as the driver relays it (see the module docstring)."""

    cap_bytes: int
    chunks: list[tuple[int, str]] = field(default_factory=list)
    """``(stream, text)`` in arrival order, consecutive same-stream text merged."""
    total_bytes: int = 0
    """Every byte the command wrote, kept or not."""

    def __post_init__(self) -> None:
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in (STDOUT, STDERR)}
        self._kept = 0

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.cap_bytes

    def feed(self, stream: int, data: bytes) -> None:
        """What ``stream`` carried next (other stream ids are ignored)."""
        decoder = self._decoders.get(stream)
        if decoder is None or not data:
            return
        self.total_bytes += len(data)
        room = self.cap_bytes - self._kept
        if room <= 0:
            return
        if len(data) <= room:
            self._kept += len(data)
            self._append(stream, decoder.decode(data))
            return
        cut = room
        while cut > 0 and data[cut] & 0xC0 == 0x80:  # the cap falls inside a character: leave it out whole
            cut -= 1
        self._kept = self.cap_bytes
        self._append(stream, decoder.decode(data[:cut]))
        self._drop_partial()

    def finish(self) -> None:
        """The step ended: a character still incomplete is U+FFFD, unless the cap cut it (then it is left out)."""
        if self._kept >= self.cap_bytes:
            self._drop_partial()
        for stream, decoder in self._decoders.items():
            self._append(stream, decoder.decode(b"", final=True))

    def _drop_partial(self) -> None:
        for decoder in self._decoders.values():
            decoder.reset()

    def _append(self, stream: int, text: str) -> None:
        if not text:
            return
        text = text.replace("\0", REPLACEMENT)
        if self.chunks and self.chunks[-1][0] == stream:
            self.chunks[-1] = (stream, self.chunks[-1][1] + text)
        else:
            self.chunks.append((stream, text))
