"""Load generation: N concurrent sessions x K steps against a server, with latency percentiles and errors.

Used by ``bench/bench_load.py`` and the load tests; talks to servers only through ``AsyncEnvClient``.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client.aio import AsyncEnvClient
from ..client.errors import EnvClientError, ServerError


@dataclass
class LoadReport:
    sessions: int
    steps_per_session: int
    steps: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)  # steps only, send to reply
    reset_latencies_s: list[float] = field(default_factory=list)  # the resets between episodes (not steps)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def percentile_ms(self, q: float, resets: bool = False) -> float:
        """The ``q`` quantile of step latency (or of the resets between episodes) in ms."""
        samples = self.reset_latencies_s if resets else self.latencies_s
        if not samples:
            return float("nan")
        ordered = sorted(samples)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def row(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "steps": self.steps,
            "steps_per_s": round(self.steps_per_s, 1),
            "p50_ms": round(self.percentile_ms(0.50), 2),
            "p99_ms": round(self.percentile_ms(0.99), 2),
            "errors": self.error_count,
            "resets": len(self.reset_latencies_s),
            "reset_p50_ms": round(self.percentile_ms(0.50, resets=True), 2),
            "reset_p99_ms": round(self.percentile_ms(0.99, resets=True), 2),
        }


ActionFn = Callable[[int, int], dict[str, Any]]
"""(the episode's reset seed, step index within the episode) -> action."""


def echo_action(seed: int, step: int) -> dict[str, Any]:
    return {"message": f"episode {seed} step {step}"}


async def run_load(
    urls: list[str],
    sessions: int,
    steps: int,
    action: ActionFn = echo_action,
    reset_options: dict[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
) -> LoadReport:
    """Each session resets, then (once every session has its first observation, so the measured steps do not
    queue behind the opening burst of resets) steps ``steps`` times, resetting whenever an episode ends. Step
    latency is each step's send to reply; the resets between episodes are timed apart.

    Episode ``j`` of session ``i`` resets with ``seeds[(i + j * sessions) % len(seeds)]`` (by default a fresh seed
    per episode). ``action`` runs on this event loop, before its step's clock starts: it must be cheap, or it
    delays every other session's replies (give scripted episodes a small pool of ``seeds`` and precompute them).
    The generator's garbage collector is paused while it runs, for the same reason."""
    report = LoadReport(sessions, steps)

    def episode_seed(session: int, episode: int) -> int:
        if seeds:
            return seeds[(session + episode * sessions) % len(seeds)]
        return session * 100_003 + episode

    waiting = sessions
    all_ready = asyncio.Event()

    def ready() -> None:
        nonlocal waiting
        waiting -= 1
        if waiting == 0:
            all_ready.set()

    async def one(i: int) -> None:
        counted = False
        try:
            async with AsyncEnvClient(urls[i % len(urls)], message_timeout_s=60) as env:
                episode, index = 0, 0
                seed = episode_seed(i, episode)
                result = await env.reset(seed=seed, **(reset_options or {}))
                ready()
                counted = True
                await all_ready.wait()
                for _ in range(steps):
                    if result.done:
                        episode, index = episode + 1, 0
                        seed = episode_seed(i, episode)
                        t0 = time.perf_counter()
                        result = await env.reset(seed=seed, **(reset_options or {}))
                        report.reset_latencies_s.append(time.perf_counter() - t0)
                    act = action(seed, index)
                    t0 = time.perf_counter()
                    result = await env.step(act)
                    index += 1
                    report.latencies_s.append(time.perf_counter() - t0)
                    report.steps += 1
        except ServerError as e:
            report.errors[getattr(e.code, "value", str(e.code))] += 1
        except EnvClientError as e:
            report.errors[type(e).__name__] += 1
        finally:
            if not counted:
                ready()  # a session that failed to start must not hold the others back

    gc.collect()
    gc.disable()  # the generator's own collector would stall every session at once and count as server latency
    start = time.perf_counter()
    try:
        await asyncio.gather(*(one(i) for i in range(sessions)))
    finally:
        report.seconds = time.perf_counter() - start
        gc.enable()
    return report
