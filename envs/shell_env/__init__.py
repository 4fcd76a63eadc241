"""OpenEnv package of the openenv-echo `shell` environment."""

from .client import ShellEnv
from .models import ShellAction, ShellObservation

__all__ = ["ShellAction", "ShellEnv", "ShellObservation"]
