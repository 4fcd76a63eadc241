"""Fleet scaling: M concurrent sessions spread over 1, 2 and 4 replicas, on Ray and (optionally) docker-compose.

Each configuration runs the same load (M sessions x K steps, sessions round-robin over the replicas) and prints
steps/s, p50/p99 step latency and errors; the scaling ratio is steps/s at R replicas over steps/s at 1, measured
in the same run. Client and servers share this machine, so the ratio is bounded by its cores.

    python bench/bench_fleet.py                           # Ray (a local cluster on loopback), echo env
    python bench/bench_fleet.py --env terminal --sessions 32 --steps 50
    python bench/bench_fleet.py --compose                 # also the compose stack (images built, engine running)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time

import httpx

from openenv_echo.testing.load import LoadReport, run_load

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback on one machine
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

ACTIONS = {
    "echo": lambda i, k: {"message": f"session {i} step {k}"},
    "terminal": lambda i, k: {"command": ["ls /var/log", "ps aux", "df -h", "tail -n 5 /var/log/syslog"][k % 4]},
    "sql": lambda i, k: {"query": ["SELECT COUNT(*) FROM customers", "SELECT name FROM products LIMIT 5"][k % 2]},
}


def ray_urls(env: str, replicas: int, max_sessions: int) -> tuple[object, list[str]]:
    from openenv_echo.envs import spec_of
    from openenv_echo.providers.ray import RayProvider

    provider = RayProvider(spec_of(env), replicas=replicas, num_cpus=0.01, max_sessions=max_sessions)  # local: loopback
    provider.start()
    return provider, provider.urls


def compose_urls(env: str, replicas: int) -> list[str]:
    subprocess.run(["docker-compose", "up", "-d", "--scale", f"{env}={replicas}", env], check=True, capture_output=True)
    urls = []
    for i in range(1, replicas + 1):
        out = subprocess.run(
            ["docker-compose", "port", f"--index={i}", env, "8000"], check=True, capture_output=True, text=True
        )
        urls.append("http://" + out.stdout.strip())
    deadline = time.monotonic() + 60
    for url in urls:
        while True:
            try:
                if httpx.get(url + "/health", trust_env=False, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not healthy")
            time.sleep(0.2)
    return urls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="echo", choices=sorted(ACTIONS))
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--sessions", type=int, default=32, help="concurrent sessions (M)")
    p.add_argument("--steps", type=int, default=100, help="steps per session (K)")
    p.add_argument("--compose", action="store_true", help="also measure the docker-compose stack")
    args = p.parse_args()
    engines = ["ray"] + (["compose"] if args.compose else [])
    rows: list[tuple[str, int, LoadReport]] = []
    for engine in engines:
        for r in args.replicas:
            if engine == "ray":
                provider, urls = ray_urls(args.env, r, args.sessions + 8)
            else:
                provider, urls = None, compose_urls(args.env, r)
            try:
                rep = asyncio.run(run_load(urls, args.sessions, args.steps, ACTIONS[args.env]))
            finally:
                if provider is not None:
                    provider.stop()  # type: ignore[attr-defined]
            rows.append((engine, r, rep))
            print(f"{engine:8s} replicas={r}  {rep.row()}", flush=True)
        if engine == "compose":
            subprocess.run(["docker-compose", "stop", args.env], capture_output=True)
    print(
        f"\n{args.env} env, M={args.sessions} sessions x K={args.steps} steps, {os.cpu_count()} cores shared by client and servers"
    )
    print("| engine | replicas | steps/s | p50 ms | p99 ms | errors | scaling vs 1 replica |")
    print("|---|---|---|---|---|---|---|")
    for engine, r, rep in rows:
        base = next(x for e, n, x in rows if e == engine and n == args.replicas[0])
        ratio = rep.steps_per_s / base.steps_per_s if base.steps_per_s else float("nan")
        print(f"| {engine} | {r} | {rep.steps_per_s:,.0f} | {rep.percentile_ms(0.5):.2f} | {rep.percentile_ms(0.99):.2f} "
              f"| {rep.error_count} | {ratio:.2f}x |")  # fmt: skip
    errors = sum(rep.error_count for _, _, rep in rows)
    print(f"\nverdict: {'PASS' if errors == 0 else 'FAIL'} (0 errors in every configuration: {errors} seen)")


if __name__ == "__main__":
    main()
