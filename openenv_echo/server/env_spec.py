"""``EnvSpec``: what a servable environment is (a name, where its class lives, its compose ports, whether its
sessions need a Docker engine), and ``load_target`` that imports a ``module:Class`` environment.

It sits in the server framework so that everything that starts servers (the CLI, ``providers``) is handed a spec
and imports no registry: the registry (``openenv_echo.envs``) is one table of these, above them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from .environment import Environment


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment: its name, where its class lives, its docker-compose host port range, and whether
    its sessions need a Docker engine (``needs_docker``: the shell env runs a container per episode)."""

    name: str
    target: str  # "module:Class"
    ports: str  # host ports of its compose service, e.g. "8101-8110"
    needs_docker: bool = False

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def package(self) -> str:
        """Directory of its OpenEnv package under ``envs/``."""
        return f"{self.name}_env"

    def load(self) -> type[Environment[Any, Any]]:
        return load_target(self.target, package=self.package)

    def expert_actions(self, seed: int) -> list[dict[str, Any]]:
        """The env's scripted expert episode for ``seed``."""
        self.load()  # the install hint when its package is missing
        return list(import_module(self.module).expert_actions(seed))


def load_target(target: str, *, package: str | None = None) -> type[Environment[Any, Any]]:
    """The ``Environment`` subclass at ``module:Class``; ``package`` names the OpenEnv package under ``envs/`` that
    provides it, for the install hint when it is missing."""
    module, _, attr = target.partition(":")
    try:
        imported = import_module(module)
    except ModuleNotFoundError as e:
        top = module.partition(".")[0]
        if package is None or e.name != top:
            raise
        raise ModuleNotFoundError(
            f"{target} lives in the OpenEnv package envs/{package}, which is not installed: "
            f"pip install -e envs/{package} (make setup installs every env package)",
            name=e.name,
        ) from e
    cls = getattr(imported, attr)
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise TypeError(f"{target} is not an openenv_echo Environment subclass")
    return cls
