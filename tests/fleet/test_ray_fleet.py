"""RayProvider + EnvPool on a real two-node local Ray cluster: placement, episodes, a replica killed mid-run."""

from __future__ import annotations

import os
import signal
import time

import pytest

from openenv_echo import EnvClient
from openenv_echo.client.errors import ConnectionLostError
from openenv_echo.client.pool import EnvPool, NoReplicaError
from openenv_echo.envs import EnvSpec, spec_of
from openenv_echo.providers.base import ProviderError

pytestmark = pytest.mark.fleet

from openenv_echo.providers.ray import RayProvider  # noqa: E402


def _episode(url: str, text: str) -> str:
    with EnvClient(url, message_timeout_s=20) as env:
        env.reset(seed=0)
        return env.step({"message": text}).text


@pytest.fixture(scope="module")
def fleet(ray_cluster: str):
    provider = RayProvider(spec_of("echo"), replicas=2, address=ray_cluster, num_cpus=1, max_sessions=8)
    with provider:
        yield provider


def test_replicas_spread_over_both_nodes_and_serve(fleet: RayProvider) -> None:
    urls = fleet.urls
    assert len(urls) == 2 and len(set(urls)) == 2 and all(u.startswith("http://127.0.0.1:") for u in urls)
    assert len(set(fleet.placement().values())) == 2, "SPREAD placement should use both nodes of the cluster"
    for url in urls:
        assert "hello" in _episode(url, "hello")
    fleet.check()  # all alive: no error


def test_pool_balances_leases(fleet: RayProvider) -> None:
    pool = EnvPool(fleet)
    held = [pool.acquire() for _ in range(6)]
    assert sorted(pool.sessions().values()) == [3, 3] and set(held) == set(fleet.urls)
    for url in held:
        pool.release(url)
    assert set(pool.sessions().values()) == {0}


def test_replica_killed_mid_episode_is_reported_replaced_and_routed_around(fleet: RayProvider) -> None:
    pool = EnvPool(fleet)
    victim = pool.acquire()
    pid = fleet.replica_pids()[victim]
    client = EnvClient(victim, message_timeout_s=10)
    client.reset(seed=1)
    client.step({"message": "before"})
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ConnectionLostError):
        for _ in range(50):  # the next frame hits the closed socket
            client.step({"message": "after"})
            time.sleep(0.05)
    client.close()
    with pytest.raises(ProviderError, match="1 of 2 replicas dead"):
        fleet.check()
    pool.release(victim)
    pool.mark_dead(victim)  # -> provider.heal(): a new replica replaces it
    assert victim not in pool.live and len(pool.live) == 2 and pool.replaced[victim] in pool.live
    fleet.check()
    for _ in range(4):  # every new episode lands on a live replica
        with pool.lease() as url:
            assert url != victim and "again" in _episode(url, "again")


def test_pool_with_no_live_replica_raises_typed_error() -> None:
    pool = EnvPool(["http://127.0.0.1:9", "http://127.0.0.1:10"])
    pool.mark_dead("http://127.0.0.1:9")
    pool.mark_dead("http://127.0.0.1:10")
    with pytest.raises(NoReplicaError, match="no live replica"):
        pool.acquire()


def test_unknown_env_fails_with_the_replica_error(ray_cluster: str) -> None:
    missing = EnvSpec("no-such-env", "no_such_env_package:Env", "0")
    with pytest.raises(ProviderError, match=r"did not start(.|\n)*no_such_env_package"):
        RayProvider(missing, replicas=1, address=ray_cluster, num_cpus=0.5).start()


def test_run_episodes_over_the_fleet_survives_a_replica_killed_mid_run(fleet: RayProvider, tmp_path) -> None:
    import asyncio

    from openenv_echo import run_episodes
    from openenv_echo.trajectory import read_trajectories

    victim, pid = next(iter(fleet.replica_pids().items()))
    calls = 0

    async def policy(result, trajectory):  # kills one replica once the run is well under way
        nonlocal calls
        calls += 1
        if calls == 20:
            os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.01)
        return {"message": f"step {len(trajectory.steps)}"}

    out = run_episodes(
        fleet, policy, list(range(16)), concurrency=4, max_steps=20, on_error="retry", progress=False,
        writer=tmp_path / "j.jsonl",
    )  # fmt: skip
    assert len(out) == 16 and set(out.statuses()) <= {"done", "truncated"}, out.statuses()
    assert out.restarts >= 1  # the episodes cut on the killed replica were restarted elsewhere
    assert victim not in fleet.urls and len(fleet.urls) == 2  # replaced
    fleet.check()
    finished = [t for t in read_trajectories(tmp_path / "j.jsonl") if t.status in ("done", "truncated")]
    assert sorted(t.metadata["seed"] for t in finished) == list(range(16))
