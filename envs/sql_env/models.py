"""Wire models of the `sql` environment, re-exported from ``openenv_echo.envs.sql`` (OpenEnv layout)."""

from openenv_echo.envs.sql import SqlAction, SqlObservation

__all__ = ["SqlAction", "SqlObservation"]
