"""Load: N concurrent sessions x K steps against one server and (optionally) the docker-compose stack.

Reports throughput, p50/p99 step latency and errors per N, and the server's memory over many episodes.

    python bench/bench_load.py                                 # one local echo server, N in 1 8 64
    python bench/bench_load.py --env terminal --steps 100
    python bench/bench_load.py --stack http://127.0.0.1:8001 --stack http://127.0.0.1:8101 ...   # compose URLs
    python bench/bench_load.py --memory-episodes 10000          # server RSS over 10k episodes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
from tqdm import tqdm

from openenv_echo.client.load import echo_action, run_load
from openenv_echo.server import free_port

ACTIONS = {
    "echo": echo_action,
    "terminal": lambda i, k: {"command": ["ls /var/log", "ps aux", "df -h", "tail -n 5 /var/log/syslog"][k % 4]},
    "sql": lambda i, k: {"query": ["SELECT COUNT(*) FROM customers", "SELECT name FROM products LIMIT 5"][k % 2]},
}


def start_server(env: str, max_sessions: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openenv_echo.cli",
            "serve",
            env,
            "--port",
            str(port),
            "--log-level",
            "error",
            "--max-sessions",
            str(max_sessions),
        ],
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/health", trust_env=False, timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def episodes(url: str, n: int, pid: int, every: int) -> list[tuple[int, float]]:
    from openenv_echo import AsyncEnvClient

    samples = [(0, rss_mb(pid))]
    bar = tqdm(total=n, desc="episodes")
    for done in range(1, n + 1):
        async with AsyncEnvClient(url) as env:  # a new session per episode: connection churn included
            await env.reset(seed=done)
            await env.step({"message": "x" * 100})
            await env.step({"message": "bye"})
        bar.update(1)
        if done % every == 0:
            samples.append((done, rss_mb(pid)))
    bar.close()
    return samples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="echo", choices=sorted(ACTIONS))
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--steps", type=int, default=200, help="steps per session")
    p.add_argument("--stack", action="append", default=[], help="base URL(s) of a running stack (round-robin)")
    p.add_argument("--memory-episodes", type=int, default=0)
    args = p.parse_args()

    proc, url = start_server(args.env, max_sessions=max(args.sessions) + 8)
    try:
        if args.memory_episodes:
            samples = asyncio.run(episodes(url, args.memory_episodes, proc.pid, max(1, args.memory_episodes // 10)))
            for n, mb in samples:
                print(f"after {n:6d} episodes: server RSS {mb:7.1f} MB")
            print(f"growth after the first tenth: {samples[-1][1] - samples[1][1]:+.1f} MB")
            return
        targets = [("one server", [url])] + ([("compose stack", args.stack)] if args.stack else [])
        print(f"{'target':15s} {'N':>4s} {'steps':>7s} {'steps/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s} {'errors':>6s}")
        for name, urls in targets:
            for n in args.sessions:
                r = asyncio.run(run_load(urls, n, args.steps, ACTIONS[args.env])).row()
                print(
                    f"{name:15s} {n:4d} {r['steps']:7d} {r['steps_per_s']:9.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['errors']:6d}"
                )
                print(json.dumps({"target": name, **r}), file=sys.stderr)
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
