"""The server reads its workers' pipes without blocking: a worker stalled halfway through writing its reply (as a
low-priority worker descheduled mid-write is) holds up its own session only."""

from __future__ import annotations

import asyncio

from openenv_echo.server.protocol import EnvDriver
from tests.server.faulty_envs import SlowResetEnvironment


def test_a_worker_stalled_mid_reply_does_not_hold_up_other_sessions() -> None:
    driver = EnvDriver(SlowResetEnvironment)

    async def main() -> tuple[float, list[float]]:
        stalled, bystander = await driver.new_env(), await driver.new_env()
        try:
            for env in (stalled, bystander):
                await driver.reset(env, {})
            slow = asyncio.ensure_future(driver.step(stalled, {"mode": "half_reply", "seconds": 1.2}))
            await asyncio.sleep(0.3)  # the stalled worker has written the first bytes of its frame by now
            clocks = [float((await driver.step(bystander, {"mode": "clock"})).text) for _ in range(3)]
            return float((await slow).text), clocks
        finally:
            stalled.close()
            bystander.close()

    stalled_started, bystander_clocks = asyncio.run(main())
    assert len(bystander_clocks) == 3
    # the bystander's three steps ran while the stalled reply was still incomplete (it completes 1.2 s after it began)
    assert max(bystander_clocks) < stalled_started + 1.2
