"""terminal: incident triage in a read-only bash-like shell over a seeded virtual Linux host."""

from .expert import NON_EXPERTS, expert_actions, hasty_guess, nginx_blamer, random_commands
from .machine import INCIDENT_KINDS, generate_machine
from .models import TerminalAction, TerminalObservation
from .terminal_environment import TerminalEnvironment

__all__ = [
    "INCIDENT_KINDS",
    "NON_EXPERTS",
    "TerminalAction",
    "TerminalEnvironment",
    "TerminalObservation",
    "expert_actions",
    "generate_machine",
    "hasty_guess",
    "nginx_blamer",
    "random_commands",
]
