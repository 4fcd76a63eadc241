"""Client of the `terminal` environment: an openenv-echo ``EnvClient`` that records role-tagged trajectories."""

from typing import Any

from openenv_echo.client import StepResult
from openenv_echo.envs.package import PackageClient


class TerminalEnv(PackageClient):
    """``with TerminalEnv("http://127.0.0.1:8000") as env: env.reset(seed=1); env.run_command(...)``"""

    env = "terminal"

    def run_command(self, command: str, **kwargs: Any) -> StepResult:
        """Send the env's action with ``command``; ``kwargs`` go to ``step`` (``action_text``, ...)."""
        return self.act(command=command, step_kwargs=kwargs)
