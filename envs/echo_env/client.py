"""Client of the `echo` environment: an openenv-echo ``EnvClient`` that records role-tagged trajectories."""

from typing import Any

from openenv_echo.client import StepResult
from openenv_echo.envs.package import PackageClient


class EchoEnv(PackageClient):
    """``with EchoEnv("http://127.0.0.1:8000") as env: env.reset(seed=1); env.say(...)``"""

    env = "echo"

    def say(self, message: str, **kwargs: Any) -> StepResult:
        """Send the env's action with ``message``; ``kwargs`` go to ``step`` (``action_text``, ...)."""
        return self.act(message=message, step_kwargs=kwargs)
