"""Children that die with their parent: ``python -m openenv_echo.providers.parent_watch <pid> <module> [args...]``.

Runs ``python -m <module> [args...]`` in this process with a watchdog thread that polls ``os.getppid()``: once it
is no longer ``<pid>`` (the parent died, even by SIGKILL, and the child was re-parented), the watchdog sends
SIGTERM to the child's process group (or to itself when it leads none), then SIGKILL after a grace period. Every
server a provider or recipe starts (an env server, SkyRL's Tinker-API server and its engine) runs under it, so a
killed test or recipe leaves nothing behind.

Why a watchdog and not ``prctl(PR_SET_PDEATHSIG)``: the death signal fires when the *thread* that forked the child
exits, so a provider started from a worker thread would lose its server when that thread ends; and it is Linux-only.
The parent's pid is passed explicitly, so a parent that died before the watchdog started is noticed at once.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time

POLL_S = 0.2
"""How often the watchdog looks at the parent pid."""
GRACE_S = 5.0
"""How long the group gets between SIGTERM and SIGKILL."""


def guarded(python: str, module: str, *args: str, parent: int | None = None) -> list[str]:
    """The command line that runs ``python -m module args`` until ``parent`` (default: this process) dies."""
    return [python, "-m", __name__, str(os.getpid() if parent is None else parent), module, *args]


def _signal_group(sig: int) -> None:
    if os.getpgrp() == os.getpid():  # a session/group leader: its descendants go with it
        os.killpg(os.getpgrp(), sig)
    else:
        os.kill(os.getpid(), sig)


def _watch(parent: int, poll_s: float, grace_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    print(f"[parent_watch] parent {parent} is gone: stopping pid {os.getpid()}", file=sys.stderr, flush=True)
    _signal_group(signal.SIGTERM)
    time.sleep(grace_s)
    _signal_group(signal.SIGKILL)


def watch_parent(parent: int, *, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> threading.Thread:
    """Start the daemon thread that ends this process (and its group) once ``parent`` is no longer its parent."""
    thread = threading.Thread(target=_watch, args=(parent, poll_s, grace_s), name="parent-watch", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or not args[0].isdigit():
        raise SystemExit("usage: python -m openenv_echo.providers.parent_watch <parent pid> <module> [args...]")
    parent, module = int(args[0]), args[1]
    watch_parent(parent)
    sys.argv = [module, *args[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


__all__ = ["GRACE_S", "POLL_S", "guarded", "main", "watch_parent"]

if __name__ == "__main__":
    main()
