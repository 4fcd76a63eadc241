"""``Clock``: wall time per demo phase, the main process's CPU time (RL worker processes are not counted), and the
machine's load average while it ran."""

from __future__ import annotations

import os
import time
from typing import Any


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (``os.getloadavg``, i.e. ``/proc/loadavg`` on Linux)."""
    return [round(x, 2) for x in os.getloadavg()]


class Clock:
    """Wall time per phase and the process's CPU time (on a shared machine the wall time depends on the load, so
    the 1-minute load average is sampled at every lap)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.cpu0 = time.process_time()
        self.last = self.start
        self.phases: dict[str, float] = {}
        self.load_start = load_average()
        self.load_samples: list[float] = []

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.last, 2)
        self.last = now
        self.load_samples.append(load_average()[0])
        return self.phases[name]

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 2)

    def cpu(self) -> float:
        return round(time.process_time() - self.cpu0, 2)

    def load(self) -> dict[str, Any]:
        """Load averages at the start and now, and the mean and max of the 1-minute figure sampled at each lap."""
        samples = self.load_samples or [self.load_start[0]]
        return {
            "start": self.load_start,
            "end": load_average(),
            "mean_1min_at_laps": round(sum(samples) / len(samples), 2),
            "max_1min_at_laps": max(samples),
            "cores": os.cpu_count(),
        }
