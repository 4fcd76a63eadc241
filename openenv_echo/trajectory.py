"""Recorded episodes (``Trajectory``) and their durable storage: a step-by-step journal, readable after any crash.

A trajectory is the conversation a policy had with an environment, with the author of every character kept:

1. ``messages`` – the initial chat messages the policy saw (all ``context``), e.g. a system prompt;
2. ``reset``    – the reset observation; when it has segments it is the next message (the observation role);
3. ``steps``    – per step: the action as sent, the policy's text for it (and, live, the sampled token ids with
   the sampler's per-token log-probabilities and temperature), then the observation that came back as
   role-tagged segments.

An episode ends as ``done`` (the env said so), ``truncated`` (the caller's step limit), ``cut`` (the connection
was lost; ``error`` says how) or ``abandoned`` (the client moved on: a new reset, ``close``, an error it gave up
on); it is ``running`` until then. ``TrajectoryWriter`` journals each episode as it happens, one JSON record per
line: ``begin`` (the header and reset), one ``step`` per completed step, ``end`` (status, step count, error). The
reader rebuilds exact trajectories from a journal cut at any byte; an episode whose ``end`` never made it to disk
(the writing process died) reads back as ``cut``. Files of whole-trajectory lines (the earlier format) read too.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .journal import FsyncPolicy, Journal, read_lines
from .roles import ROLE_SPEC_VERSION
from .wire import ObservationRecord

__all__ = ["ObservationRecord"]  # defined in wire (one record from server reply to trajectory), re-exported

TRAJECTORY_SCHEMA_VERSION = "1"

EpisodeStatus = Literal["running", "done", "truncated", "cut", "abandoned"]
ENDED: frozenset[str] = frozenset({"done", "truncated", "cut", "abandoned"})


class ChatMessage(BaseModel):
    """An OpenAI-style chat message; extra keys (``name``, ``tool_calls``…) are kept as they are."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str


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


class EpisodeError(BaseModel):
    """Why an episode was cut or abandoned: the exception's type, the server's error code if any, the message."""

    model_config = ConfigDict(extra="forbid")

    type: str
    message: str
    code: str | None = None

    @classmethod
    def of(cls, exc: BaseException) -> EpisodeError:
        code = getattr(exc, "code", None)
        return cls(
            type=type(exc).__name__, message=str(exc), code=None if code is None else str(getattr(code, "value", code))
        )


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
    status: EpisodeStatus = Field(default="running", description="How the episode ended (``running`` until then).")
    error: EpisodeError | None = Field(default=None, description="Why it was cut or abandoned, when an error did it.")

    @property
    def ended(self) -> bool:
        return self.status in ENDED

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


def _dumps(record: dict[str, Any], key: str, payload: BaseModel | None = None) -> str:
    """One journal line; the payload model is serialized by pydantic straight into the line."""
    head = json.dumps(record, ensure_ascii=False)
    if payload is None:
        return head + "\n"
    return f'{head[:-1]}, "{key}": {payload.model_dump_json()}}}\n'


class TrajectoryWriter:
    """Journals episodes as they happen: ``begin`` at reset, ``step`` per completed step, ``end`` with the status.

    Each record is appended whole (one ``write``, ``O_APPEND``) before the caller sees the step, so a process killed
    at any point loses no completed step; ``fsync`` decides what survives a machine crash (``"episode"``: each
    episode's end). Thread-safe; ``write`` stores an already finished trajectory in one go.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: FsyncPolicy | bool = "episode") -> None:
        policy: FsyncPolicy = ("episode" if fsync else "never") if isinstance(fsync, bool) else fsync
        self._journal = Journal(path, fsync=policy)
        self.path = self._journal.path

    @property
    def closed(self) -> bool:
        return self._journal.closed

    def begin(self, trajectory: Trajectory) -> str:
        """Journal a new episode's header (messages, reset, metadata) and return its journal key."""
        key = uuid.uuid4().hex
        header = trajectory.model_copy(update={"steps": [], "status": "running", "error": None})
        self._journal.append(_dumps({"kind": "begin", "key": key}, "trajectory", header))
        for i, step in enumerate(trajectory.steps):
            self.step(key, i, step)
        return key

    def step(self, key: str, index: int, step: StepRecord) -> None:
        self._journal.append(_dumps({"kind": "step", "key": key, "index": index}, "step", step))

    def end(self, key: str, trajectory: Trajectory) -> None:
        """Journal the episode's end as ``trajectory.status`` (and ``error``), with its step count as a check."""
        if not trajectory.ended:
            raise ValueError(f"episode {trajectory.episode_id!r} has not ended (status {trajectory.status!r})")
        record = {"kind": "end", "key": key, "status": trajectory.status, "steps": len(trajectory.steps)}
        self._journal.append(_dumps(record, "error", trajectory.error), boundary=True)

    def write(self, trajectory: Trajectory) -> None:
        """Store a whole trajectory; one still ``running`` is stored as ``done`` if its last observation says so,
        else as ``abandoned`` (nobody continues it)."""
        if not trajectory.ended:
            trajectory = trajectory.model_copy(update={"status": "done" if trajectory.done else "abandoned"})
        self.end(self.begin(trajectory), trajectory)

    def write_all(self, trajectories: Iterable[Trajectory]) -> None:
        for t in trajectories:
            self.write(t)

    def close(self) -> None:
        self._journal.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Open:
    """An episode being rebuilt from its journal records."""

    def __init__(self, where: str, trajectory: Trajectory) -> None:
        self.where = where
        self.trajectory = trajectory


def iter_trajectories(path: str | os.PathLike[str], *, open_episodes: bool = False) -> Iterator[Trajectory]:
    """Rebuild the trajectories of a journal (or a file of whole-trajectory lines), each as its end is read.

    Only episodes whose ``end`` record is on disk are yielded, unless ``open_episodes``: then those whose end never
    made it (the writing process died; at most the last record is torn) follow, as ``cut``, with every step that
    was journalled. A complete record that is not valid is an error, never skipped.
    """
    pending: dict[str, _Open] = {}
    for lineno, line in read_lines(path):
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except ValueError:  # a line torn by a writer that died, closed by the next writer's fresh line
            warnings.warn(f"{where}: skipping a torn record ({len(line)} bytes)", stacklevel=2)
            continue
        try:
            done = _apply(record, pending, where)
        except ValueError as e:
            raise ValueError(f"{where}: not a valid journal record: {e}") from e
        if done is not None:
            yield done
    if open_episodes:
        for ep in pending.values():
            t = ep.trajectory
            t.status = "cut"
            t.error = EpisodeError(
                type="JournalEnded", message=f"the journal ends before this episode's end (begun at {ep.where})"
            )
            yield t


def _apply(record: Any, pending: dict[str, _Open], where: str) -> Trajectory | None:
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    kind = record.get("kind")
    if kind is None:  # a whole trajectory per line (the earlier format, or ``write`` of old)
        t = Trajectory.model_validate(record)
        if "status" not in record:
            t.status = "done" if t.done else "abandoned"
        return t
    key = record.get("key")
    if not isinstance(key, str):
        raise ValueError("record without a key")
    if kind == "begin":
        if key in pending:
            raise ValueError(f"episode {key} begun twice")
        pending[key] = _Open(where, Trajectory.model_validate(record["trajectory"]))
        return None
    ep = pending.get(key)
    if ep is None:
        raise ValueError(f"{kind} record of an episode that was not begun ({key})")
    t = ep.trajectory
    if kind == "step":
        if record.get("index") != len(t.steps):
            raise ValueError(f"step {record.get('index')} of episode {key} follows step {len(t.steps) - 1}")
        t.steps.append(StepRecord.model_validate(record["step"]))
        return None
    if kind == "end":
        if record.get("steps") != len(t.steps):
            raise ValueError(f"episode {key} ends after {record.get('steps')} steps but {len(t.steps)} are on disk")
        t.status = record["status"]
        if t.status not in ENDED:
            raise ValueError(f"unknown end status {t.status!r}")
        error = record.get("error")
        t.error = None if error is None else EpisodeError.model_validate(error)
        del pending[key]
        return t
    raise ValueError(f"unknown record kind {kind!r}")


def read_trajectories(path: str | os.PathLike[str], *, open_episodes: bool = False) -> list[Trajectory]:
    """``list(iter_trajectories(path, open_episodes=...))``."""
    return list(iter_trajectories(path, open_episodes=open_episodes))
