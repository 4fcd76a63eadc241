"""Single-session WebSocket steps/s: openenv-echo's server vs OpenEnv's ``create_app``, side by side.

Both serve the same trivial env (echo the message back) in their own uvicorn process; one client drives
each in alternating rounds and the median round counts. Besides wall-clock steps/s (which includes the client
and is squeezed by whatever else runs on the machine), it reports the server process's own CPU time per step
(utime+stime from /proc), the figure that load on other cores disturbs least.
Run: ``python bench/bench_server.py [--steps 2000 --rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import httpx
from websockets.sync.client import connect


def _ours_app():
    from openenv_echo import Action, Observation, env_output
    from openenv_echo.server import Environment, ServerLimits, create_app

    class Msg(Action):
        message: str

    class Echo(Environment):
        action_type = Msg

        def _reset(self, seed):
            return Observation(segments=[env_output("ready")])

        def _step(self, action):
            return Observation(segments=[env_output(action.message)], reward=0.0)

    return create_app(Echo, limits=ServerLimits(max_sessions=4))


def _openenv_app():
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class Msg(Action):
        message: str

    class Obs(Observation):
        text: str = ""

    class Echo(Environment):
        def __init__(self) -> None:
            super().__init__()
            self._state = State(step_count=0)

        def reset(self, seed=None, episode_id=None, **kw):
            self._state = State(episode_id=episode_id, step_count=0)
            return Obs(text="ready")

        def step(self, action, timeout_s=None, **kw):
            self._state.step_count += 1
            return Obs(text=action.message, reward=0.0)

        @property
        def state(self):
            return self._state

    return create_app(Echo, Msg, Obs, env_name="echo", max_concurrent_envs=1)


def serve(kind: str, port: int) -> None:
    import uvicorn

    app = _ours_app() if kind == "ours" else _openenv_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", ws="websockets-sansio")


def _start(kind: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)])
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{kind} server did not start")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WARMUP_STEPS = 50


def steps_per_second(port: int, steps: int) -> float:
    with connect(f"ws://127.0.0.1:{port}/ws", proxy=None, compression=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        ws.recv()
        frame = json.dumps({"type": "step", "data": {"message": "hello world " * 4}})
        for _ in range(WARMUP_STEPS):
            ws.send(frame)
            ws.recv()
        start = time.perf_counter()
        for _ in range(steps):
            ws.send(frame)
            reply = ws.recv()
        elapsed = time.perf_counter() - start
        assert b"error" not in (reply if isinstance(reply, bytes) else reply.encode())[:20]
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", choices=["ours", "openenv"])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    from openenv_echo.server import free_port

    ports = {"openenv-echo": free_port(), "openenv create_app": free_port()}
    procs = {
        "openenv-echo": _start("ours", ports["openenv-echo"]),
        "openenv create_app": _start("openenv", ports["openenv create_app"]),
    }
    try:
        rates: dict[str, list[float]] = {k: [] for k in ports}
        cpu_us: dict[str, list[float]] = {k: [] for k in ports}
        for _ in range(args.rounds):
            for name, port in ports.items():
                before = cpu_seconds(procs[name].pid)
                rates[name].append(steps_per_second(port, args.steps))
                frames = 1 + WARMUP_STEPS + args.steps  # every frame the server handled this round (reset first)
                cpu_us[name].append(1e6 * (cpu_seconds(procs[name].pid) - before) / frames)
    finally:
        for p in procs.values():
            p.kill()
    med = {k: statistics.median(v) for k, v in rates.items()}
    cpu = {k: statistics.median(v) for k, v in cpu_us.items()}
    for name, v in rates.items():
        print(
            f"{name:20s} median {med[name]:8.0f} steps/s  server CPU {cpu[name]:6.0f} us/step   "
            f"rounds: {', '.join(f'{x:.0f}' for x in v)}"
        )
    ours, theirs = "openenv-echo", "openenv create_app"
    print(
        f"ratio openenv-echo / openenv create_app: {med[ours] / med[theirs]:.2f}x steps/s (wall), "
        f"{cpu[theirs] / cpu[ours]:.2f}x steps per server CPU second"
    )


if __name__ == "__main__":
    main()
