"""Benchmark: the shell env through the full stack (client -> server -> Docker engine -> container).

* reset latency with the container pool off (``OPENENV_ECHO_SHELL_POOL=0``: every reset starts a container) and on
  (the default, 4: a container of the task waits, started while the last episode ran), one server process each,
  alternating rounds; between resets the client pauses ``--episode-s`` (the episode an agent would play), so the
  pool has the time a real rollout gives it;
* reset latency of generated training instances on the pooled server (a training seed past the shipped tasks: the
  instance written on first use, its files unpacked into a pooled container of its family), a fresh seed of the
  task's family each time, alternating with the shipped task's resets;
* step latency of a trivial command (``true``: one round trip through the shell's driver into the container's bash
  and back, the output and end-report reader and the supervisor's status check), against the echo env's step on the same kind of server (the protocol's
  own cost) measured in the same rounds.

Medians and 90th percentiles of per-call wall time seen by the client; the load average is printed before and after
(the 2 cores are shared). Needs a Docker engine and the base image (scripts/docker/).

Run: ``python bench/bench_shell.py [--rounds 5 --resets 8 --steps 200 --task count-word]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from openenv_echo.client import EnvClient
from openenv_echo.envs.splits import TASK_SPLITS
from openenv_echo.server.background import free_port

ROOT = Path(__file__).resolve().parents[1]


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Server:
    """``openenv-echo serve <env>`` in a child process on a free loopback port."""

    def __init__(self, env: str, **variables: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "openenv_echo.cli", "serve", env, "--port", str(self.port), "--log-level", "error"]
        child_env = {**os.environ, **variables}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while True:
            try:
                EnvClient(self.url).health()
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{env} server did not start: {self.proc.stderr.read().decode()[-2000:]}"
                    ) from None  # type: ignore[union-attr]
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def _q(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def _instance_seeds(task: str) -> Iterator[int]:
    """Training seeds naming fresh generated instances of ``task``'s family, one after another."""
    from shell_env.server.generate_tasks import GENERATED_FAMILIES, SUITE

    family = next(e.family for e in SUITE if e.name == task)
    index = [f.name for f in GENERATED_FAMILIES].index(family)
    shipped = sum(e.split == "train" for e in SUITE)
    for k in itertools.count():
        yield TASK_SPLITS["train"].start + shipped + index + len(GENERATED_FAMILIES) * k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--resets", type=int, default=8, help="resets per server per round")
    ap.add_argument("--steps", type=int, default=200, help="`true` steps (and echo steps) per round")
    ap.add_argument("--episode-s", type=float, default=1.0, help="pause between resets (the episode)")
    ap.add_argument("--task", default="count-word")
    ap.add_argument("--json", default=None, help="write the figures here")
    a = ap.parse_args()

    before = _loadavg()
    print(f"load average before: {before}", flush=True)
    cold = Server("shell", OPENENV_ECHO_SHELL_POOL="0")
    pooled = Server("shell", OPENENV_ECHO_SHELL_POOL="4")
    echo = Server("echo")
    resets: dict[str, list[float]] = {"pool off": [], "pool on": [], "pool on, generated": []}
    seeds = _instance_seeds(a.task)
    steps: dict[str, list[float]] = {"shell `true`": [], "echo": []}
    try:
        with EnvClient(cold.url) as c_cold, EnvClient(pooled.url) as c_pool, EnvClient(echo.url) as c_echo:
            for client in (c_cold, c_pool):  # builds the task's image if needed, fills the pool
                client.reset(task=a.task)
            c_pool.reset(seed=next(seeds))
            time.sleep(a.episode_s)
            for _ in tqdm(range(a.rounds), desc="rounds"):
                for name, client in (("pool off", c_cold), ("pool on", c_pool)):
                    for _ in range(a.resets):
                        kinds = [(name, {"task": a.task})]
                        if name == "pool on":
                            kinds.append(("pool on, generated", {"seed": next(seeds)}))
                        for kind, options in kinds:
                            began = time.perf_counter()
                            client.reset(max_steps=1000, **options)
                            resets[kind].append(time.perf_counter() - began)
                            time.sleep(a.episode_s)
                c_echo.reset(seed=1, max_steps=1000)
                for _ in range(a.steps):
                    began = time.perf_counter()
                    c_pool.step({"command": "true"})
                    steps["shell `true`"].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    c_echo.step({"message": "true"})
                    steps["echo"].append(time.perf_counter() - began)
    finally:
        for server in (cold, pooled, echo):
            server.stop()
    after = _loadavg()
    report = {
        "command": "python bench/bench_shell.py " + " ".join(sys.argv[1:]),
        "loadavg_before": before,
        "loadavg_after": after,
        "task": a.task,
        "reset_ms": {
            k: {"median": 1e3 * statistics.median(v), "p90": 1e3 * _q(v, 90), "n": len(v)} for k, v in resets.items()
        },
        "step_ms": {
            k: {"median": 1e3 * statistics.median(v), "p90": 1e3 * _q(v, 90), "n": len(v)} for k, v in steps.items()
        },
    }
    r, s = report["reset_ms"], report["step_ms"]
    print(f"\nload average before {before}, after {after}; task {a.task}\n")
    print("| measure | median ms | p90 ms | n | ratio (median) |\n|---|---|---|---|---|")
    print(
        f"| reset, pool off | {r['pool off']['median']:.1f} | {r['pool off']['p90']:.1f} | {r['pool off']['n']} | 1.00x |"
    )
    ratio = r["pool off"]["median"] / r["pool on"]["median"]
    print(
        f"| reset, pool on | {r['pool on']['median']:.1f} | {r['pool on']['p90']:.1f} | {r['pool on']['n']} | {ratio:.1f}x faster |"
    )
    g = r["pool on, generated"]
    print(
        f"| reset, pool on, generated instance | {g['median']:.1f} | {g['p90']:.1f} | {g['n']} | "
        f"{r['pool off']['median'] / g['median']:.1f}x faster |"
    )
    print(
        f"| step `true` (shell) | {s['shell `true`']['median']:.2f} | {s['shell `true`']['p90']:.2f} | {s['shell `true`']['n']} | "
        f"{s['shell `true`']['median'] / s['echo']['median']:.1f}x the echo step |"
    )
    print(f"| step (echo env) | {s['echo']['median']:.2f} | {s['echo']['p90']:.2f} | {s['echo']['n']} | 1.00x |")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
