"""Pydantic models for everything on the wire: role-tagged observations, actions, state and WS frames.

Compatible with OpenEnv's wire format (``openenv.core.env_server.types``): an observation is a flat JSON
object with ``done``, ``reward`` and ``metadata`` plus its own fields. openenv-echo adds four fields that any
plain OpenEnv client simply sees as data: ``role_spec``, ``segments``, ``text`` and (on request) ``tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .roles import ROLE_SPEC_VERSION, Role


class Segment(BaseModel):
    """A run of text written by one author. An observation's flat text is exactly its segments joined.

    ``metadata`` (role spec 1.1) says more about where the text came from without changing its role, e.g.
    ``{"stream": "stderr"}`` on what a process wrote to its standard error; it is omitted from JSON when absent.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    text: str
    metadata: dict[str, str] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description='Where the text came from, without changing its role (e.g. {"stream": "stderr"}); absent '
        "when there is nothing to say.",
    )

    def __hash__(self) -> int:  # frozen, so hashable: the metadata dict by its items
        return hash((self.role, self.text, tuple(sorted(self.metadata.items())) if self.metadata else None))

    def __repr__(self) -> str:  # compact: trajectories print many of these
        extra = f", {self.metadata}" if self.metadata else ""
        return f"Segment({self.role.value}, {self.text!r}{extra})"


def context(text: str) -> Segment:
    """A ``context`` segment (task text, instructions)."""
    return Segment(role=Role.CONTEXT, text=text)


def env_output(text: str, metadata: dict[str, str] | None = None) -> Segment:
    """An ``env_output`` segment: what the world itself printed or returned (``metadata``: e.g. its stream)."""
    return Segment(role=Role.ENV_OUTPUT, text=text, metadata=metadata)


def warning(text: str) -> Segment:
    """A ``warning`` segment: harness boilerplate (wrappers, echoed commands, truncation and format notices)."""
    return Segment(role=Role.WARNING, text=text)


def join_segments(segments: list[Segment]) -> str:
    return "".join(s.text for s in segments)


class TokenizerIdentity(BaseModel):
    """Which tokenizer made a list of token ids; ids are only reused when the fingerprint matches exactly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Human-readable name or path, informational only.")
    fingerprint: str = Field(description="sha256 hex of the tokenizer's canonical serialization.")


class ObservationTokens(BaseModel):
    """Token ids of an observation's segment bodies with one role per token (server-side tokenization)."""

    model_config = ConfigDict(extra="forbid")

    tokenizer: TokenizerIdentity
    ids: list[int]
    roles: list[Role]

    @model_validator(mode="after")
    def _aligned(self) -> ObservationTokens:
        if len(self.ids) != len(self.roles):
            raise ValueError(f"tokens.ids has {len(self.ids)} entries but tokens.roles has {len(self.roles)}")
        return self


class Action(BaseModel):
    """Base class of actions: unknown fields are rejected (OpenEnv's ``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form action metadata.")


class Observation(BaseModel):
    """Base class of role-tagged observations.

    ``text`` is derived: leave it empty and it is set to the segments joined; a non-empty ``text`` that differs
    from the joined segments is rejected, so the flat text and the segments can never disagree.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"x-openenv-echo-role-spec": ROLE_SPEC_VERSION},
    )

    done: bool = Field(default=False, description="True when the episode has ended.")
    reward: float | None = Field(default=None, description="Reward of the last transition (null on reset).")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form observation metadata.")
    role_spec: str = Field(default=ROLE_SPEC_VERSION, description="Version of the openenv-echo role spec.")
    segments: list[Segment] = Field(default_factory=list, description="Ordered role-tagged content.")
    text: str = Field(default="", description="Exactly the concatenation of the segments' text.")
    tokens: ObservationTokens | None = Field(
        default=None, description="Segment-body token ids with per-token roles, when the client asked for them."
    )

    @field_validator("reward")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("reward must be a finite number")
        return v

    @model_validator(mode="after")
    def _text_matches_segments(self) -> Observation:
        joined = join_segments(self.segments)
        if not self.text:
            self.__dict__["text"] = joined
        elif self.text != joined:
            raise ValueError("text must equal the concatenation of segments[].text")
        return self


ENVELOPE_KEYS = frozenset({"segments", "text", "tokens", "role_spec", "metadata", "reward", "done"})
"""Observation keys that are not the env's own fields: the role fields and OpenEnv's base fields."""


class ObservationRecord(BaseModel):
    """One observation as received, the single record the client's step result and the trajectory share:
    role-tagged segments (and tokens), reward, done, metadata, and the env's own fields verbatim."""

    model_config = ConfigDict(extra="forbid")

    segments: list[Segment] = Field(default_factory=list)
    tokens: ObservationTokens | None = None
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)
    fields: dict[str, Any] = Field(
        default_factory=dict, description="The observation's other fields (env-specific), verbatim."
    )

    @property
    def text(self) -> str:
        return join_segments(self.segments)

    @classmethod
    def from_envelope(
        cls, data: dict[str, Any], rule: Callable[[dict[str, Any]], list[Segment]] | None = None
    ) -> ObservationRecord:
        """Parse (and validate, once) an envelope ``{"observation", "reward", "done", "metadata"?}``. An observation
        without ``segments`` (a plain OpenEnv env) gets its segments from ``rule`` (none by default)."""
        obs = data.get("observation")
        if not isinstance(obs, dict):
            raise ValueError("observation reply without an 'observation' object")
        spec = obs.get("role_spec")
        if isinstance(spec, str) and spec.split(".")[0] != ROLE_SPEC_VERSION.split(".")[0]:
            raise ValueError(f"server speaks role spec {spec}; this client implements {ROLE_SPEC_VERSION}")
        raw = obs.get("segments")
        segments = [Segment.model_validate(s) for s in raw] if isinstance(raw, list) else (rule(obs) if rule else [])
        raw_tokens = obs.get("tokens")
        reward = data.get("reward", obs.get("reward"))
        return cls(
            segments=segments,
            tokens=ObservationTokens.model_validate(raw_tokens) if isinstance(raw_tokens, dict) else None,
            reward=None if reward is None else float(reward),
            done=bool(data.get("done", obs.get("done", False))),
            metadata=dict(data.get("metadata") or obs.get("metadata") or {}),
            fields={k: v for k, v in obs.items() if k not in ENVELOPE_KEYS},
        )


class State(BaseModel):
    """Episode state: ``episode_id`` echoes the reset's, ``step_count`` counts steps since reset."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = Field(default=0, ge=0)


class ErrorCode(str, Enum):
    """Error codes of WS error frames and JSON HTTP errors: OpenEnv's seven plus openenv-echo's own."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"
    # openenv-echo additions
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    EPISODE_NOT_STARTED = "EPISODE_NOT_STARTED"
    EPISODE_DONE = "EPISODE_DONE"
    STEP_TIMEOUT = "STEP_TIMEOUT"
    TOKENIZER_UNAVAILABLE = "TOKENIZER_UNAVAILABLE"
    SANDBOX_LOST = "SANDBOX_LOST"
    """The episode's sandbox (the shell env's container) died under it; ``logs`` holds its last log lines."""


CLOSING_CODES = frozenset({ErrorCode.CAPACITY_REACHED, ErrorCode.FACTORY_ERROR, ErrorCode.SESSION_ERROR})
"""Codes after which the server closes the socket; after any other error the session stays usable."""


class StepResponse(BaseModel):
    """HTTP reply of ``/reset`` and ``/step`` (OpenEnv's ``ResetResponse``/``StepResponse``)."""

    model_config = ConfigDict(extra="forbid")

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


class HealthResponse(BaseModel):
    status: Literal["healthy"] = "healthy"


class EnvironmentMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    readme_content: str | None = None
    version: str | None = None
    author: str | None = None
    documentation_url: str | None = None


class SchemaResponse(BaseModel):
    action: dict[str, Any]
    observation: dict[str, Any]
    state: dict[str, Any]
    reset_observation: dict[str, Any] | None = None


# -- MCP (OpenEnv RFC 003): tools as actions ----------------------------------------------------------------


class Tool(BaseModel):
    """An MCP tool as ``step(ListToolsAction())`` returns it (OpenEnv's ``mcp_types.Tool``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Unique identifier of the tool.")
    description: str = Field(description="What the tool does.")
    input_schema: dict[str, Any] = Field(description="JSON Schema of the tool's arguments.")


class ToolErrorType(str, Enum):
    EXECUTION_ERROR = "execution_error"
    INVALID_ARGS = "invalid_args"
    TRANSPORT_ERROR = "transport_error"
    TOOL_NOT_FOUND = "tool_not_found"
    TIMEOUT = "timeout"


class ToolError(BaseModel):
    """A transport or framework failure of a tool call (OpenEnv's ``ToolError``)."""

    model_config = ConfigDict(extra="forbid")

    error_type: ToolErrorType
    message: str


class ListToolsAction(Action):
    """``step`` with this lists the environment's tools; it needs no reset and is not an episode step."""

    type: Literal["list_tools"] = Field(default="list_tools", description="Action type discriminator.")


class CallToolAction(Action):
    """``step`` with this calls one tool: the same transition as the native action the tool stands for."""

    type: Literal["call_tool"] = Field(default="call_tool", description="Action type discriminator.")
    tool_name: str = Field(description="Name of the tool to call.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments of the tool.")


MCP_ACTION_TYPES: dict[str, type[Action]] = {"list_tools": ListToolsAction, "call_tool": CallToolAction}
"""``type`` discriminator of an action dict -> OpenEnv's MCP action model."""

RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})
