"""Transport-free half of the clients: frames out, replies in, and the ``Trajectory`` being recorded."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..trajectory import ChatMessage, StepRecord, Trajectory, TrajectoryWriter
from .errors import EpisodeNotStartedError, error_from_payload
from .results import SegmentRule, StepResult, parse_observation


def ws_url(base_url: str) -> str:
    """``http(s)://host:port[/prefix]`` -> ``ws(s)://host:port[/prefix]/ws``."""
    url = base_url.rstrip("/")
    if url.startswith("https://"):
        url = "wss://" + url[len("https://") :]
    elif url.startswith("http://"):
        url = "ws://" + url[len("http://") :]
    elif not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url + "/ws"


def http_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url if url.startswith(("http://", "https://")) else "http://" + url


class EpisodeRecorder:
    """Builds request frames, parses replies (raising typed errors) and records the episode.

    A finished episode (``done``) is written to ``writer`` at once; one abandoned by a new ``reset`` or by
    ``close`` is written then, with ``done`` false, so no recorded step is ever lost.
    """

    def __init__(self, rule: SegmentRule, writer: TrajectoryWriter | None, env_name: str | None) -> None:
        self.rule = rule
        self.writer = writer
        self.env_name = env_name
        self.trajectory: Trajectory | None = None
        self._written = False
        self._pending: tuple[dict[str, Any], str | None, list[int] | None] | None = None

    # -- frames -----------------------------------------------------------------------------------------
    def reset_frame(
        self, seed: int | None, episode_id: str | None, return_tokens: bool, options: dict[str, Any]
    ) -> tuple[str, str]:
        episode_id = episode_id or uuid.uuid4().hex
        data: dict[str, Any] = {**options, "episode_id": episode_id}
        if seed is not None:
            data["seed"] = seed
        if return_tokens:
            data["return_tokens"] = True
        return json.dumps({"type": "reset", "data": data}), episode_id

    def step_frame(
        self, action: dict[str, Any] | BaseModel, action_text: str | None, action_token_ids: list[int] | None
    ) -> str:
        if self.trajectory is None:
            raise EpisodeNotStartedError(
                "step before reset: call reset() first (a lost connection also ends the episode)"
            )
        payload = action.model_dump(exclude_defaults=True) if isinstance(action, BaseModel) else dict(action)
        self._pending = (payload, action_text, list(action_token_ids) if action_token_ids is not None else None)
        return json.dumps({"type": "step", "data": payload})

    # -- replies ----------------------------------------------------------------------------------------
    def on_reset_reply(
        self,
        reply: str | bytes,
        episode_id: str,
        messages: list[dict[str, Any] | ChatMessage] | None,
        metadata: dict[str, Any] | None = None,
    ) -> StepResult:
        result = self._observation(reply)
        self.finish()
        self.trajectory = Trajectory(
            episode_id=episode_id,
            env_name=self.env_name,
            messages=[m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in messages or []],
            reset=result.record(),
            metadata=dict(metadata or {}),
        )
        self._written = False
        return result

    def on_step_reply(self, reply: str | bytes) -> StepResult:
        pending, self._pending = self._pending, None
        result = self._observation(reply)
        assert pending is not None and self.trajectory is not None
        action, text, ids = pending
        self.trajectory.steps.append(
            StepRecord(action=action, action_text=text, action_token_ids=ids, observation=result.record())
        )
        if result.done:
            self.finish()
        return result

    def on_state_reply(self, reply: str | bytes) -> dict[str, Any]:
        frame = self._frame(reply)
        if frame.get("type") != "state":
            raise ValueError(f"expected a state frame, got {frame.get('type')!r}")
        return dict(frame.get("data") or {})

    def abandon_step(self) -> None:
        self._pending = None

    def finish(self) -> None:
        """Write the current trajectory (once) if there is a writer and it has steps."""
        if self.trajectory is not None and self.trajectory.steps and not self._written and self.writer is not None:
            self.writer.write(self.trajectory)
            self._written = True

    def _frame(self, reply: str | bytes) -> dict[str, Any]:
        frame = json.loads(reply)
        if frame.get("type") == "error":
            raise error_from_payload(frame.get("data") or {})
        return frame

    def _observation(self, reply: str | bytes) -> StepResult:
        frame = self._frame(reply)
        if frame.get("type") != "observation":
            raise ValueError(f"expected an observation frame, got {frame.get('type')!r}")
        return parse_observation(frame["data"], self.rule)


def open_writer(writer: TrajectoryWriter | str | Path | None) -> TrajectoryWriter | None:
    if writer is None or isinstance(writer, TrajectoryWriter):
        return writer
    return TrajectoryWriter(writer)
