"""Wire models of the `terminal` environment, re-exported from ``openenv_echo.envs.terminal`` (OpenEnv layout)."""

from openenv_echo.envs.terminal import TerminalAction, TerminalObservation

__all__ = ["TerminalAction", "TerminalObservation"]
