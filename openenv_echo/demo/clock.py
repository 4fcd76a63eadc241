"""``Clock``: wall time per demo phase and the process's CPU time, for the report."""

from __future__ import annotations

import time


class Clock:
    """Wall time per phase, and the process's CPU time (on a shared machine the wall time depends on the load)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.cpu0 = time.process_time()
        self.last = self.start
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.last, 2)
        self.last = now
        return self.phases[name]

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 2)

    def cpu(self) -> float:
        return round(time.process_time() - self.cpu0, 2)
