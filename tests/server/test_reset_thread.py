"""A BLOCKING env's reset runs on its worker's reset thread, steps on the main thread, and no session's step waits
for other sessions' resets."""

from __future__ import annotations

import asyncio

from openenv_echo.server.limits import ServerLimits
from openenv_echo.server.protocol import EnvDriver
from tests.server.faulty_envs import SlowResetEnvironment


def test_resets_and_steps_run_on_different_threads_of_the_worker() -> None:
    driver = EnvDriver(SlowResetEnvironment)

    async def main() -> list[tuple[str, str]]:
        env = await driver.new_env()
        try:
            threads = []
            for _ in range(3):  # the same two threads episode after episode
                obs, _ = await driver.reset(env, {})
                step = await driver.step(env, {"mode": "thread"})
                threads.append((obs.text.split()[2], step.text.strip()))
            return threads
        finally:
            env.close()

    threads = asyncio.run(main())
    assert len(threads) == 3
    assert {reset for reset, _ in threads} == {"openenv-echo-reset_0"}
    assert {step for _, step in threads} == {"MainThread"}


def test_a_step_does_not_wait_behind_other_sessions_resets() -> None:
    driver = EnvDriver(SlowResetEnvironment, limits=ServerLimits(reset_timeout_s=10.0))

    async def main() -> tuple[list[float], float]:
        stepper, *resetters = [await driver.new_env() for _ in range(3)]
        try:
            await driver.reset(stepper, {})
            resets = asyncio.gather(*(driver.reset(env, {"hold": 1.0}) for env in resetters))
            await asyncio.sleep(0.2)  # both resets are running
            stepped = float((await driver.step(stepper, {"mode": "clock"})).text)
            return [float(obs.text.split()[1]) for obs, _ in await resets], stepped
        finally:
            for env in (stepper, *resetters):
                env.close()

    reset_ends, stepped = asyncio.run(main())
    assert len(reset_ends) == 2
    assert stepped < min(reset_ends)  # the step ran while both resets were still building
