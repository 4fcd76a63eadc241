"""Server limits: safe defaults, overridable in code or by ``OPENENV_ECHO_*`` environment variables."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

_ENV_PREFIX = "OPENENV_ECHO_"
_OPENENV_VARIABLES = {"max_sessions": "MAX_CONCURRENT_ENVS"}
"""OpenEnv's names for the same limits, read when the ``OPENENV_ECHO_*`` variable is not set."""


class ServerLimits(BaseModel):
    """Resource limits of one server process.

    Every field can be set from the environment, e.g. ``OPENENV_ECHO_MAX_SESSIONS=8`` (see ``from_env``), which
    is how containers and docker-compose configure them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_sessions: int = Field(default=64, ge=1, description="Concurrent WebSocket sessions; more get CAPACITY_REACHED.")
    idle_timeout_s: float | None = Field(
        default=600.0, gt=0, description="A session idle this long is closed (SESSION_ERROR); None disables."
    )
    max_message_bytes: int = Field(
        default=1_048_576, ge=1024, description="Largest WS frame or HTTP body accepted; larger gets MESSAGE_TOO_LARGE."
    )
    step_timeout_s: float | None = Field(
        default=30.0, gt=0, description="A reset/step running longer gets STEP_TIMEOUT and a fresh env on next reset."
    )

    @classmethod
    def from_env(cls, **overrides: object) -> ServerLimits:
        """Defaults, then ``OPENENV_ECHO_<FIELD>`` variables (or OpenEnv's ``MAX_CONCURRENT_ENVS``), then explicit
        ``overrides`` (None values ignored)."""
        values: dict[str, object] = {}
        for name in cls.model_fields:
            raw = os.environ.get(_ENV_PREFIX + name.upper())
            if raw is None and name in _OPENENV_VARIABLES:
                raw = os.environ.get(_OPENENV_VARIABLES[name])
            if raw is not None:
                values[name] = None if raw.lower() in ("", "none", "off") else raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
