"""Imported once by the workers' fork server: the reference envs, warmed up and frozen so forks share their pages."""

import gc

import openenv_echo.server.mcp
import openenv_echo.server.workers  # noqa: F401
from openenv_echo.envs.sql import SqlEnvironment
from openenv_echo.envs.terminal import TerminalEnvironment

for _cls in (TerminalEnvironment, SqlEnvironment):
    _env = _cls()
    _env.reset(seed=0)  # fills lazy caches (compiled patterns, name tables) once, for every fork
    _env.close()
del _cls, _env
gc.collect()
gc.freeze()  # the collector no longer walks (and so copies) the preloaded objects in every worker
