"""The reference environments, by name (``openenv-echo serve NAME``)."""

from __future__ import annotations

from importlib import import_module

from ..server.environment import Environment

ENVIRONMENTS: dict[str, str] = {
    "echo": "openenv_echo.envs.echo:EchoEnvironment",
    "terminal": "openenv_echo.envs.terminal:TerminalEnvironment",
    "sql": "openenv_echo.envs.sql:SqlEnvironment",
}


def load_env(name: str) -> type[Environment]:
    """The environment class registered as ``name``, or one given as ``module:Class``."""
    target = ENVIRONMENTS.get(name, name)
    if ":" not in target:
        raise KeyError(f"unknown environment {name!r}; known: {sorted(ENVIRONMENTS)} (or pass module:Class)")
    module, _, attr = target.partition(":")
    cls = getattr(import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise TypeError(f"{target} is not an openenv_echo Environment subclass")
    return cls
