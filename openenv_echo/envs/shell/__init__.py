"""shell: a real bash in a locked-down container per episode, on tasks in Harbor's format (``tasks``)."""

from .environment import (
    DEFAULT_MAX_STEPS,
    OUTPUT_CAP_BYTES,
    ShellEnvironment,
    expert_actions,
    solution_actions,
    task_suite,
)
from .models import ShellAction, ShellObservation

__all__ = [
    "DEFAULT_MAX_STEPS",
    "OUTPUT_CAP_BYTES",
    "ShellAction",
    "ShellEnvironment",
    "ShellObservation",
    "expert_actions",
    "solution_actions",
    "task_suite",
]
