"""What a reset/step returns, and how a plain OpenEnv observation (no segments) becomes role-tagged."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..roles import Role
from ..wire import ENVELOPE_KEYS, ObservationRecord, ObservationTokens, Segment


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
        rest = {k: v for k, v in observation.items() if k not in ENVELOPE_KEYS}
        if not rest:
            return []
        return [Segment(role=self.role, text=json.dumps(rest, sort_keys=True, ensure_ascii=False, default=str))]


SegmentRule = Callable[[dict[str, Any]], list[Segment]]


@dataclass(frozen=True)
class StepResult:
    """A reset or step reply: the raw observation as sent, and its ``ObservationRecord`` (parsed once), which is
    also what the trajectory stores; ``segments``, ``reward``... read through to it."""

    observation: dict[str, Any]
    observation_record: ObservationRecord

    @property
    def segments(self) -> list[Segment]:
        return self.observation_record.segments

    @property
    def tokens(self) -> ObservationTokens | None:
        return self.observation_record.tokens

    @property
    def reward(self) -> float | None:
        return self.observation_record.reward

    @property
    def done(self) -> bool:
        return self.observation_record.done

    @property
    def metadata(self) -> dict[str, Any]:
        return self.observation_record.metadata

    @property
    def text(self) -> str:
        return self.observation_record.text

    def record(self) -> ObservationRecord:
        return self.observation_record


def parse_observation(data: dict[str, Any], rule: SegmentRule) -> StepResult:
    """An observation envelope ``{"observation", "reward", "done", "metadata"?}`` as a ``StepResult``."""
    record = ObservationRecord.from_envelope(data, rule)  # raises on a reply without an observation object
    return StepResult(observation=data["observation"], observation_record=record)
