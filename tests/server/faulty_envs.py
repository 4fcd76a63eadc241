"""Small environments that misbehave on purpose, for error-path tests."""

from __future__ import annotations

import os
import threading
import time

from pydantic import Field

from openenv_echo import Action, Observation, env_output
from openenv_echo.server import Environment


class CrashAction(Action):
    mode: str = Field(description="ok | raise | sleep | pid")
    seconds: float = 0.0


class CrashEnvironment(Environment[CrashAction, Observation]):
    """Raises on demand, or blocks (a slow tool)."""

    name = "crash"
    action_type = CrashAction
    BLOCKING = True

    def _reset(self, seed: int | None) -> Observation:
        return Observation(segments=[env_output("ready\n")])

    def _step(self, action: CrashAction) -> Observation:
        if action.mode == "thread":  # which thread of its process runs a step
            return Observation(segments=[env_output(f"{threading.current_thread().name}\n")])
        if action.mode == "raise":
            raise RuntimeError("tool exploded")
        if action.mode == "half_reply":  # stalls `seconds` halfway through writing its reply frame, then exits
            _write_reply_slowly(Observation(segments=[env_output(f"{time.monotonic()}\n")]), action.seconds)
        if action.mode == "sleep":
            time.sleep(action.seconds)
        if action.mode == "pid":  # which process runs this instance
            return Observation(segments=[env_output(f"{os.getpid()}\n")], reward=1.0)
        return Observation(segments=[env_output(f"{action.mode}\n")], reward=1.0)


def _write_reply_slowly(obs: Observation, pause_s: float) -> None:
    """Write this worker's reply frame by hand (multiprocessing's framing), pausing after its first bytes: what the
    server sees when a worker is descheduled mid-write. The worker then exits (its loop would write a second reply)."""
    import gc
    import pickle
    import struct
    from multiprocessing.connection import Connection

    conn = next(o for o in gc.get_objects() if isinstance(o, Connection))
    body = pickle.dumps(("ok", obs), pickle.HIGHEST_PROTOCOL)
    frame = struct.pack("!i", len(body)) + body
    os.write(conn.fileno(), frame[:10])
    time.sleep(pause_s)
    os.write(conn.fileno(), frame[10:])
    os._exit(0)


class BrokenFactoryEnvironment(CrashEnvironment):
    name = "broken"

    def __init__(self) -> None:
        raise OSError("no database file")


class SlowResetEnvironment(CrashEnvironment):
    """A reset that holds its worker for ``hold`` seconds and reports when it ran (CLOCK_MONOTONIC, host-wide) and
    on which thread of its process."""

    name = "slow_reset"

    def _reset(self, seed: int | None, hold: float = 0.0) -> Observation:
        start = time.monotonic()
        time.sleep(hold)
        return Observation(segments=[env_output(f"{start} {time.monotonic()} {threading.current_thread().name}\n")])

    def _step(self, action: CrashAction) -> Observation:
        if action.mode == "clock":
            return Observation(segments=[env_output(f"{time.monotonic()}\n")])
        return super()._step(action)
