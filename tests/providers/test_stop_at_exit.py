"""Providers left running are stopped at interpreter exit, by the one exit hook every provider shares."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent(
    """
    import atexit

    def after_stop_all():  # registered first, so it runs after the providers' hook (atexit is last in, first out)
        print("stopped", provider._proc is None, provider.log_path is None, flush=True)

    atexit.register(after_stop_all)
    from openenv_echo.providers import LocalProcessProvider

    provider = LocalProcessProvider("echo")
    provider.start()
    print("pid", provider.pid, flush=True)
    """
)


def test_a_provider_the_script_forgot_is_stopped_by_the_exit_hook() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=os.environ)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    pid = int(lines[0].split()[1])
    assert lines[1] == "stopped True True", done.stdout  # the hook ran _terminate: no process, no log left
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie counts as dead
    except FileNotFoundError:
        return False
