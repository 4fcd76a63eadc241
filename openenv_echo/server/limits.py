"""Server limits: safe defaults, overridable in code, by ``serve`` flags or by ``OPENENV_ECHO_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

_ENV_PREFIX = "OPENENV_ECHO_"
_OPENENV_VARIABLES = {"max_sessions": "MAX_CONCURRENT_ENVS"}
"""OpenEnv's names for the same limits, read when the ``OPENENV_ECHO_*`` variable is not set."""
HTTP_HEADROOM = 64
"""Connections an unset ``max_connections`` leaves beside ``max_sessions`` WebSockets: HTTP calls, health checks."""


class ServerLimits(BaseModel):
    """Resource limits of one server process and of each of its sessions.

    Every field can be set from the environment, e.g. ``OPENENV_ECHO_MAX_SESSIONS=8`` (see ``from_env``), which
    is how containers and docker-compose configure them. The per-session limits (wall time, memory, disk) apply to
    environments that declare ``BLOCKING = True``: each session's instance lives in its own worker process.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # sessions
    max_sessions: int = Field(default=64, ge=1, description="Concurrent WebSocket sessions; more get CAPACITY_REACHED.")
    idle_timeout_s: float | None = Field(
        default=600.0, gt=0, description="A session idle this long is closed (SESSION_ERROR); None disables."
    )
    # one step
    step_timeout_s: float | None = Field(
        default=2.0,
        gt=0,
        description="Wall time of one step; over it the worker is killed, the client gets STEP_TIMEOUT and the "
        "session must reset (None disables).",
    )
    reset_timeout_s: float | None = Field(
        default=10.0,
        gt=0,
        description="Wall time of one reset (building a world is the server's own bounded work); over it, as for a "
        "step.",
    )
    memory_mb: int = Field(
        default=64, ge=8, description="Memory a session's worker may allocate above its baseline (RLIMIT_AS)."
    )
    temp_disk_mb: int = Field(default=16, ge=0, description="Largest file a session's worker may write (RLIMIT_FSIZE).")
    max_output_bytes: int = Field(
        default=65_536, ge=1024, description="Observation text per step; the rest is cut with a warning segment."
    )
    # messages
    max_message_bytes: int = Field(
        default=1_048_576, ge=1024, description="Largest WS frame or HTTP body accepted; larger gets MESSAGE_TOO_LARGE."
    )
    max_json_depth: int = Field(
        default=32, ge=4, description="Deepest nesting of arrays/objects in a frame or body; deeper gets INVALID_JSON."
    )
    # connections
    max_connections: int = Field(
        default=256,
        ge=1,
        description="Open TCP connections; more are answered 429 CAPACITY_REACHED and closed. At least max_sessions "
        f"(each session holds one); unset, max_sessions + {HTTP_HEADROOM} where that is more than 256.",
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="Time a connection has to send complete request headers before it is closed."
    )
    body_timeout_s: float = Field(
        default=10.0, gt=0, description="Time between two chunks of a request body before it gets 408."
    )

    @model_validator(mode="before")
    @classmethod
    def _room_for_sessions(cls, data: Any) -> Any:
        """An unset connection cap grows with the session cap, so that ``max_sessions=512`` alone serves 512 sessions
        instead of refusing half of them with 429 at the transport."""
        if not isinstance(data, Mapping) or data.get("max_connections") is not None:
            return data
        try:
            sessions = int(data.get("max_sessions", cls.model_fields["max_sessions"].default))
        except (TypeError, ValueError):
            return data  # the field's own validation says what is wrong
        return {**data, "max_connections": max(cls.model_fields["max_connections"].default, sessions + HTTP_HEADROOM)}

    @model_validator(mode="after")
    def _connections_hold_sessions(self) -> ServerLimits:
        if self.max_connections < self.max_sessions:
            raise ValueError(
                f"max_connections ({self.max_connections}) is below max_sessions ({self.max_sessions}): each session "
                "holds one connection, so the sessions past it would be refused with 429"
            )
        return self

    @classmethod
    def from_env(cls, defaults: Mapping[str, object] | None = None, **overrides: object) -> ServerLimits:
        """Defaults (the field defaults, then ``defaults``: an env's ``DEFAULT_LIMITS``), then ``OPENENV_ECHO_<FIELD>``
        variables (or OpenEnv's ``MAX_CONCURRENT_ENVS``), then explicit ``overrides`` (None values ignored)."""
        values: dict[str, object] = dict(defaults or {})
        for name in cls.model_fields:
            raw = os.environ.get(_ENV_PREFIX + name.upper())
            if raw is None and name in _OPENENV_VARIABLES:
                raw = os.environ.get(_OPENENV_VARIABLES[name])
            if raw is not None:
                values[name] = None if raw.lower() in ("", "none", "off") else raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
