"""Client of the `sql` environment: an openenv-echo ``EnvClient`` that records role-tagged trajectories."""

from typing import Any

from openenv_echo.client import StepResult
from openenv_echo.envs.package import PackageClient


class SqlEnv(PackageClient):
    """``with SqlEnv("http://127.0.0.1:8000") as env: env.reset(seed=1); env.query(...)``"""

    env = "sql"

    def query(self, query: str, **kwargs: Any) -> StepResult:
        """Send the env's action with ``query``; ``kwargs`` go to ``step`` (``action_text``, ...)."""
        return self.act(query=query, step_kwargs=kwargs)
