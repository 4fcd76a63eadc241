"""OpenEnv package of the openenv-echo `sql` environment."""

from .client import SqlEnv
from .models import SqlAction, SqlObservation

__all__ = ["SqlAction", "SqlEnv", "SqlObservation"]
