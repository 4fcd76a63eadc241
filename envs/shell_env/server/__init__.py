"""shell: a real bash in a locked-down container per episode, on tasks in Harbor's format (``tasks``)."""

from .models import ShellAction, ShellObservation
from .shell_environment import (
    DEFAULT_MAX_STEPS,
    OUTPUT_CAP_BYTES,
    ShellEnvironment,
    expert_actions,
    solution_actions,
    task_suite,
)

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
