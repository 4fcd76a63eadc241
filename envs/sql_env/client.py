"""Client of the `sql` environment: an openenv-echo ``EnvClient`` that records role-tagged trajectories."""

from __future__ import annotations

from typing import Any

from openenv_echo.client import EnvClient, StepResult
from openenv_echo.envs.sql import SqlAction


class SqlEnv(EnvClient):
    """``EnvClient`` for the `sql` environment, with a typed shortcut for its action.

    >>> with SqlEnv("http://127.0.0.1:8000") as env:  # doctest: +SKIP
    ...     env.reset(seed=1)
    ...     env.query(...)
    """

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        kwargs.setdefault("env_name", "sql")
        super().__init__(base_url, **kwargs)

    def query(self, query: str, **kwargs: Any) -> StepResult:
        """Send ``SqlAction(query=...)``; ``kwargs`` go to ``step`` (``action_text``, ...)."""
        return self.step(SqlAction(query=query), **kwargs)
