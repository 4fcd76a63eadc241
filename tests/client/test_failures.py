"""Failure isolation, retry and honest timeouts against real server processes that are killed, restarted, stopped."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from openenv_echo import EnvClient, Trajectory, read_trajectories, run_episodes
from openenv_echo.client import (
    ActionValidationError,
    AsyncEnvClient,
    EnvTimeoutError,
    RolloutAborted,
    StepResult,
    run_episodes_async,
)

from .servers import ServerProcess

STEPS = 3  # every good episode: two messages, then "bye"
BAD_SEED = 77


def _policy(kill_after: int | None = None, server: ServerProcess | None = None) -> Any:
    """Echo policy: ``bye`` on the third step; seed 77 sends a bad action on its second; once ``kill_after`` steps
    in all have been asked for and seed 77's episode has ended, the server is killed (from the policy, i.e. mid-run)
    and restarted in a thread. Waiting for seed 77 keeps the kill from cutting its episode before its bad action,
    which a loaded machine's scheduling can otherwise do."""
    calls: dict[str, Any] = {"n": 0, "bad": None, "killed": False}

    async def policy(result: StepResult, traj: Trajectory) -> dict[str, Any]:
        calls["n"] += 1
        if traj.metadata["seed"] == BAD_SEED:
            calls["bad"] = traj
        due = kill_after is not None and calls["n"] >= kill_after and calls["bad"] is not None and calls["bad"].ended
        if server is not None and due and not calls["killed"]:
            calls["killed"] = True
            server.kill()
            threading.Thread(target=server.start, daemon=True).start()
        await asyncio.sleep(0)
        if traj.metadata["seed"] == BAD_SEED and len(traj.steps) == 1:
            return {"mesage": "typo"}
        return {"message": "bye" if len(traj.steps) == STEPS - 1 else f"m{len(traj.steps)}"}

    return policy


def _open_fds() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def _check_batch(rollouts: list[Trajectory], journal: Path, seeds: list[int], *, retried: bool) -> Counter[str]:
    """Every seed has its trajectory with the right status; memory and journal agree exactly."""
    assert len(rollouts) == len(seeds)
    assert [t.metadata["seed"] for t in rollouts] == seeds
    for t in rollouts:
        if t.metadata["seed"] == BAD_SEED:
            assert t.status == "abandoned" and len(t.steps) == 1
            assert (
                t.error is not None and t.error.type == "ActionValidationError" and t.error.code == "VALIDATION_ERROR"
            )
        elif t.status == "done":
            assert len(t.steps) == STEPS and t.steps[-1].action == {"message": "bye"} and t.error is None
        else:
            assert not retried, t
            assert (
                t.status == "cut" and t.error is not None and t.error.type in ("ConnectionLostError", "EnvTimeoutError")
            )
            assert len(t.steps) < STEPS
    on_disk = read_trajectories(journal, open_episodes=True)
    assert all(t.ended for t in on_disk)  # every episode's end is on disk, none left open
    by_id = {t.episode_id: t for t in on_disk if t.reset is not None}
    for t in rollouts:
        assert by_id[t.episode_id] == t  # every completed step on disk, same status, same error
    return Counter(t.status for t in rollouts)


def test_acceptance_200_episodes_one_bad_action_one_server_restart(tmp_path: Path) -> None:
    """200 episodes x concurrency 16, one bad action, the server killed and restarted mid-run; 10 times over:
    all 200 trajectories come back with the right status, every completed step is on disk, nothing leaks."""
    seeds = list(range(200))
    with ServerProcess("echo", "--max-sessions", "32") as server:
        fds = _open_fds()
        for rep in range(10):
            journal = tmp_path / f"rep{rep}.jsonl"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rollouts = run_episodes(
                    server.url,
                    _policy(kill_after=250, server=server),
                    seeds,
                    concurrency=16,
                    writer=journal,
                    progress=False,
                    message_timeout_s=10,
                    connect_timeout_s=5,
                )
            assert [str(w.message) for w in caught] == []
            counts = _check_batch(rollouts, journal, seeds, retried=False)
            assert counts["abandoned"] == 1 and 1 <= counts["cut"] <= 16 and counts["done"] == 199 - counts["cut"]
            assert rollouts.waited_s > 0  # workers waited for the restarted server
            assert _open_fds() == fds


def test_retry_restarts_cut_episodes_as_new_ones(tmp_path: Path) -> None:
    """``on_error="retry"``: episodes cut by the restart start again from reset (new episode ids, never resumed);
    the cut attempts stay in the journal as cut."""
    seeds = list(range(50, 110))
    journal = tmp_path / "j.jsonl"
    with ServerProcess("echo") as server:
        rollouts = run_episodes(
            server.url, _policy(kill_after=60, server=server), seeds, concurrency=8, writer=journal, progress=False,
            on_error="retry", message_timeout_s=10,
        )  # fmt: skip
    counts = _check_batch(rollouts, journal, seeds, retried=True)
    assert counts == {"done": 59, "abandoned": 1}
    on_disk = read_trajectories(journal)
    cut = [t for t in on_disk if t.status == "cut"]
    assert 1 <= len(cut) == rollouts.restarts and len(on_disk) == 60 + len(cut)
    assert {t.episode_id for t in cut}.isdisjoint(t.episode_id for t in rollouts)


def test_raise_stops_the_batch_and_keeps_what_was_recorded(running_server, tmp_path: Path) -> None:
    url = running_server("echo", max_sessions=8)
    journal = tmp_path / "j.jsonl"
    with pytest.raises(RolloutAborted) as info:
        run_episodes(
            url, _policy(), list(range(70, 200)), concurrency=4, writer=journal, progress=False, on_error="raise"
        )
    assert isinstance(info.value.__cause__, ActionValidationError)
    got = info.value.rollouts
    assert 0 < len(got) < 130, len(got)
    bad = [(t.status, t.error) for t in got if t.metadata["seed"] == BAD_SEED]
    assert bad and bad[0][0] == "abandoned", bad
    assert all(t.ended for t in got)
    on_disk = read_trajectories(journal, open_episodes=True)  # the writer was closed after the workers stopped
    assert all(t.ended for t in on_disk) and {t.episode_id for t in got} <= {t.episode_id for t in on_disk}


def test_capacity_is_waited_for_with_backoff(running_server) -> None:
    """4 workers on a 2-session server: the other two wait (reported) instead of failing."""
    url = running_server("echo", max_sessions=2)
    rollouts = run_episodes(url, _policy(), list(range(8)), concurrency=4, progress=False)
    assert rollouts.statuses() == {"done": 8} and rollouts.waited_s > 0


def test_capacity_wait_has_a_deadline(running_server) -> None:
    url = running_server("echo", max_sessions=1)
    with EnvClient(url) as holder:
        holder.reset()
        rollouts = run_episodes(url, _policy(), [1, 2], concurrency=2, progress=False, wait_deadline_s=0.5)
    assert rollouts.statuses() == {"abandoned": 2}
    assert all(t.error is not None and t.error.code == "CAPACITY_REACHED" and not t.steps for t in rollouts)


def test_max_steps_truncates(running_server, tmp_path: Path) -> None:
    url = running_server("echo")
    rollouts = run_episodes(
        url, lambda r, t: {"message": "more"}, [1], max_steps=2, writer=tmp_path / "j", progress=False
    )
    assert [(t.status, len(t.steps)) for t in rollouts] == [("truncated", 2)]
    assert read_trajectories(tmp_path / "j") == list(rollouts)


def test_hung_server_raises_the_timeout_error_in_time_and_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    """A stopped server (SIGSTOP: socket open, nobody home) gives ``EnvTimeoutError`` within message_timeout_s,
    during a request and, through keepalive, while idle; no library traceback reaches stderr."""
    with ServerProcess("echo") as server:
        with EnvClient(server.url, message_timeout_s=1.5, connect_timeout_s=2) as env:
            env.reset()
            server.pause()
            start = time.monotonic()
            with pytest.raises(EnvTimeoutError, match=r"no reply .* within message_timeout_s=1.5s; the client closed"):
                env.step({"message": "hello?"})
            assert time.monotonic() - start < 1.5 + 5  # the bound is the reply timeout, not the 50 s of old
            assert env.trajectory is not None and env.trajectory.status == "cut"
            server.resume()
            env.reset()
            server.pause()
            time.sleep(3.5)  # idle: the keepalive ping (every 0.75 s, answered within 1.5 s) notices
            with pytest.raises(EnvTimeoutError, match="keepalive ping"):
                env.step({"message": "anyone?"})
            server.resume()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "keepalive" not in err


def test_async_hung_server_times_out_too() -> None:
    async def main(url: str) -> None:
        async with AsyncEnvClient(url, message_timeout_s=1.0) as env:
            await env.reset()
            server.pause()
            with pytest.raises(EnvTimeoutError):
                await env.step({"message": "x"})
            assert env.trajectory is not None and env.trajectory.status == "cut"

    with ServerProcess("echo") as server:
        asyncio.run(main(server.url))


def test_cancelling_the_batch_ends_every_episode_on_disk(running_server, tmp_path: Path) -> None:
    """The caller cancels ``run_episodes_async`` mid-run: each episode in flight is journalled as ``abandoned``,
    the writer is closed after the workers stopped, and the journal holds no open episode."""
    url = running_server("echo", max_sessions=8)
    journal = tmp_path / "j.jsonl"

    async def main() -> None:
        enough = asyncio.Event()
        calls = {"n": 0, "held": 0}

        async def policy(result: StepResult, traj: Trajectory) -> dict[str, Any]:
            calls["n"] += 1
            if calls["n"] >= 40:  # from here every worker is held mid-episode, so exactly 4 are in flight
                calls["held"] += 1
                if calls["held"] == 4:
                    enough.set()
                await asyncio.Event().wait()
            await asyncio.sleep(0.001)
            return {"message": f"m{len(traj.steps)}"}

        task = asyncio.create_task(
            run_episodes_async(url, policy, list(range(100)), concurrency=4, writer=journal, progress=False)
        )
        await enough.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    fds = _open_fds()
    asyncio.run(main())
    on_disk = read_trajectories(journal, open_episodes=True)
    assert all(t.ended for t in on_disk) and Counter(t.status for t in on_disk)["abandoned"] == 4
    assert all(t.error is not None and t.error.type == "CancelledError" for t in on_disk if t.status == "abandoned")
    assert _open_fds() == fds
