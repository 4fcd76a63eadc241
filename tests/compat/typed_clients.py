"""Role-unaware typed clients written the way OpenEnv's own env packages write them (``EnvClient`` subclasses
over ``openenv``'s strict ``Action``/``Observation`` models); they know nothing of segments.

``strict_observation`` is the test of "a role-unaware client loses nothing": the observation minus openenv-echo's
role fields must validate against the env's OpenEnv-style model (``extra="forbid"``), with every field typed.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

ROLE_FIELDS = frozenset({"segments", "text", "role_spec", "tokens"})


class EchoAction(Action):
    message: str = Field(..., min_length=1)


class EchoObservation(Observation):
    echoed_message: str
    message_length: int = 0


class TerminalAction(Action):
    command: str


class TerminalObservation(Observation):
    output: str = ""
    exit_code: int | None = None
    cwd: str = "/"
    truncated: bool = False
    steps_left: int = 0


class SqlAction(Action):
    query: str | None = None
    answer: str | None = None


class SqlObservation(Observation):
    columns: list[str] | None = None
    rows: list[list[Any]] | None = None
    row_count: int | None = None
    truncated: bool = False
    failed: bool = False
    error_message: str | None = None
    steps_left: int = 0


class ShellAction(Action):
    command: str


class ShellObservation(Observation):
    output: str = ""
    exit_code: int | None = None
    cwd: str = ""
    truncated: bool = False
    timed_out: bool = False
    steps_left: int = 0
    task: str = ""


OBSERVATIONS: dict[str, type[Observation]] = {
    "echo": EchoObservation,
    "terminal": TerminalObservation,
    "sql": SqlObservation,
    "shell": ShellObservation,
}


def strict_observation(env_name: str, payload: dict[str, Any]) -> Observation:
    """The reply's observation as the env's strict OpenEnv model (raises if a field is missing or unknown)."""
    fields = {k: v for k, v in payload["observation"].items() if k not in ROLE_FIELDS}
    return OBSERVATIONS[env_name].model_validate({**fields, "reward": payload.get("reward"), "done": payload["done"]})


class _TypedClient(EnvClient[Any, Any, State]):
    env_name: str

    def _step_payload(self, action: Action) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"}, exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[Any]:
        return StepResult(
            observation=strict_observation(self.env_name, payload),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


class EchoEnv(_TypedClient):
    env_name = "echo"


class TerminalEnv(_TypedClient):
    env_name = "terminal"


class SqlEnv(_TypedClient):
    env_name = "sql"


class ShellEnv(_TypedClient):
    env_name = "shell"


TYPED_CLIENTS: dict[str, type[_TypedClient]] = {
    "echo": EchoEnv,
    "terminal": TerminalEnv,
    "sql": SqlEnv,
    "shell": ShellEnv,
}
