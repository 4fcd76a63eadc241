"""Resets of BLOCKING envs queue for ``RESET_SLOTS`` while steps never wait; the queue is not charged to a reset."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from openenv_echo.server import protocol
from openenv_echo.server.limits import ServerLimits
from openenv_echo.server.protocol import EnvDriver
from tests.server.faulty_envs import SlowResetEnvironment


def spans(results: list[tuple[object, bool]]) -> list[tuple[float, float]]:
    return sorted(tuple(map(float, obs.text.split())) for obs, _ in results)  # type: ignore[attr-defined]


def test_resets_run_one_slot_at_a_time_and_queueing_is_not_their_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "RESET_SLOTS", 1)
    driver = EnvDriver(SlowResetEnvironment, limits=ServerLimits(reset_timeout_s=1.0))

    async def main() -> list[tuple[float, float]]:
        envs = [await driver.new_env() for _ in range(3)]
        try:
            # the third reset waits 2 x 0.6 s for the slot, longer than its 1 s budget, and still succeeds
            return spans(await asyncio.gather(*(driver.reset(env, {"hold": 0.6}) for env in envs)))
        finally:
            for env in envs:
                env.close()

    ran = asyncio.run(main())
    assert len(ran) == 3
    for (_, end), (start, _) in itertools.pairwise(ran):
        assert end <= start  # never two resets at once


def test_a_step_does_not_wait_behind_queued_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "RESET_SLOTS", 1)
    driver = EnvDriver(SlowResetEnvironment, limits=ServerLimits(reset_timeout_s=10.0))

    async def main() -> tuple[list[tuple[float, float]], float]:
        stepper, *resetters = [await driver.new_env() for _ in range(3)]
        try:
            await driver.reset(stepper, {})
            resets = asyncio.gather(*(driver.reset(env, {"hold": 1.0}) for env in resetters))
            await asyncio.sleep(0.2)  # both resets are in: one holds the slot, one queues
            stepped = float((await driver.step(stepper, {"mode": "clock"})).text)
            return spans(await resets), stepped
        finally:
            for env in (stepper, *resetters):
                env.close()

    ran, stepped = asyncio.run(main())
    assert stepped < ran[1][0]  # the step ran while the second reset was still queued
    assert ran[0][1] <= ran[1][0]
