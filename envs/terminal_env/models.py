"""Wire models of the `terminal` environment (OpenEnv layout), defined beside its logic in ``server/models.py``."""

from .server.models import TerminalAction, TerminalObservation

__all__ = ["TerminalAction", "TerminalObservation"]
