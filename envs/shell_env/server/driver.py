"""The agent's shell driver: runs inside the sandbox (``python3 -I -S -c <this file>``) as the agent's uid.

It starts one ``bash --noprofile --norc`` and owns every descriptor the shell's output and the harness's control
data travel on, so nothing the agent does inside its shell can make the two look alike:

* bash's stdin is a pipe the driver fills with the harness's step lines; its stdout and stderr are two pipes the
  driver reads; its fd ``CONTROL_FD`` is a third pipe on which only the harness's per-step function writes the end
  report (exit status, shell flags, working directory, the agent's DEBUG trap, each NUL-terminated). The agent's
  commands run with that descriptor closed (``scripts.command_line``), so no program of theirs inherits it.
* To the harness the driver writes records on its own stdout: one kind byte, a 4-byte big-endian length, the
  payload. ``r``: the shell started (``<pid>\\0<cwd>``); ``o``/``e``: bytes bash's stdout/stderr carried;
  ``m``: one end report, sent only after everything the shell's pipes held when it arrived (so output never
  overtakes its report); ``x``: the shell ended (its wait status). The harness sends ``c`` records (bytes to
  write to bash's stdin) on the driver's stdin.

The driver starts as root and drops to the agent's uid itself, which leaves it non-dumpable: the agent's processes
(same uid) cannot trace it or write its memory.
Standard library only: it runs on whatever ``python3`` the task's image has (the project's base image's).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import sys
import time

CONTROL_FD = 99
"""bash's descriptor for the harness's end report (closed for the agent's commands)."""
REPORT_FIELDS = 4
"""NUL-terminated fields of one end report: status, flags, cwd, DEBUG trap."""
SETTLE_GAP_S = 0.02
"""When the shell's stdout or stderr no longer is the driver's pipe (``exec > >(tee log)``), output may trail the
report through another process: it is waited for until this long a pause (at most ``SETTLE_MAX_S``)."""
SETTLE_MAX_S = 0.5


def _send(kind: bytes, payload: bytes) -> None:
    data = kind + len(payload).to_bytes(4, "big") + payload
    while data:
        try:
            n = os.write(1, data)
        except InterruptedError:
            continue
        data = data[n:]


def _read(fd: int) -> bytes | None:
    """What ``fd`` holds now (b"" when nothing), or None at end of file."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return b""
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EINTR):
            return b""
        return None
    return data or None


def _start(cwds: list[bytes]) -> tuple[int, bytes, int, int, int, int]:
    """Fork bash in the first of ``cwds`` that exists (else ``/``); returns its pid, the directory, and the
    driver's ends of the stdin, stdout, stderr and control pipes."""
    used = b"/"
    for candidate in cwds:
        try:
            os.chdir(candidate)
        except OSError:
            continue
        used = candidate
        break
    else:
        os.chdir("/")
    cmd_r, cmd_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the shell: default signal dispositions (Python ignores SIGPIPE and SIGXFSZ), its four pipes
        try:
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            os.dup2(cmd_r, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.dup2(ctl_w, CONTROL_FD)
            os.closerange(3, CONTROL_FD)
            os.closerange(CONTROL_FD + 1, 4096)
            os.execv("/bin/bash", ["bash", "--noprofile", "--norc"])
        finally:
            os._exit(127)
    for fd in (cmd_r, out_w, err_w, ctl_w):
        os.close(fd)
    for fd in (cmd_w, out_r, err_r, ctl_r, 0):
        os.set_blocking(fd, False)
    return pid, used, cmd_w, out_r, err_r, ctl_r


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def settled(pid: int, ours: set[tuple[int, int] | None]) -> bool:
    """Whether the shell's stdout and stderr are still the driver's pipes (or /dev/null): then nothing can trail its
    report. While the report runs they are on fds 97 and 98 (``scripts.command_line``); once it is over, bash has
    put them back on 1 and 2 before it closes 97 and 98, so looking at 97, then 1, never misses both."""
    for saved, fd in ((97, 1), (98, 2)):
        found = _inode(f"/proc/{pid}/fd/{saved}") or _inode(f"/proc/{pid}/fd/{fd}")
        if found not in ours:
            return False
    return True


def _become(uid: int) -> None:
    """Drop from root to ``uid`` (and its gid, no groups): the change of credentials also makes the kernel mark
    the driver non-dumpable, so the agent's processes (same uid) cannot trace it or write its memory; bash, exec'd
    afterwards, is an ordinary process of the agent's."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def main() -> None:
    """``driver UID CWD...``: ``UID`` is the agent's (``-``: stay as started, for the tests), then the directories
    to try, in order."""
    if sys.argv[1] != "-":
        _become(int(sys.argv[1]))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    pid, used, cmd_w, out_r, err_r, ctl_r = _start([os.fsencode(a) for a in sys.argv[2:]])
    _send(b"r", str(pid).encode() + b"\0" + used)
    kinds = {out_r: b"o", err_r: b"e"}
    ours = {_inode(f"/proc/self/fd/{out_r}"), _inode(f"/proc/self/fd/{err_r}"), _inode("/dev/null")}
    pending = b""  # for bash's stdin
    inbox = b""  # the harness's records
    report = b""
    stdin_open = True

    def drain(settle: bool) -> None:
        for fd, kind in kinds.items():
            while (data := _read(fd)) not in (b"", None):
                _send(kind, data)
        if not settle or not kinds:
            return
        end, quiet = time.monotonic() + SETTLE_MAX_S, time.monotonic() + SETTLE_GAP_S
        while (now := time.monotonic()) < min(end, quiet):
            ready, _, _ = select.select(list(kinds), [], [], min(end, quiet) - now)
            for fd in ready:
                data = _read(fd)
                if data:
                    _send(kinds[fd], data)
                    quiet = time.monotonic() + SETTLE_GAP_S

    while True:
        readers = [*kinds, ctl_r] + ([0] if stdin_open else [])
        ready, writable, _ = select.select(readers, [cmd_w] if pending else [], [])
        if writable:
            try:
                pending = pending[os.write(cmd_w, pending) :]
            except BlockingIOError:
                pass
            except OSError:  # the shell is gone; its end is seen on the control pipe
                pending = b""
        for fd in ready:
            data = _read(fd)
            if fd == 0:
                if data is None:  # the harness went away: so does the shell
                    os.kill(pid, signal.SIGKILL)
                    stdin_open = False
                    continue
                inbox += data
                while len(inbox) >= 5 and len(inbox) >= 5 + int.from_bytes(inbox[1:5], "big"):
                    size = int.from_bytes(inbox[1:5], "big")
                    if inbox[:1] == b"c":
                        pending += inbox[5 : 5 + size]
                    inbox = inbox[5 + size :]
            elif fd == ctl_r:
                if data is None:  # only the shell holds the control pipe: it ended
                    drain(settle=False)
                    _, status = os.waitpid(pid, 0)
                    drain(settle=False)
                    if report:
                        _send(b"m", report)
                    _send(b"x", str(status).encode())
                    return
                report += data
                while report.count(b"\0") >= REPORT_FIELDS:
                    at = -1
                    for _ in range(REPORT_FIELDS):
                        at = report.index(b"\0", at + 1)
                    drain(settle=not settled(pid, ours))
                    _send(b"m", report[: at + 1])
                    report = report[at + 1 :]
            elif data:
                _send(kinds[fd], data)
            elif data is None and fd in kinds:  # every holder of that pipe closed it: nothing more comes
                del kinds[fd]


if __name__ == "__main__":
    main()
