"""Episode loops: one episode with a sync client; many concurrent sessions whose failures stay their own.

``run_episodes`` never lets one episode's failure take the batch down: a failed episode is returned (and journalled)
with its status and error and the steps it completed, and the batch goes on (``on_error="record"``, the default).
``"retry"`` also restarts an episode cut by a lost connection, as a new episode, up to ``max_attempts``; ``"raise"``
stops the batch at the first failure, cancelling the other workers, and raises ``RolloutAborted`` holding
everything recorded. A server at capacity, or not (yet) accepting connections, is waited for with jittered
exponential backoff up to ``wait_deadline_s`` per episode start; the time waited is reported.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

from ..trajectory import EpisodeError, EpisodeStatus, Trajectory, TrajectoryWriter
from .aio import AsyncEnvClient
from .core import open_writer
from .errors import CapacityReachedError, ConnectionLostError, EnvClientError, EnvTimeoutError
from .pool import EnvPool, NoReplicaError, as_pool
from .results import StepResult
from .sync import EnvClient

log = logging.getLogger(__name__)

OnError = Literal["record", "raise", "retry"]


@dataclass
class PolicyStep:
    """What a policy returns when it has more than the action: its text and sampled token ids (TITO)."""

    action: dict[str, Any]
    text: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    temperature: float | None = None


PolicyOutput = dict[str, Any] | PolicyStep
Policy = Callable[[StepResult, Trajectory], PolicyOutput | Awaitable[PolicyOutput]]
"""Called with the last observation and the trajectory so far; returns the next action."""


class Rollouts(list[Trajectory]):
    """``run_episodes``' result: one trajectory per seed, in seed order, each with its ``status`` (and ``error``).

    ``waited_s`` is the time spent waiting for a server at capacity or not accepting connections, summed over
    workers; ``restarts`` counts episodes restarted after a lost connection (``on_error="retry"``)."""

    waited_s: float = 0.0
    restarts: int = 0

    def statuses(self) -> Counter[str]:
        return Counter(t.status for t in self)


class RolloutAborted(EnvClientError):
    """``on_error="raise"``: an episode failed and the batch was stopped; ``rollouts`` holds what was recorded,
    the failed episode and those cut short by the stop (``abandoned``) included. The cause is the episode's error."""

    def __init__(self, message: str, rollouts: Rollouts) -> None:
        super().__init__(message)
        self.rollouts = rollouts


def _as_step(out: PolicyOutput) -> PolicyStep:
    return out if isinstance(out, PolicyStep) else PolicyStep(action=dict(out))


def run_episode(
    client: EnvClient,
    policy: Callable[[StepResult, Trajectory], PolicyOutput],
    *,
    seed: int | None = None,
    max_steps: int = 64,
    messages: list[dict[str, Any]] | None = None,
    **reset_options: Any,
) -> Trajectory:
    """Reset, then step with ``policy`` until done or ``max_steps`` (then ``truncated``); returns the trajectory.

    An error propagates after the episode is ended (``cut`` by a lost connection, else ``abandoned``)."""
    result = client.reset(seed=seed, messages=list(messages or []), **reset_options)
    trajectory = client.trajectory
    assert trajectory is not None
    try:
        for _ in range(max_steps):
            if result.done:
                break
            step = _as_step(policy(result, trajectory))
            result = client.step(
                step.action,
                action_text=step.text,
                action_token_ids=step.token_ids,
                action_logprobs=step.logprobs,
                sampling_temperature=step.temperature,
            )
    except BaseException as e:
        client.end_episode("abandoned", e)  # a no-op when the connection loss already cut it
        raise
    client.end_episode("truncated")  # a no-op when it is done
    return trajectory


@dataclass
class _Settings:
    policy: Policy
    max_steps: int
    on_error: OnError
    max_attempts: int
    wait_deadline_s: float
    reset_options: dict[str, Any]


async def _start(client: AsyncEnvClient, seed: int, s: _Settings, batch: Rollouts) -> StepResult:
    """Reset, waiting out ``CAPACITY_REACHED`` and refused connections with full-jitter exponential backoff."""
    began, delay = time.monotonic(), 0.05
    while True:
        try:
            return await client.reset(seed=seed, metadata={"seed": seed}, **s.reset_options)
        except (CapacityReachedError, ConnectionLostError) as e:  # no episode started: nothing is resumed
            left = s.wait_deadline_s - (time.monotonic() - began)
            if left <= 0:
                raise
            pause = min(left, random.uniform(0, delay))
            delay = min(2 * delay, 1.0)
            log.info("seed %s: %s; waiting %.2fs before trying again", seed, type(e).__name__, pause)
            await asyncio.sleep(pause)
            batch.waited_s += pause


async def _episode(client: AsyncEnvClient, seed: int, s: _Settings, batch: Rollouts) -> Trajectory:
    """One episode; its failure is its outcome (raised only under ``on_error="raise"``)."""
    try:
        result = await _start(client, seed, s, batch)
    except Exception as e:  # never started: recorded (and journalled) as an empty episode
        status: EpisodeStatus = "cut" if isinstance(e, (ConnectionLostError, EnvTimeoutError)) else "abandoned"
        empty = Trajectory(env_name=client.env_name, metadata={"seed": seed}, status=status, error=EpisodeError.of(e))
        if client.writer is not None:
            client.writer.write(empty)
        if s.on_error == "raise":
            raise
        return empty
    trajectory = client.trajectory
    assert trajectory is not None
    try:
        for _ in range(s.max_steps):
            if result.done:
                break
            out = s.policy(result, trajectory)
            step = _as_step(await out if inspect.isawaitable(out) else out)
            result = await client.step(
                step.action,
                action_text=step.text,
                action_token_ids=step.token_ids,
                action_logprobs=step.logprobs,
                sampling_temperature=step.temperature,
            )
    except BaseException as e:  # an env error, a lost connection, a policy bug, a cancellation: its outcome
        client.end_episode("abandoned", e)  # a no-op when the connection loss already cut it
        if s.on_error == "raise" or not isinstance(e, Exception):
            raise
        log.warning("episode %s (seed %s) %s: %s", trajectory.episode_id, seed, trajectory.status, e)
        return trajectory
    client.end_episode("truncated")  # a no-op when it is done
    return trajectory


async def run_episodes_async(
    base_url: str | EnvPool | Any,
    policy: Policy,
    seeds: Sequence[int],
    *,
    concurrency: int = 8,
    max_steps: int = 64,
    writer: TrajectoryWriter | str | Path | None = None,
    progress: bool = True,
    on_error: OnError = "record",
    max_attempts: int = 3,
    wait_deadline_s: float = 60.0,
    reset_options: dict[str, Any] | None = None,
    **client_kwargs: Any,
) -> Rollouts:
    """One episode per seed over ``concurrency`` concurrent sessions; every episode's trajectory, in seed order,
    with the seed in its ``metadata["seed"]``.

    ``base_url`` is one server, or an ``EnvPool`` / fleet provider (``RayProvider``): then every episode leases
    the least-loaded live replica, a replica that cuts an episode and fails its health check leaves the pool (and
    is replaced by the provider), and ``on_error="retry"`` restarts the episode on another replica.

    ``writer`` journals every step as it completes; it is closed (when given as a path) only after every worker
    has stopped. See the module docstring for ``on_error``, ``max_attempts`` and ``wait_deadline_s``."""
    if on_error not in ("record", "raise", "retry"):
        raise ValueError(f"on_error must be 'record', 'raise' or 'retry', not {on_error!r}")
    settings = _Settings(policy, max_steps, on_error, max(1, max_attempts), wait_deadline_s, dict(reset_options or {}))
    own = writer is not None and not isinstance(writer, TrajectoryWriter)
    sink = open_writer(writer)
    queue = deque(enumerate(seeds))
    slots: list[Trajectory | None] = [None] * len(seeds)
    batch = Rollouts()
    bar = tqdm(total=len(seeds), desc="episodes", disable=not progress)

    pool = as_pool(base_url)

    async def worker() -> None:
        client = None if pool is not None else AsyncEnvClient(str(base_url), writer=sink, **client_kwargs)
        try:
            while queue:
                i, seed = queue.popleft()
                for attempt in range(1, settings.max_attempts + 1):
                    if pool is not None:
                        try:
                            url = pool.acquire()
                        except NoReplicaError as e:
                            slots[i] = Trajectory(metadata={"seed": seed}, status="abandoned", error=EpisodeError.of(e))
                            if sink is not None:
                                sink.write(slots[i])  # type: ignore[arg-type]
                            if on_error == "raise":
                                raise
                            break
                        client = AsyncEnvClient(url, writer=sink, **client_kwargs)
                    assert client is not None
                    try:
                        slots[i] = await _episode(client, seed, settings, batch)
                    except Exception:  # on_error="raise": stop the siblings now, not after this worker's cleanup
                        queue.clear()
                        for t in tasks:
                            if t is not asyncio.current_task():
                                t.cancel()
                        raise
                    finally:
                        slots[i] = slots[i] or client.trajectory  # cancelled mid-episode: what it recorded
                        if pool is not None:
                            await client.close()
                            pool.release(url)
                            if slots[i] is not None and slots[i].status == "cut":  # type: ignore[union-attr]
                                await asyncio.to_thread(pool.suspect, url)
                    if slots[i].status != "cut" or on_error != "retry" or attempt == settings.max_attempts:  # type: ignore[union-attr]
                        break
                    batch.restarts += 1
                    log.info("seed %s: restarting the episode cut by a lost connection (attempt %d)", seed, attempt + 1)
                    slots[i] = None
                bar.update(1)
        finally:
            if client is not None:
                await client.close()

    tasks = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(seeds))))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = next((t for t in done if not t.cancelled() and t.exception() is not None), None)
        if failed is not None:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            batch.extend(t for t in slots if t is not None)
            error = failed.exception()
            raise RolloutAborted(f"stopped the batch at the first failed episode: {error}", batch) from error
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # every worker has stopped ...
        bar.close()
        if own and sink is not None:
            sink.close()  # ... before the writer closes
    batch.extend(t for t in slots if t is not None)
    return batch


def run_episodes(base_url: str | EnvPool | Any, policy: Policy, seeds: Sequence[int], **kwargs: Any) -> Rollouts:
    """Synchronous front of ``run_episodes_async`` (not for use inside a running event loop)."""
    return asyncio.run(run_episodes_async(base_url, policy, seeds, **kwargs))
