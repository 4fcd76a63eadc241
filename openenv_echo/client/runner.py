"""Episode loops: one episode with a sync client, many concurrent sessions with the async client."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..trajectory import Trajectory, TrajectoryWriter
from .aio import AsyncEnvClient
from .results import StepResult
from .sync import EnvClient


@dataclass
class PolicyStep:
    """What a policy returns when it has more than the action: its text and sampled token ids (TITO)."""

    action: dict[str, Any]
    text: str | None = None
    token_ids: list[int] | None = None


PolicyOutput = dict[str, Any] | PolicyStep
Policy = Callable[[StepResult, Trajectory], PolicyOutput | Awaitable[PolicyOutput]]
"""Called with the last observation and the trajectory so far; returns the next action."""


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
    """Reset, then step with ``policy`` until done or ``max_steps``; returns the recorded trajectory."""
    result = client.reset(seed=seed, messages=messages, **reset_options)
    for _ in range(max_steps):
        if result.done:
            break
        assert client.trajectory is not None
        step = _as_step(policy(result, client.trajectory))
        result = client.step(step.action, action_text=step.text, action_token_ids=step.token_ids)
    assert client.trajectory is not None
    return client.trajectory


async def run_episode_async(
    client: AsyncEnvClient,
    policy: Policy,
    *,
    seed: int | None = None,
    max_steps: int = 64,
    messages: list[dict[str, Any]] | None = None,
    **reset_options: Any,
) -> Trajectory:
    result = await client.reset(seed=seed, messages=messages, **reset_options)
    for _ in range(max_steps):
        if result.done:
            break
        assert client.trajectory is not None
        out = policy(result, client.trajectory)
        step = _as_step(await out if inspect.isawaitable(out) else out)  # type: ignore[arg-type]
        result = await client.step(step.action, action_text=step.text, action_token_ids=step.token_ids)
    assert client.trajectory is not None
    return client.trajectory


async def run_episodes_async(
    base_url: str,
    policy: Policy,
    seeds: Sequence[int],
    *,
    concurrency: int = 8,
    max_steps: int = 64,
    writer: TrajectoryWriter | str | Path | None = None,
    progress: bool = True,
    **client_kwargs: Any,
) -> list[Trajectory]:
    """One episode per seed over ``concurrency`` concurrent sessions; results in seed order."""
    own = writer is not None and not isinstance(writer, TrajectoryWriter)
    sink = TrajectoryWriter(writer) if own else writer  # type: ignore[arg-type]
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for i, s in enumerate(seeds):
        queue.put_nowait((i, s))
    results: list[Trajectory | None] = [None] * len(seeds)
    bar = tqdm(total=len(seeds), desc="episodes", disable=not progress)

    async def worker() -> None:
        async with AsyncEnvClient(base_url, writer=sink, **client_kwargs) as client:
            while not queue.empty():
                i, seed = queue.get_nowait()
                results[i] = await run_episode_async(client, policy, seed=seed, max_steps=max_steps)
                await asyncio.sleep(0)
                bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(seeds))))))
    finally:
        bar.close()
        if own and sink is not None:
            sink.close()
    return [t for t in results if t is not None]


def run_episodes(base_url: str, policy: Policy, seeds: Sequence[int], **kwargs: Any) -> list[Trajectory]:
    """Synchronous front of ``run_episodes_async`` (not for use inside a running event loop)."""
    return asyncio.run(run_episodes_async(base_url, policy, seeds, **kwargs))
