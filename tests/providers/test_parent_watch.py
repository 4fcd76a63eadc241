"""No orphans: a server a provider starts dies with the process that started it, even when that process is SIGKILLed
(what ``subprocess.run(timeout=...)`` and pytest-timeout do), together with every process of its group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from openenv_echo.providers import LocalProcessProvider
from openenv_echo.providers.parent_watch import guarded

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie counts as dead
    except FileNotFoundError:
        return False


def _group(pgid: int) -> list[int]:
    """Live pids of process group ``pgid`` (from /proc)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(name))
    return out


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


PARENT = textwrap.dedent(
    """
    import sys, time
    from openenv_echo.client import EnvClient
    from openenv_echo.providers import LocalProcessProvider
    provider = LocalProcessProvider("terminal", startup_timeout_s=120)
    provider.start()
    with EnvClient(provider.base_url) as client:  # a session: the server's fork server and a worker exist too
        client.reset(seed=0)
        print(provider.pid, flush=True)
        time.sleep(600)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process groups from /proc")
def test_sigkilled_parent_takes_its_server_and_the_servers_group_with_it() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"the parent printed {line!r}"
        server = int(line)
        group = _group(server)  # the server leads its own session: its fork server and worker are in its group
        assert server in group and len(group) >= 3, group  # server, fork server, the session's worker
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        left = _wait_gone(group, 60)
        assert not left, f"still running after the parent's SIGKILL: {left}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_parent_that_died_before_the_watchdog_started_is_noticed() -> None:
    # pid 1 is never our parent: the watchdog sees a dead parent at once and stops the module it runs
    cmd = guarded(sys.executable, "http.server", "0", "--bind", "127.0.0.1", parent=1)
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert proc.wait(timeout=30) != 0  # stopped by its watchdog's SIGTERM, not a clean exit
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_server_started_from_a_thread_outlives_the_thread() -> None:
    # why a watchdog and not PR_SET_PDEATHSIG: the death signal fires when the forking *thread* exits
    provider = LocalProcessProvider("echo")
    worker = threading.Thread(target=provider.start)
    worker.start()
    worker.join(timeout=120)
    try:
        assert provider.started and provider.pid is not None
        time.sleep(1.0)  # several watchdog polls after the thread ended
        assert provider.is_running() and provider.exit_status() is None
    finally:
        provider.stop()
