"""Wire models of the `echo` environment, re-exported from ``openenv_echo.envs.echo`` (OpenEnv layout)."""

from openenv_echo.envs.echo import EchoAction, EchoObservation

__all__ = ["EchoAction", "EchoObservation"]
