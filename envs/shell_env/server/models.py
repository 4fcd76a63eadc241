"""Wire models of the shell environment."""

from __future__ import annotations

from pydantic import BaseModel, Field

from openenv_echo.wire import Action, Observation

MAX_COMMAND_CHARS = 65536
SUBMIT = "submit"
"""The command line that ends the episode and runs the task's verifier."""


class ShellAction(Action):
    """One bash command line, or ``submit`` (alone on the line) to end the episode and run the task's tests."""

    command: str = Field(
        description=(
            "A bash command line run in the task's container as an unprivileged user (state such as the working "
            "directory and variables persists between steps; stdin is /dev/null; no network). Send `submit` alone "
            "to end the episode: the task's tests then check the container and give the reward."
        ),
        max_length=MAX_COMMAND_CHARS,
    )


class ShellObservation(Observation):
    """What the terminal showed: ``<cwd>$ <command>`` (warning), the command's stdout and stderr (env_output, stderr
    runs marked in segment metadata), harness notices and the exit status line (warning)."""

    output: str = Field(default="", description="What the command wrote (stdout and stderr as they came, as shown).")
    exit_code: int | None = Field(
        default=None,
        description="The command's exit status; null on reset, on submit, and when the harness killed the command.",
    )
    cwd: str = Field(default="", description="The shell's working directory after the command.")
    truncated: bool = Field(default=False, description="True when the output hit the per-step cap.")
    timed_out: bool = Field(default=False, description="True when the command ran past its wall-time limit.")
    steps_left: int = Field(default=0, ge=0, description="Steps left before the episode ends (the tests then run).")
    task: str = Field(default="", description="Name of the episode's Harbor task.")


class CommandArguments(BaseModel):
    """Arguments of the ``run_command`` tool."""

    command: str = Field(description="A bash command line.", max_length=MAX_COMMAND_CHARS)


class SubmitArguments(BaseModel):
    """The ``submit`` tool takes no arguments."""
