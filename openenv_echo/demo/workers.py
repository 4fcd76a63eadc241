"""RL runs trained ``--workers`` at a time, each in its own process.

A run depends only on the start weights, its λ and RL seed (and, for direct CE, the stored GRPO run of its seed), so
runs are independent jobs: each worker process builds its own store (``experiment.RunStore``) from one pickled
``WorkerSetup`` and trains (or evaluates on test) what it is given into the shared checkpoint directory; the parent
then loads the stored runs.
Every run reseeds torch and its sampler, so its numbers do not depend on which worker ran it or how many there were.
Workers are spawned (not forked: the parent holds threads and torch state) and stop when the parent dies.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .config import DemoConfig
from .evaluate import CeSet

JobKey = tuple[str, float, int, bool]
"""A job's arm, λ, RL seed and whether it is the held-out curve's job."""


@dataclass(frozen=True)
class Job:
    """One RL run to have stored: train it if it is not, and (``test``) its held-out curve too. A test job of a run
    that another job of the same batch trains waits for it, so that what waits on the run (direct CE on its seed's
    GRPO rollouts) starts as soon as it is stored, not after its evaluation."""

    arm: str
    lam: float
    seed: int
    test: bool = False

    @property
    def key(self) -> JobKey:
        return (self.arm, self.lam, self.seed, self.test)

    @property
    def needs(self) -> JobKey | None:
        """The job that must finish first, where it is scheduled: the run's training for its held-out curve, else
        its seed's GRPO run for direct CE."""
        if self.test:
            return (self.arm, self.lam, self.seed, False)
        return ("grpo", 0.0, self.seed, False) if self.arm == "direct_ce" else None


@dataclass
class WorkerSetup:
    """What a worker needs to rebuild the parent's ``RunStore`` (sent once per worker)."""

    cfg: DemoConfig
    url: str
    tok: Any
    model: torch.nn.Module
    start: dict[str, Any]
    ce_val: CeSet
    ce_test: CeSet
    store: Path


class QueueBar:
    """The slice of a tqdm bar ``rl_run`` uses, forwarded to the parent's bar through a queue."""

    def __init__(self, q: Any) -> None:
        self.q = q

    def set_postfix(self, **kw: Any) -> None:
        self.q.put(("postfix", kw))

    def update(self, n: int = 1) -> None:
        self.q.put(("update", n))


class Store(Protocol):
    """What a worker drives: ``experiment.RunStore``."""

    def ensure(self, job: Job) -> None: ...


StoreFactory = Callable[[WorkerSetup, QueueBar], Store]
"""Builds a worker's store from the setup (a module-level function, so that it pickles)."""

_WORKER: dict[str, Store] = {}


def _init(factory: StoreFactory, setup: WorkerSetup, progress: Any, parent: int) -> None:
    from ..providers.parent_watch import watch_parent

    watch_parent(parent)
    torch.set_num_threads(setup.cfg.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    _WORKER["runs"] = factory(setup, QueueBar(progress))


def _work(job: Job) -> Job:
    _WORKER["runs"].ensure(job)
    return job


def run_jobs(factory: StoreFactory, setup: WorkerSetup, jobs: list[Job], workers: int, bar: Any) -> None:
    """Run ``jobs`` on ``workers`` processes, each job once the job it needs has finished (in list order among the
    ready ones, one per free worker); progress goes to ``bar``. When a job fails, the failure is written to ``bar``
    at once, no further job starts, and the runs already training finish (so that they are stored for the same
    command to resume) before the first failure is raised."""
    if not jobs:
        return
    ctx = mp.get_context("spawn")
    progress = ctx.Queue()
    scheduled = {j.key for j in jobs}
    waiting, running, finished = list(jobs), dict[Future[Job], Job](), set[JobKey]()
    failures: list[BaseException] = []
    slots = min(workers, len(jobs))
    with ProcessPoolExecutor(
        max_workers=slots, mp_context=ctx, initializer=_init, initargs=(factory, setup, progress, os.getpid())
    ) as pool:
        while running or (waiting and not failures):
            ready = [j for j in waiting if j.needs is None or j.needs not in scheduled or j.needs in finished]
            for job in ready[: slots - len(running)] if not failures else []:
                waiting.remove(job)
                running[pool.submit(_work, job)] = job
            if not running:
                raise RuntimeError(f"jobs wait on runs that are not scheduled: {waiting}")
            done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(progress, bar)
            for f in done:
                job = running.pop(f)
                error = f.exception()
                if error is None:
                    finished.add(job.key)
                    continue
                failures.append(error)
                bar.write(_failure_line(job, error, list(running.values()), len(waiting)))
    _drain(progress, bar)
    if failures:
        raise failures[0]


def _describe(job: Job) -> str:
    return f"{job.arm} λ={job.lam:g} seed {job.seed}{' (test curve)' if job.test else ''}"


def _failure_line(job: Job, error: BaseException, running: list[Job], not_started: int) -> str:
    """What a failed job's user reads at once: the error, the runs it waits for, and what will not start."""
    line = f"RL run {_describe(job)} failed: {type(error).__name__}: {error}."
    if running:
        line += f" Waiting for the runs still training to finish and be stored: {', '.join(map(_describe, running))}."
    if not_started:
        line += f" {not_started} run(s) not started."
    return line


def _drain(progress: Any, bar: Any) -> None:
    while True:
        try:
            kind, value = progress.get_nowait()
        except queue.Empty:
            return
        if kind == "update":
            bar.update(value)
        else:
            bar.set_postfix(**value)
