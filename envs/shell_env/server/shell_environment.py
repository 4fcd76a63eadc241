"""``ShellEnvironment``: a real bash in a locked-down container per episode, on a task in Harbor's format.

Reset picks the task (``task`` by name, else the seed's, as the other envs' splits) and hands the session a fresh
container of the task's image (``sandbox``: no network, unprivileged, no capabilities for the agent, pids, memory,
CPU and disk limits from ``task.toml``); each step runs one command line in the episode's shell under the task's
per-command wall time and the per-step output cap; ``submit`` (or the step limit) runs the task's tests in the
container and ends the episode with their reward. The container is removed when the episode ends, on the next
reset, and when the session closes (disconnect, idle timeout, server shutdown). Roles: ``render``.

All Docker work runs on the runtime's threads: a session waiting on its command never holds up another.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from openenv_echo.envs.splits import TASK_SPLITS
from openenv_echo.server.environment import EnvError, Environment, MaxSteps
from openenv_echo.server.tools import EnvTool
from openenv_echo.wire import ErrorCode, Segment, warning

from . import runtime as runtime_module
from .instances import instance_task
from .models import SUBMIT, CommandArguments, ShellAction, ShellObservation, SubmitArguments
from .render import CommandResult, echo_segment, reset_segments, step_segments, verdict_segment
from .runtime import EngineUnavailable, ShellRuntime
from .sandbox import Sandbox, SandboxLost
from .tasks import SUITE_DIR, HarborTask, TaskSuite, load_suite

DEFAULT_MAX_STEPS = 50
OUTPUT_CAP_BYTES = 16384
"""What one step shows of a command's output (stdout and stderr together); the rest is counted, not shown."""
READINESS_TTL_S = 5.0
"""How long a readiness answer (the engine's ping) is reused."""
ENGINE_PING_S = 1.0
"""How long readiness waits for the Docker engine to answer a ping (the answer comes within the 2 s a readiness probe
of deploy/kubernetes/shell.yaml allows)."""
TASKS_VARIABLE = "OPENENV_ECHO_SHELL_TASKS"
"""Environment variable naming the directory of Harbor tasks a server runs (default: the shipped suite)."""

CommandTimeout = Annotated[
    float, Field(gt=0, le=600, description="Wall time of each command in s (at most the task's own limit).")
]


@functools.cache
def _suite(root: str) -> TaskSuite:
    return load_suite(Path(root))


def task_suite() -> TaskSuite:
    """The suite this process serves: ``$OPENENV_ECHO_SHELL_TASKS`` or the shipped one."""
    return _suite(os.environ.get(TASKS_VARIABLE) or str(SUITE_DIR))


def solution_actions(task: HarborTask) -> list[dict[str, str]]:
    """The task's reference solution as one command (``solution/solve.sh`` fed to bash), then ``submit``."""
    if task.solution is None:
        return [{"command": SUBMIT}]
    script = task.solution.read_text(encoding="utf-8").rstrip()
    return [
        {"command": f"bash <<'__OPENENV_ECHO_SOLUTION__'\n{script}\n__OPENENV_ECHO_SOLUTION__"},
        {"command": SUBMIT},
    ]


def task_for_seed(seed: int) -> HarborTask:
    """The task of ``seed``. Training seeds below the number of shipped training tasks name those; every later
    training seed of the shipped suite names a fresh generated instance (``instances``: its own inputs and
    answers, so none can be memorized across epochs); validation and test seeds name the shipped held-out tasks
    (``TaskSuite.for_seed``)."""
    suite = task_suite()
    shipped = len(suite.split("train"))
    if seed in TASK_SPLITS["train"] and seed >= shipped and suite.root == SUITE_DIR.resolve():
        return instance_task(seed - shipped)
    return suite.for_seed(seed)


def expert_actions(seed: int) -> list[dict[str, str]]:
    """The registry's scripted expert: ``solution_actions`` of the seed's task."""
    return solution_actions(task_for_seed(seed))


def _rejection(command: str) -> str | None:
    bad = next((c for c in command if c == "\0" or 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is None:
        return None
    what = "a NUL character" if bad == "\0" else "a lone surrogate (not valid Unicode text)"
    return f"[harness: command rejected: it contains {what}, which bash cannot take; nothing was run]\n"


class ShellEnvironment(Environment[ShellAction, ShellObservation]):
    """A real bash in a locked-down container, on tasks in Harbor's format; `submit` runs the task's tests."""

    name = "shell"
    action_type = ShellAction
    observation_type = ShellObservation
    TASK_SEEDS = TASK_SPLITS
    # a step runs a real command (the task's wall time, 30 s by default; the tests up to their own timeout, and a
    # first reset may build the task's image): the env bounds each itself, the server's timeout is the backstop.
    # Each session holds a container (512 MB by default): 8 sessions per server unless told otherwise.
    DEFAULT_LIMITS = {"step_timeout_s": 1900.0, "max_sessions": 8}
    TOOLS = (
        EnvTool(
            name="run_command",
            description="Run a bash command line in the task's container; returns its output and exit status.",
            arguments=CommandArguments,
            action=lambda a: ShellAction(command=a.command),
            result=lambda obs: {
                "output": obs.output,
                "exit_code": obs.exit_code,
                "cwd": obs.cwd,
                "truncated": obs.truncated,
                "timed_out": obs.timed_out,
            },
        ),
        EnvTool(
            name="submit",
            description="End the episode: the task's tests check the container and give the reward.",
            arguments=SubmitArguments,
            action=lambda a: ShellAction(command=SUBMIT),
            result=lambda obs: {"reward": obs.reward, "done": obs.done},
        ),
    )

    _readiness: tuple[float, str | None] = (float("-inf"), None)
    """When readiness was last checked (event-loop time) and its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.task: HarborTask | None = None
        self.sandbox: Sandbox | None = None
        self.seed: int | None = None
        self.max_steps = DEFAULT_MAX_STEPS
        self.command_timeout_s = 0.0
        self.verifier_output: str | None = None
        """The end of what the last episode's tests printed (``GET /state``'s ``verifier_output``; never in an
        observation: it often reveals the expected answer)."""
        self._closed = False

    # -- server life cycle ---------------------------------------------------------------------------------
    @classmethod
    async def startup(cls) -> None:
        """Take a share of the process's runtime and remove containers a gone server left (if an engine answers:
        without one the server still starts, and resets say what is missing)."""
        rt = runtime_module.attach()
        try:
            await rt.call(rt.remove_orphans)
        except EngineUnavailable:
            pass

    @classmethod
    async def not_ready(cls) -> str | None:
        """The Docker engine does not answer a ping (within ``ENGINE_PING_S``): a reset would fail. Cached for
        ``READINESS_TTL_S``, so frequent probes cost the engine one ping each period."""
        from openenv_echo.providers.docker import engine_problem  # imported on use, as in the runtime

        now = asyncio.get_running_loop().time()
        if now - cls._readiness[0] < READINESS_TTL_S:
            return cls._readiness[1]
        try:
            problem = await asyncio.wait_for(asyncio.to_thread(engine_problem, ENGINE_PING_S), ENGINE_PING_S + 1)
        except TimeoutError:
            problem = f"the Docker engine did not answer a ping within {ENGINE_PING_S:g} s"
        reason = problem and f"the shell env needs a Docker engine: {problem}"
        cls._readiness = (asyncio.get_running_loop().time(), reason)
        return reason

    @classmethod
    async def shutdown(cls) -> None:
        rt = runtime_module.detach()
        if rt is not None:
            await asyncio.get_running_loop().run_in_executor(None, rt.close)

    def close(self) -> None:
        self._closed = True
        self._drop_sandbox()

    # -- reset ---------------------------------------------------------------------------------------------
    def _reset(
        self,
        seed: int | None,
        task: str | None = None,
        max_steps: MaxSteps = DEFAULT_MAX_STEPS,
        command_timeout_s: CommandTimeout | None = None,
    ) -> ShellObservation:
        return asyncio.run(self._reset_async(seed, task, max_steps, command_timeout_s))

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> ShellObservation:
        return self._begin(await self._reset_async(seed, **kwargs), episode_id)

    async def _reset_async(
        self,
        seed: int | None,
        task: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        command_timeout_s: float | None = None,
    ) -> ShellObservation:
        suite = task_suite()
        if task is not None:
            try:
                chosen = suite.by_name(task)
            except KeyError:
                names = ", ".join(t.name for t in suite.tasks)
                raise EnvError(
                    f"unknown task {task!r}; this server's tasks: {names}", ErrorCode.VALIDATION_ERROR
                ) from None
        else:
            if seed is None:
                seed = random.SystemRandom().randrange(TASK_SPLITS["train"].stop)
            try:
                chosen = task_for_seed(seed)
            except KeyError as e:
                raise EnvError(str(e).strip("'\""), ErrorCode.VALIDATION_ERROR) from None
        if command_timeout_s is not None and command_timeout_s > chosen.limits.command_timeout_s:
            raise EnvError(
                f"command_timeout_s={command_timeout_s:g} is over task {chosen.name}'s limit of "
                f"{chosen.limits.command_timeout_s:g} s",
                ErrorCode.VALIDATION_ERROR,
            )
        previous, self.sandbox = self.sandbox, None
        self.task, self.seed, self.max_steps, self.verifier_output = chosen, seed, max_steps, None
        self.command_timeout_s = command_timeout_s or chosen.limits.command_timeout_s
        try:
            self.sandbox = await self._acquire(chosen)
        finally:  # removed once the new one is ready: the engine's work on it would slow the reset down
            if previous is not None:
                runtime_module.runtime().release_later(previous)
        limits = chosen.limits
        return ShellObservation(
            segments=reset_segments(chosen.instruction, chosen.workdir),
            cwd=chosen.workdir,
            steps_left=max_steps,
            task=chosen.name,
            metadata={
                "task": chosen.name,
                "split": chosen.split,
                "seed": seed,
                "container": self.sandbox.container.id[:12],
                "limits": {
                    "cpus": limits.cpus,
                    "memory_mb": limits.memory_mb,
                    "storage_mb": limits.storage_mb,
                    "pids": limits.pids,
                    "command_timeout_s": self.command_timeout_s,
                    "verifier_timeout_s": limits.verifier_timeout_s,
                    "output_cap_bytes": OUTPUT_CAP_BYTES,
                },
            },
        )

    async def _acquire(self, task: HarborTask) -> Sandbox:
        rt = runtime_module.runtime()
        future = rt.executor.submit(rt.acquire, task)
        try:
            sandbox = await asyncio.wrap_future(future)
        except asyncio.CancelledError:  # the reset was abandoned: whatever the thread makes is removed
            future.add_done_callback(lambda f: None if f.cancelled() or f.exception() else rt.release_later(f.result()))
            raise
        except EngineUnavailable as e:
            raise EnvError(f"the shell env needs a Docker engine: {e}") from None
        except Exception as e:
            raise EnvError(f"could not start task {task.name}'s container: {type(e).__name__}: {e}") from None
        if self._closed:
            rt.release_later(sandbox)
            raise EnvError("the session closed during the reset")
        return sandbox

    def _drop_sandbox(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            runtime_module.runtime().release_later(sandbox)

    # -- step ----------------------------------------------------------------------------------------------
    def _step(self, action: ShellAction) -> ShellObservation:
        return asyncio.run(self._step_async(action))

    async def step_async(self, action: ShellAction) -> ShellObservation:
        self._check_steppable()
        return self._counted(await self._step_async(action))

    async def _step_async(self, action: ShellAction) -> ShellObservation:
        task, sandbox = self.task, self.sandbox
        if task is None or sandbox is None:
            raise EnvError("this episode's container is gone: send a reset", ErrorCode.EPISODE_NOT_STARTED)
        command = action.command
        steps_left = max(self.max_steps - (self._step_count + 1), 0)
        if command.strip() == SUBMIT:
            return await self._finish([echo_segment(sandbox.cwd, command)], "submitted")
        rejection = _rejection(command)
        if rejection is not None:
            segments = [echo_segment(sandbox.cwd, command.encode("utf-8", "replace").decode()), warning(rejection)]
            obs = ShellObservation(segments=segments, cwd=sandbox.cwd, steps_left=steps_left, task=task.name)
        else:
            cwd = sandbox.cwd
            result = await self._in_sandbox(sandbox.run, command, self.command_timeout_s, OUTPUT_CAP_BYTES)
            obs = self._observation(cwd, command, result, steps_left, task)
        if steps_left == 0:
            return await self._finish(obs.segments, f"step limit ({self.max_steps}) reached: the tests ran", obs)
        return obs

    def _observation(
        self, cwd: str, command: str, result: CommandResult, steps_left: int, task: HarborTask
    ) -> ShellObservation:
        metadata: dict[str, Any] = {}
        if result.background:
            metadata["background"] = [{"pid": pid, "name": name} for pid, name in result.background]
        if result.oom_kills:
            metadata["oom_kills"] = result.oom_kills
        return ShellObservation(
            segments=step_segments(cwd, command, result),
            output=result.output,
            exit_code=result.exit_status if result.ending == "exited" else None,
            cwd=result.cwd,
            truncated=result.truncated,
            timed_out=result.ending == "timeout",
            steps_left=steps_left,
            task=task.name,
            reward=0.0,
            metadata=metadata,
        )

    async def _finish(
        self, segments: list[Segment], why: str, last: ShellObservation | None = None
    ) -> ShellObservation:
        """Run the task's tests, end the episode with their reward, remove the container."""
        task, sandbox = self.task, self.sandbox
        assert task is not None and sandbox is not None
        env = {k: str(v) for k, v in (task.config.get("verifier", {}).get("env") or {}).items()}
        verdict = await self._in_sandbox(
            sandbox.verify, task.tests_dir, task.limits.verifier_timeout_s, env, task.workdir
        )
        self._drop_sandbox()
        reason = why if verdict.problem is None else f"{why}; {verdict.problem}"
        summary: dict[str, Any] = {"reward": verdict.reward, "seconds": round(verdict.seconds, 3)}
        if verdict.problem is not None:
            summary["problem"] = verdict.problem
        metadata: dict[str, Any] = {**(last.metadata if last is not None else {}), "verifier": summary}
        # what the tests printed often names the expected answer: kept off the observation (which trainers feed
        # the policy and trajectories save), in the session's state only (``verifier_output``)
        self.verifier_output = verdict.output
        base = last.model_dump(exclude={"segments", "text", "reward", "done", "metadata", "tokens"}) if last else {}
        base.setdefault("task", task.name)
        base.setdefault("cwd", sandbox.cwd)
        return ShellObservation(
            **base,
            segments=[*segments, verdict_segment(verdict.reward, reason)],
            reward=verdict.reward,
            done=True,
            metadata=metadata,
        )

    async def _in_sandbox(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the runtime's threads; a dead container becomes ``SANDBOX_LOST`` (its logs attached)
        and any other failure an ``EXECUTION_ERROR``; either way the episode's container is dropped."""
        rt: ShellRuntime = runtime_module.runtime()
        try:
            return await rt.call(fn, *args)
        except SandboxLost as e:
            self._drop_sandbox()
            raise EnvError(str(e), ErrorCode.SANDBOX_LOST, logs=e.logs, status=e.status) from None
        except Exception as e:
            self._drop_sandbox()
            raise EnvError(f"the container failed: {type(e).__name__}: {e}; send a reset") from None

    def extra_state(self) -> dict[str, Any]:
        if self.task is None:
            return {}
        return {
            "task": self.task.name,
            "seed": self.seed,
            "max_steps": self.max_steps,
            "cwd": self.sandbox.cwd if self.sandbox is not None else None,
            "container": self.sandbox.container.id[:12] if self.sandbox is not None else None,
            "verifier_output": self.verifier_output,
        }
