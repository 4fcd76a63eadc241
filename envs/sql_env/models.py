"""Wire models of the `sql` environment (OpenEnv layout), defined beside its logic in ``server/models.py``."""

from .server.models import SqlAction, SqlObservation

__all__ = ["SqlAction", "SqlObservation"]
