"""Wire models of the `shell` environment, re-exported from ``openenv_echo.envs.shell`` (OpenEnv layout)."""

from openenv_echo.envs.shell import ShellAction, ShellObservation

__all__ = ["ShellAction", "ShellObservation"]
