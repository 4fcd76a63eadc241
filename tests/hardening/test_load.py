"""Load at CI scale: zero errors, clean capacity refusal and recovery, no memory growth over many episodes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx

from openenv_echo.server import free_port
from openenv_echo.testing.load import run_load


def test_concurrent_sessions_zero_errors(running_server) -> None:
    url = running_server("echo", max_sessions=16)
    report = asyncio.run(run_load([url], sessions=16, steps=40))
    assert report.error_count == 0, report.errors
    assert report.steps == 16 * 40
    # one latency per step, each a real round trip (positive, finite, within the client's own timeout)
    assert len(report.latencies_s) == 16 * 40 and all(0 < x < 60 for x in report.latencies_s)


def test_episodes_cycle_over_the_given_seeds_and_actions_see_theirs(running_server) -> None:
    url = running_server("terminal", max_sessions=4)
    seen: list[tuple[int, int]] = []

    def submit(seed: int, step: int) -> dict[str, str]:
        seen.append((seed, step))
        return {"command": "submit disk_full web"}  # ends the episode: the next step resets first

    report = asyncio.run(run_load([url], sessions=2, steps=3, action=submit, seeds=[11, 12, 13]))
    assert report.error_count == 0, report.errors
    assert report.steps == 6 and len(report.reset_latencies_s) == 4  # 3 episodes per session, 2 of them resets
    # episode j of session i plays seeds[(i + 2j) % 3]: session 0 plays 11, 13, 12; session 1 plays 12, 11, 13
    assert sorted(seen) == sorted([(11, 0), (13, 0), (12, 0), (12, 0), (11, 0), (13, 0)])


def test_capacity_overflow_refused_cleanly_then_recovers(running_server) -> None:
    url = running_server("echo", max_sessions=6)
    over = asyncio.run(run_load([url], sessions=10, steps=30))
    assert over.errors == {"CAPACITY_REACHED": 4}, over.errors  # exactly the extras, with the right code
    assert over.steps == 6 * 30  # every admitted session finished all its steps
    after = asyncio.run(run_load([url], sessions=6, steps=5))  # all closed: full capacity again
    assert after.error_count == 0 and after.steps == 30


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def test_memory_flat_over_many_episodes() -> None:
    """1,500 episodes, each on a new connection; the server's RSS after warm-up grows by less than 12 MB.
    (``bench/bench_load.py --memory-episodes 10000`` measures the full 10,000.)"""
    from openenv_echo import EnvClient

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "openenv_echo.cli", "serve", "echo", "--port", str(port), "--log-level", "error"],
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/health", trust_env=False, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)

        def episodes(n: int) -> None:
            for i in range(n):
                with EnvClient(url) as env:
                    env.reset(seed=i)
                    env.step({"message": "x" * 200})
                    env.step({"message": "bye"})

        episodes(300)
        baseline = _rss_mb(proc.pid)
        episodes(1200)
        growth = _rss_mb(proc.pid) - baseline
        assert growth < 12, f"server RSS grew {growth:.1f} MB over 1200 episodes"
    finally:
        proc.kill()
