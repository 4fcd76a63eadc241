"""Wire models of the `shell` environment (OpenEnv layout), defined beside its logic in ``server/models.py``."""

from .server.models import ShellAction, ShellObservation

__all__ = ["ShellAction", "ShellObservation"]
