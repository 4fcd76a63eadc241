"""Providers start an environment server and hand back its base URL: a local process, a Docker container or a Ray
actor (``RayProvider``, imported on first use so that importing this package never imports Ray).

``with LocalProcessProvider("echo") as p: EnvClient(p.base_url)`` or ``EnvClient.from_provider(provider)``.
Failures raise ``ProviderError`` carrying the server's last log lines.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from .base import ProviderError, ServerProvider
from .docker import DockerProvider, docker_client, engine_available
from .local import LocalProcessProvider

if TYPE_CHECKING:
    from .ray import RayProvider

_LAZY = {"RayProvider": "openenv_echo.providers.ray"}  # needs the `fleet` extra (Ray)


__getattr__ = lazy_getattr(globals(), _LAZY, __name__)


__all__ = [
    "DockerProvider",
    "LocalProcessProvider",
    "ProviderError",
    "RayProvider",
    "ServerProvider",
    "docker_client",
    "engine_available",
]
