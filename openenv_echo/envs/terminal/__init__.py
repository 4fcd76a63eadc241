"""terminal: incident triage in a read-only bash-like shell over a seeded virtual Linux host."""

from .environment import TerminalEnvironment
from .expert import NON_EXPERTS, expert_commands, hasty_guess, nginx_blamer, random_commands
from .machine import INCIDENT_KINDS, generate_machine
from .models import TerminalAction, TerminalObservation

__all__ = [
    "INCIDENT_KINDS",
    "NON_EXPERTS",
    "TerminalAction",
    "TerminalEnvironment",
    "TerminalObservation",
    "expert_commands",
    "generate_machine",
    "hasty_guess",
    "nginx_blamer",
    "random_commands",
]


def demo_actions(seed: int) -> list[dict[str, str]]:
    """A scripted episode for ``openenv-echo quickstart terminal`` (the expert's)."""
    return expert_commands(seed)
