"""Load: N concurrent sessions x K steps against one server and (optionally) the docker-compose stack.

Reports throughput, p50/p99 step latency and errors per N, and the server's memory over many episodes.

    python bench/bench_load.py                                 # one local echo server, N in 1 8 64
    python bench/bench_load.py --env terminal --steps 100
    python bench/bench_load.py --stack http://127.0.0.1:8001 --stack http://127.0.0.1:8101 ...   # compose URLs
    python bench/bench_load.py --memory-episodes 10000          # server RSS over 10k episodes
    python bench/bench_load.py --fault server --episodes 200    # kill -9 the server mid-run, restart it
    python bench/bench_load.py --fault client --episodes 200    # kill -9 the client process mid-run

Actions come from each env's scripted episode (``expert_actions(seed)`` of the env module in the env registry), so
every env runs. The fault modes journal every step and report episodes attempted, completed, cut and abandoned, and
the completed steps lost (steps the client had received that are not on disk); the verdict requires 0 lost.

Step latency is each step's send to reply, steps only: the resets between episodes are timed apart (reset columns)
and the timed steps start once every session has its first observation. Episodes play a pool of 2 x N seeds whose
scripted actions are computed before the run (computing one builds the env's world: done during the run, on the
load generator's event loop, it would delay every session's replies and be counted as server latency); every reset
still builds its world on the server. The load verdict checks fairness on one
server at the largest N: step p99 <= 3 x p50 and no errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from openenv_echo import Trajectory, read_trajectories, run_episodes
from openenv_echo.envs import ENVIRONMENTS
from openenv_echo.server import free_port
from openenv_echo.testing.load import run_load

FAIRNESS = 3.0  # issue #14: under ordinary load a step's p99 latency is at most this many times its p50


@cache
def scripted_episode(env: str, seed: int) -> tuple[dict[str, Any], ...]:
    """The env's scripted expert episode for ``seed`` (``expert_actions`` of its module in the env registry)."""
    return tuple(ENVIRONMENTS[env].expert_actions(seed))


def scripted_action(env: str):
    """(episode seed, step index) -> the scripted action (cycling if the episode runs longer)."""

    def action(seed: int, step: int) -> dict[str, Any]:
        actions = scripted_episode(env, seed)
        return dict(actions[step % len(actions)])

    return action


def scripted_policy(env: str, on_step=None):
    """A ``run_episodes`` policy playing the scripted episode of the trajectory's seed."""
    action = scripted_action(env)

    def policy(result: Any, traj: Trajectory) -> dict[str, Any]:
        if on_step is not None:
            on_step(traj)
        return action(traj.metadata["seed"], len(traj.steps))

    return policy


def start_server(env: str, max_sessions: int, port: int | None = None) -> tuple[subprocess.Popen, str]:
    port = port or free_port()
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
        stdout=subprocess.DEVNULL,
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


async def episodes(env_name: str, url: str, n: int, pid: int, every: int) -> list[tuple[int, float]]:
    from openenv_echo import AsyncEnvClient

    action = scripted_action(env_name)
    samples = [(0, rss_mb(pid))]
    bar = tqdm(total=n, desc="episodes")
    for done in range(1, n + 1):
        async with AsyncEnvClient(url) as env:  # a new session per episode: connection churn included
            result = await env.reset(seed=done)
            for k in range(len(scripted_episode(env_name, done))):
                if result.done:
                    break
                result = await env.step(action(done, k))
        bar.update(1)
        if done % every == 0:
            samples.append((done, rss_mb(pid)))
    bar.close()
    return samples


def steps_lost(received: dict[str, int], on_disk: dict[str, Trajectory]) -> int:
    """Completed steps the client had (per episode id) that the journal does not hold."""
    return sum(max(0, n - len(on_disk[e].steps)) if e in on_disk else n for e, n in received.items())


def report(mode: str, on_disk: dict[str, Trajectory], lost: int, extra: str = "") -> bool:
    counts = Counter(t.status for t in on_disk.values())
    completed = counts["done"] + counts["truncated"]
    print(
        f"fault={mode}: episodes attempted {len(on_disk)}, completed {completed}, cut {counts['cut']}, "
        f"abandoned {counts['abandoned']}; completed steps lost {lost}{extra}"
    )
    ok = lost == 0 and completed > 0
    print(
        f"verdict: {'PASS' if ok else 'FAIL'} (completed steps lost {lost}, target 0; completed {completed}, target > 0)"
    )
    return ok


def fault_server(env: str, episodes: int, concurrency: int, kill_after: int) -> bool:
    """Kill -9 the server after ``kill_after`` steps in all, restart it on the same port, finish the batch."""
    proc, url = start_server(env, max_sessions=concurrency + 8)
    port = int(url.rsplit(":", 1)[1])
    box = {"proc": proc, "steps": 0}

    def restart() -> None:
        box["proc"] = start_server(env, concurrency + 8, port)[0]

    def on_step(traj: Trajectory) -> None:
        box["steps"] += 1
        if box["steps"] == kill_after:
            box["proc"].kill()
            box["proc"].wait()
            threading.Thread(target=restart, daemon=True).start()

    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "journal.jsonl"
        try:
            got = run_episodes(
                url, scripted_policy(env, on_step), list(range(episodes)), concurrency=concurrency, writer=journal,
                progress=False, message_timeout_s=30,
            )  # fmt: skip
        finally:
            box["proc"].kill()
        on_disk = {t.episode_id or "": t for t in read_trajectories(journal, open_episodes=True)}
    lost = steps_lost({t.episode_id: len(t.steps) for t in got if t.episode_id}, on_disk)
    return report("server", on_disk, lost, f"; trajectories returned {len(got)}/{episodes}, waited {got.waited_s:.1f}s")


CLIENT = textwrap.dedent(
    """
    import sys
    from bench_load import scripted_policy
    from openenv_echo import run_episodes
    url, env, journal, n, c = sys.argv[1:6]
    def ack(traj):  # the policy sees the trajectory after each completed step: acknowledge what it holds
        print(traj.episode_id, len(traj.steps), flush=True)
    run_episodes(url, scripted_policy(env, ack), list(range(int(n))), concurrency=int(c), writer=journal, progress=False)
    """
)


def fault_client(env: str, episodes: int, concurrency: int, rounds: int) -> bool:
    """Kill -9 a client process mid-run, ``rounds`` times into one journal; compare its acknowledgements."""
    proc, url = start_server(env, max_sessions=concurrency + 8)
    received: dict[str, int] = {}
    rng = random.Random(0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            journal = Path(tmp) / "journal.jsonl"
            for _ in range(rounds):
                child = subprocess.Popen(
                    [sys.executable, "-c", CLIENT, url, env, str(journal), str(episodes), str(concurrency)],
                    stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent,
                )  # fmt: skip
                assert child.stdout is not None
                for _ in range(rng.randint(20, 400)):
                    line = child.stdout.readline()
                    if not line:
                        break
                    episode, n = line.split()
                    received[episode] = int(n)
                child.kill()
                child.wait()
                for line in child.stdout.read().splitlines():
                    episode, n = line.split()
                    received[episode] = int(n)
                child.stdout.close()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the torn last record of each kill
                on_disk = {t.episode_id or "": t for t in read_trajectories(journal, open_episodes=True)}
    finally:
        proc.kill()
    return report("client", on_disk, steps_lost(received, on_disk), f"; {rounds} client processes killed")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="echo", choices=sorted(ENVIRONMENTS))
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--steps", type=int, default=200, help="steps per session")
    p.add_argument("--stack", action="append", default=[], help="base URL(s) of a running stack (round-robin)")
    p.add_argument("--memory-episodes", type=int, default=0)
    p.add_argument("--fault", choices=["server", "client"], help="fault mode: kill the server or a client mid-run")
    p.add_argument("--episodes", type=int, default=200, help="fault mode: episodes per run")
    p.add_argument("--concurrency", type=int, default=16, help="fault mode: concurrent sessions")
    p.add_argument("--kill-after", type=int, default=250, help="fault=server: kill after this many steps in all")
    p.add_argument("--rounds", type=int, default=5, help="fault=client: client processes killed")
    args = p.parse_args()
    if args.fault == "server":
        sys.exit(0 if fault_server(args.env, args.episodes, args.concurrency, args.kill_after) else 1)
    if args.fault == "client":
        sys.exit(0 if fault_client(args.env, args.episodes, args.concurrency, args.rounds) else 1)

    print(f"load average before: {load_average()}  ({os.cpu_count()} cores)")
    proc, url = start_server(args.env, max_sessions=max(args.sessions) + 8)
    try:
        if args.memory_episodes:
            every = max(1, args.memory_episodes // 10)
            samples = asyncio.run(episodes(args.env, url, args.memory_episodes, proc.pid, every))
            for n, mb in samples:
                print(f"after {n:6d} episodes: server RSS {mb:7.1f} MB")
            print(f"growth after the first tenth: {samples[-1][1] - samples[1][1]:+.1f} MB")
            return
        targets = [("one server", [url])] + ([("compose stack", args.stack)] if args.stack else [])
        print(
            f"{'target':15s} {'N':>4s} {'steps':>7s} {'steps/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99/p50':>7s} "
            f"{'errors':>6s} {'resets':>6s} {'reset p50':>9s} {'reset p99':>9s}"
        )
        rows = []
        action = scripted_action(args.env)
        pool = list(range(2 * max(args.sessions)))
        for seed in tqdm(pool, desc="scripted episodes", leave=False):
            action(seed, 0)
        for name, urls in targets:
            for n in args.sessions:
                r = asyncio.run(run_load(urls, n, args.steps, action, seeds=pool)).row()
                rows.append(r)
                print(
                    f"{name:15s} {n:4d} {r['steps']:7d} {r['steps_per_s']:9.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
                    f"{r['p99_ms'] / r['p50_ms']:7.1f} {r['errors']:6d} {r['resets']:6d} {r['reset_p50_ms']:9.1f} "
                    f"{r['reset_p99_ms']:9.1f}"
                )
                print(json.dumps({"target": name, **r}), file=sys.stderr)
        fair = max(rows[: len(args.sessions)], key=lambda r: r["sessions"])  # one server, most sessions
        ratio = fair["p99_ms"] / fair["p50_ms"]
        ok = ratio <= FAIRNESS and fair["errors"] == 0
        print(
            f"verdict: {'PASS' if ok else 'FAIL'} (one server, {args.env}, N={fair['sessions']}: step p99/p50 "
            f"{ratio:.1f}, target <= {FAIRNESS:g}; errors {fair['errors']}, target 0)"
        )
    finally:
        proc.kill()
        print(f"load average after: {load_average()}  (1, 5, 15 min: an idle machine reads well below its cores)")


def load_average() -> str:
    """The 1/5/15-minute load averages, so a reader knows whether a figure was measured idle or loaded."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
