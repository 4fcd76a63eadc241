"""Client of the `terminal` environment: an openenv-echo ``EnvClient`` that records role-tagged trajectories."""

from __future__ import annotations

from typing import Any

from openenv_echo.client import EnvClient, StepResult
from openenv_echo.envs.terminal import TerminalAction


class TerminalEnv(EnvClient):
    """``EnvClient`` for the `terminal` environment, with a typed shortcut for its action.

    >>> with TerminalEnv("http://127.0.0.1:8000") as env:  # doctest: +SKIP
    ...     env.reset(seed=1)
    ...     env.run_command(...)
    """

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        kwargs.setdefault("env_name", "terminal")
        super().__init__(base_url, **kwargs)

    def run_command(self, command: str, **kwargs: Any) -> StepResult:
        """Send ``TerminalAction(command=...)``; ``kwargs`` go to ``step`` (``action_text``, ...)."""
        return self.step(TerminalAction(command=command), **kwargs)
