"""What a reset/step returns, and how a plain OpenEnv observation (no segments) becomes role-tagged."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..roles import ROLE_SPEC_VERSION, Role
from ..trajectory import ObservationRecord
from ..wire import ObservationTokens, Segment

_ENVELOPE_KEYS = frozenset({"segments", "text", "tokens", "role_spec", "metadata", "reward", "done"})


@dataclass(frozen=True)
class PlainTextRule:
    """How an observation *without* segments (a plain OpenEnv env) becomes segments.

    The first of ``fields`` holding a string becomes one segment of ``role``; when none does, the remaining
    observation fields as compact sorted-key JSON do. Everything a plain env says is thus, by default,
    ``env_output``: a trainer that wants otherwise passes its own rule or any callable ``dict -> [Segment]``.
    """

    fields: tuple[str, ...] = ("text", "output", "stdout", "message", "echoed_message", "content", "result")
    role: Role = Role.ENV_OUTPUT

    def __call__(self, observation: dict[str, Any]) -> list[Segment]:
        for name in self.fields:
            value = observation.get(name)
            if isinstance(value, str):
                return [Segment(role=self.role, text=value)] if value else []
        rest = {k: v for k, v in observation.items() if k not in _ENVELOPE_KEYS}
        if not rest:
            return []
        return [Segment(role=self.role, text=json.dumps(rest, sort_keys=True, ensure_ascii=False, default=str))]


SegmentRule = Callable[[dict[str, Any]], list[Segment]]


@dataclass
class StepResult:
    """A reset or step reply: the raw observation plus its segments (and server-side tokens, if asked)."""

    observation: dict[str, Any]
    segments: list[Segment]
    tokens: ObservationTokens | None = None
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    def record(self) -> ObservationRecord:
        fields = {k: v for k, v in self.observation.items() if k not in _ENVELOPE_KEYS}
        return ObservationRecord(
            segments=self.segments,
            tokens=self.tokens,
            reward=self.reward,
            done=self.done,
            metadata=self.metadata,
            fields=fields,
        )


def parse_observation(data: dict[str, Any], rule: SegmentRule) -> StepResult:
    """An observation envelope ``{"observation", "reward", "done", "metadata"?}`` as a ``StepResult``."""
    obs = data.get("observation")
    if not isinstance(obs, dict):
        raise ValueError("observation reply without an 'observation' object")
    spec = obs.get("role_spec")
    if isinstance(spec, str) and spec.split(".")[0] != ROLE_SPEC_VERSION.split(".")[0]:
        raise ValueError(f"server speaks role spec {spec}; this client implements {ROLE_SPEC_VERSION}")
    raw_segments = obs.get("segments")
    segments = [Segment.model_validate(s) for s in raw_segments] if isinstance(raw_segments, list) else rule(obs)
    raw_tokens = obs.get("tokens")
    tokens = ObservationTokens.model_validate(raw_tokens) if isinstance(raw_tokens, dict) else None
    reward = data.get("reward", obs.get("reward"))
    metadata = data.get("metadata") or obs.get("metadata") or {}
    return StepResult(
        observation=obs,
        segments=segments,
        tokens=tokens,
        reward=None if reward is None else float(reward),
        done=bool(data.get("done", obs.get("done", False))),
        metadata=dict(metadata),
    )
