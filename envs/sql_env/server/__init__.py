"""sql: data questions over a seeded in-memory SQLite database, read-only and bounded."""

from .database import generate_database
from .expert import NON_EXPERTS, expert_actions, explorer, guesser
from .models import SqlAction, SqlObservation
from .sql_environment import SqlEnvironment
from .tasks import TEMPLATE_NAMES, make_task

__all__ = [
    "NON_EXPERTS",
    "TEMPLATE_NAMES",
    "SqlAction",
    "SqlEnvironment",
    "SqlObservation",
    "expert_actions",
    "explorer",
    "generate_database",
    "guesser",
    "make_task",
]
