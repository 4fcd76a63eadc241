"""Wire models of the terminal (incident triage) environment."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from openenv_echo.wire import Action, Observation

from .machine import INCIDENT_KINDS

IncidentKind = Literal[
    "disk_full", "oom_killed", "bad_config", "cert_expired", "db_pool_exhausted", "dns_misconfig", "port_conflict"
]
"""Reset option ``incident``: force the kind of incident (published as an enum in the OpenAPI reset schema)."""
assert get_args(IncidentKind) == INCIDENT_KINDS


class TerminalAction(Action):
    """One shell command line, or the final answer ``submit <kind> <service>``."""

    command: str = Field(
        description=(
            "A bash command line run in a read-only root shell on the virtual host (pipes `|`, `;`, `&&`, `||`, "
            "globs and `$VAR` work; command substitution, redirection to files and background jobs are refused). "
            "To answer and end the episode send `submit <kind> <service>`."
        ),
        max_length=65536,
    )


class TerminalObservation(Observation):
    """What the terminal showed: ``$ <command>`` (warning), the machine's output (env_output), harness notices
    (warning: truncation, refusals, limits, verdict)."""

    output: str = Field(
        default="",
        description="What the machine printed for the command line (stdout and stderr, as the env_output segment).",
    )
    exit_code: int | None = Field(
        default=None,
        description="Exit status of the command line; null on reset, on submit, and when the harness stopped reading "
        "(output truncated before the command finished).",
    )
    cwd: str = Field(default="/root", description="Working directory of the shell after the command.")
    truncated: bool = Field(default=False, description="True when the output hit the per-observation cap.")
    steps_left: int = Field(default=0, ge=0, description="Steps left before the episode ends without an answer.")


class CommandArguments(BaseModel):
    """Arguments of the ``run_command`` tool."""

    command: str = Field(description="A bash command line run in the read-only shell.", max_length=65536)


class SubmitArguments(BaseModel):
    """Arguments of the ``submit`` tool: the final answer."""

    kind: IncidentKind = Field(description="The kind of incident.")
    service: str = Field(description="The service at its root.", min_length=1, max_length=256)
