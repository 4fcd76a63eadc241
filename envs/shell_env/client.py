"""Client of the `shell` environment: an openenv-echo ``EnvClient`` that records role-tagged trajectories."""

from typing import Any

from openenv_echo.client import StepResult
from openenv_echo.envs.package import PackageClient


class ShellEnv(PackageClient):
    """``with ShellEnv("http://127.0.0.1:8000") as env: env.reset(task="count-word"); env.run_command("ls")``"""

    env = "shell"

    def run_command(self, command: str, **kwargs: Any) -> StepResult:
        """Run one bash command line; ``kwargs`` go to ``step`` (``action_text``, ...)."""
        return self.act(command=command, step_kwargs=kwargs)

    def submit(self, **kwargs: Any) -> StepResult:
        """End the episode: the task's tests run in the container and give the reward."""
        return self.act(command="submit", step_kwargs=kwargs)
