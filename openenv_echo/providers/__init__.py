"""Providers start an environment server and hand back its base URL: a local process or a Docker container.

``with LocalProcessProvider("echo") as p: EnvClient(p.base_url)`` or ``EnvClient.from_provider(provider)``.
Failures raise ``ProviderError`` carrying the server's last log lines.
"""

from .base import ProviderError, ServerProvider
from .docker import DockerProvider, docker_client, engine_available
from .local import LocalProcessProvider

__all__ = [
    "DockerProvider",
    "LocalProcessProvider",
    "ProviderError",
    "ServerProvider",
    "docker_client",
    "engine_available",
]
