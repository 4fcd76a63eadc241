"""What the sync and async clients share above the transport: construction, ``from_provider``, the recording."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from ..trajectory import Trajectory, TrajectoryWriter
from .core import DEFAULT_MAX_MESSAGE_BYTES, ClientCore, open_writer
from .results import PlainTextRule, SegmentRule


class ClientBase:
    """One server session (one WebSocket) recording one episode at a time; see ``EnvClient``."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 300.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        segment_rule: SegmentRule = PlainTextRule(),
        writer: TrajectoryWriter | str | Path | None = None,
        env_name: str | None = None,
        headers: dict[str, str] | None = None,
        provider: Any = None,
    ) -> None:
        self._core = ClientCore(
            base_url,
            connect_timeout_s=connect_timeout_s,
            message_timeout_s=message_timeout_s,
            max_message_bytes=max_message_bytes,
            segment_rule=segment_rule,
            writer=open_writer(writer),
            env_name=env_name,
            headers=headers,
        )
        self._owns_writer = writer is not None and not isinstance(writer, TrajectoryWriter)
        self._provider = provider

    @classmethod
    def from_provider(cls, provider: Any, **kwargs: Any) -> Any:
        """Start ``provider`` (a local process or Docker container; this blocks until it is healthy) and connect
        to it; ``close`` stops it again."""
        return cls(provider.start(), provider=provider, **kwargs)

    @property
    def base_url(self) -> str:
        return self._core.base_url

    @property
    def connect_timeout_s(self) -> float:
        return self._core.connect_timeout_s

    @property
    def message_timeout_s(self) -> float:
        """The limit on every reply, keepalive pongs included: a hung server raises ``EnvTimeoutError`` by then."""
        return self._core.message_timeout_s

    @property
    def trajectory(self) -> Trajectory | None:
        """The episode being recorded (or the last one); its ``status`` says whether and how it ended."""
        return self._core.trajectory

    @property
    def env_name(self) -> str | None:
        return self._core.env_name

    @property
    def writer(self) -> TrajectoryWriter | None:
        return self._core.writer

    def end_episode(self, status: Literal["truncated", "abandoned"], error: BaseException | None = None) -> None:
        """End the running episode yourself: ``truncated`` (your step limit) or ``abandoned`` (giving up on it).
        It is journalled at once; further steps are refused until the next ``reset``."""
        self._core.end(status, error)

    def _close_writer(self) -> None:
        writer = self._core.writer
        if self._owns_writer and writer is not None:
            writer.close()
            self._core.writer = None
