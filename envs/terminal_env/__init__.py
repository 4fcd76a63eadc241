"""OpenEnv package of the openenv-echo `terminal` environment."""

from .client import TerminalEnv
from .models import TerminalAction, TerminalObservation

__all__ = ["TerminalAction", "TerminalEnv", "TerminalObservation"]
