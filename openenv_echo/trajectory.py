"""Recorded episodes (``Trajectory``) and their crash-safe JSONL storage.

A trajectory is the conversation a policy had with an environment, with the author of every character kept:

1. ``messages`` – the initial chat messages the policy saw (all ``context``), e.g. a system prompt;
2. ``reset``    – the reset observation; when it has segments it is the next message (the observation role);
3. ``steps``    – per step: the action as sent, the policy's text for it (and, live, the sampled token ids with
   the sampler's per-token log-probabilities and temperature), then the observation that came back as
   role-tagged segments.

One JSON object per line; a line is written with a single ``write`` of the whole line and flushed, so a crash
never leaves a partial episode, and a reader drops a torn last line (from a crash mid-write) with a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .roles import ROLE_SPEC_VERSION
from .wire import ObservationTokens, Segment, join_segments

TRAJECTORY_SCHEMA_VERSION = "1"


class ChatMessage(BaseModel):
    """An OpenAI-style chat message; extra keys (``name``, ``tool_calls``…) are kept as they are."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str


class ObservationRecord(BaseModel):
    """An observation as received: role-tagged segments plus everything else the server sent."""

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


class StepRecord(BaseModel):
    """One agent turn: the action and the observation it produced."""

    model_config = ConfigDict(extra="forbid")

    action: dict[str, Any] = Field(description="The action exactly as sent to the server.")
    action_text: str | None = Field(
        default=None, description="The policy's text for this action (its assistant message content)."
    )
    action_token_ids: list[int] | None = Field(
        default=None, description="Token ids the sampler produced for this action, verbatim (token-in-token-out)."
    )
    action_logprobs: list[float] | None = Field(
        default=None, description="The sampler's log-probability of each of ``action_token_ids`` (same length)."
    )
    sampling_temperature: float | None = Field(default=None, description="The temperature the action was sampled at.")
    observation: ObservationRecord

    @model_validator(mode="after")
    def _logprobs_match_ids(self) -> StepRecord:
        if self.action_logprobs is not None and len(self.action_logprobs) != len(self.action_token_ids or ()):
            raise ValueError("action_logprobs needs action_token_ids of the same length")
        return self


class Trajectory(BaseModel):
    """A whole episode, lossless through JSON."""

    model_config = ConfigDict(extra="forbid")

    schema_version: str = TRAJECTORY_SCHEMA_VERSION
    role_spec: str = ROLE_SPEC_VERSION
    episode_id: str | None = None
    env_name: str | None = None
    messages: list[ChatMessage] = Field(default_factory=list)
    reset: ObservationRecord | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def rewards(self) -> list[float | None]:
        return [s.observation.reward for s in self.steps]

    @property
    def total_reward(self) -> float:
        return float(sum(r for r in self.rewards if r is not None))

    @property
    def done(self) -> bool:
        last = self.steps[-1].observation if self.steps else self.reset
        return bool(last and last.done)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, line: str | bytes) -> Trajectory:
        return cls.model_validate_json(line)


class TrajectoryWriter:
    """Appends trajectories to a JSONL file, one whole line per ``write`` call (``O_APPEND``), fsynced.

    A process killed at any point leaves every previously written episode intact; at worst the line being
    written is torn, and ``read_trajectories`` skips it.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._repair_tail()

    def _repair_tail(self) -> None:
        """If a previous writer died mid-line, start on a fresh line so the next record stays readable."""
        size = os.fstat(self._fd).st_size
        if size:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def write(self, trajectory: Trajectory) -> None:
        data = (trajectory.model_dump_json() + "\n").encode("utf-8")
        view = memoryview(data)
        while view:  # a regular-file write is whole in practice; loop for the pathological short write
            n = os.write(self._fd, view)
            view = view[n:]
        if self._fsync:
            os.fsync(self._fd)

    def write_all(self, trajectories: Iterable[Trajectory]) -> None:
        for t in trajectories:
            self.write(t)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file, skipping (with a warning) lines torn by a crash."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield Trajectory.model_validate_json(line)
            except ValueError as e:
                if line.endswith(b"\n") and _is_complete_json(line):
                    raise ValueError(f"{path}:{lineno}: not a valid trajectory: {e}") from e
                warnings.warn(f"{path}:{lineno}: skipping a torn line ({len(line)} bytes)", stacklevel=2)


def _is_complete_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    return list(iter_trajectories(path))
