"""Client of the `echo` environment: an openenv-echo ``EnvClient`` that records role-tagged trajectories."""

from __future__ import annotations

from typing import Any

from openenv_echo.client import EnvClient, StepResult
from openenv_echo.envs.echo import EchoAction


class EchoEnv(EnvClient):
    """``EnvClient`` for the `echo` environment, with a typed shortcut for its action.

    >>> with EchoEnv("http://127.0.0.1:8000") as env:  # doctest: +SKIP
    ...     env.reset(seed=1)
    ...     env.say(...)
    """

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        kwargs.setdefault("env_name", "echo")
        super().__init__(base_url, **kwargs)

    def say(self, message: str, **kwargs: Any) -> StepResult:
        """Send ``EchoAction(message=...)``; ``kwargs`` go to ``step`` (``action_text``, ...)."""
        return self.step(EchoAction(message=message), **kwargs)
