"""The demo's worker pool (``openenv_echo.demo.workers``) with real spawned worker processes and a store that fails."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from openenv_echo.demo.config import DemoConfig
from openenv_echo.demo.workers import Job, QueueBar, WorkerSetup, run_jobs

RELEASE = "release"
"""Written by the parent's bar when it is told of a failure; the slow run finishes only once it exists."""


class _FailingStore:
    """Job seed 1 fails at once; seed 2 trains until the parent has reported that failure; every job leaves a
    marker file when it ends, so the test sees which ran and in what order."""

    def __init__(self, where: Path) -> None:
        self.where = where

    def ensure(self, job: Job) -> None:
        if job.seed == 1:
            time.sleep(0.5)  # seed 2 is surely training by now
            raise ValueError("the env server went away")
        deadline = time.monotonic() + 120
        while job.seed == 2 and not (self.where / RELEASE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (self.where / f"done-{job.seed}").write_text(str((self.where / RELEASE).exists()))


def _failing_store(setup: WorkerSetup, bar: QueueBar) -> _FailingStore:
    return _FailingStore(setup.store)


class _Bar:
    def __init__(self, where: Path) -> None:
        self.where, self.lines = where, list[str]()

    def write(self, line: str) -> None:
        self.lines.append(line)
        (self.where / RELEASE).write_text("")

    def update(self, n: int = 1) -> None: ...

    def set_postfix(self, **kw: Any) -> None: ...


def test_a_failed_run_is_reported_at_once_and_raised_once_the_running_runs_are_stored(tmp_path: Path) -> None:
    """Two workers: seed 1 fails while seed 2 trains and seeds 3 and 4 wait. The failure is written to the bar
    before seed 2 ends (seed 2 ends only once it is), naming seed 2 as what it waits for; seeds 3 and 4 never
    start; seed 2's run finishes (stored, for the same command to resume); then seed 1's error is raised."""
    setup = WorkerSetup(DemoConfig.preset("quick"), "", None, None, {}, None, None, tmp_path)  # type: ignore[arg-type]
    bar = _Bar(tmp_path)
    jobs = [Job("grpo", 0.0, s) for s in (1, 2, 3, 4)]
    with pytest.raises(ValueError, match="the env server went away"):
        run_jobs(_failing_store, setup, jobs, 2, bar)
    assert len(bar.lines) == 1, bar.lines
    assert bar.lines[0].startswith("RL run grpo λ=0 seed 1 failed: ValueError: the env server went away.")
    assert "Waiting for the runs still training to finish and be stored: grpo λ=0 seed 2." in bar.lines[0]
    assert bar.lines[0].endswith("2 run(s) not started.")
    assert (tmp_path / "done-2").read_text() == "True"  # it ended after the report, and before the raise
    assert not (tmp_path / "done-3").exists() and not (tmp_path / "done-4").exists()


def test_runs_start_one_per_free_worker_in_order_and_all_finish(tmp_path: Path) -> None:
    """Without failures every job runs once, on at most ``workers`` processes, and nothing is written to the bar."""
    setup = WorkerSetup(DemoConfig.preset("quick"), "", None, None, {}, None, None, tmp_path)  # type: ignore[arg-type]
    bar = _Bar(tmp_path)
    run_jobs(_failing_store, setup, [Job("grpo", 0.0, s) for s in (3, 4, 5)], 2, bar)
    assert bar.lines == [] and sorted(p.name for p in tmp_path.glob("done-*")) == ["done-3", "done-4", "done-5"]
