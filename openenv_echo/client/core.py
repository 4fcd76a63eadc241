"""The client core, written once for both faces: settings, request frames, replies, errors and the recording.

Sans-IO: ``ClientCore`` builds each request as an ``Op`` (the frame to send and how to read the reply) and turns
transport failures into typed errors; ``EnvClient`` and ``AsyncEnvClient`` only move frames (blocking or awaited).
The trajectory in memory and the journal on disk change in one place, here, disk first, so they never disagree.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from ..trajectory import ChatMessage, EpisodeError, EpisodeStatus, StepRecord, Trajectory, TrajectoryWriter
from ..wire import CLOSING_CODES, ErrorCode
from .errors import (
    ConnectionLostError,
    EnvClientError,
    EnvTimeoutError,
    EpisodeDoneError,
    EpisodeNotStartedError,
    ServerError,
    TokenizerUnavailableError,
    error_from_payload,
)
from .results import SegmentRule, StepResult, parse_observation

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CLOSE_FRAME = '{"type":"close"}'
T = TypeVar("T")

logging.getLogger("openenv_echo.client").addHandler(logging.NullHandler())  # a library logs only where asked to
TRANSPORT_LOG = logging.getLogger("openenv_echo.client.transport")
"""websockets' own log (keepalive failures and the like): for applications that configure logging, never printed
on its own; the client raises a typed error for every failure it logs."""

# the server abandons the episode after these, so the client ends it too (its session stays usable)
_EPISODE_ENDING = frozenset({ErrorCode.STEP_TIMEOUT, ErrorCode.EPISODE_NOT_STARTED, ErrorCode.EPISODE_DONE})


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


@dataclass(frozen=True)
class Op(Generic[T]):
    """One request: the frame to send, how to read its reply, whether it may open a new connection (reset)."""

    frame: str
    read: Callable[[str | bytes], T]
    opens: bool = False
    ends_on_loss: bool = False  # a lost connection cuts the running episode (a step or state request)


class ClientCore:
    """Settings, protocol and recording shared by the sync and async clients."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float,
        message_timeout_s: float,
        max_message_bytes: int,
        segment_rule: SegmentRule,
        writer: TrajectoryWriter | None,
        env_name: str | None,
        headers: dict[str, str] | None,
    ) -> None:
        self.base_url = http_url(base_url)
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self.max_message_bytes = max_message_bytes
        self.headers = headers or {}
        self.rule = segment_rule
        self.writer = writer
        self.env_name = env_name
        self.trajectory: Trajectory | None = None
        self._key: str | None = None  # the running episode's journal key

    # -- settings ---------------------------------------------------------------------------------------
    @property
    def ping_interval_s(self) -> float:
        """Keepalive: ping an idle connection this often (half the reply timeout, at most 20 s)."""
        return min(20.0, self.message_timeout_s / 2)

    @property
    def ping_timeout_s(self) -> float:
        """A pong later than the reply timeout means a hung server: the same limit as any other reply."""
        return self.message_timeout_s

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments of ``websockets`` ``connect``, the same for its sync and asyncio clients."""
        return {
            "open_timeout": self.connect_timeout_s,
            "ping_interval": self.ping_interval_s,
            "ping_timeout": self.ping_timeout_s,
            "close_timeout": min(2.0, self.connect_timeout_s),  # a hung peer never answers a close either
            "max_size": self.max_message_bytes,
            "compression": None,
            "proxy": None,
            "additional_headers": self.headers or None,
            "logger": TRANSPORT_LOG,
        }

    def http_options(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "timeout": self.message_timeout_s,
            "headers": self.headers,
            "trust_env": False,
        }

    # -- requests ---------------------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None,
        episode_id: str | None,
        messages: Sequence[dict[str, Any] | ChatMessage] | None,
        return_tokens: bool,
        metadata: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Op[StepResult]:
        """A reset; the running episode (if any) ends now as ``abandoned``: the caller has moved on."""
        self.end("abandoned")
        episode_id = episode_id or uuid.uuid4().hex
        data: dict[str, Any] = {**options, "episode_id": episode_id}
        if seed is not None:
            data["seed"] = seed
        if return_tokens:
            data["return_tokens"] = True
        chat = [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in messages or []]

        def read(reply: str | bytes) -> StepResult:
            result = self._observation(reply)
            if return_tokens and result.tokens is None:
                raise TokenizerUnavailableError(
                    f"asked for token ids (return_tokens=True) but {self.base_url} attached none: it has no "
                    "tokenizer support (a plain OpenEnv server, or one started without --tokenizer)",
                    code=ErrorCode.TOKENIZER_UNAVAILABLE,
                )
            trajectory = Trajectory(
                episode_id=episode_id,
                env_name=self.env_name,
                messages=chat,
                reset=result.record(),
                metadata=dict(metadata or {}),
            )
            self._key = self.writer.begin(trajectory) if self.writer is not None else None
            self.trajectory = trajectory
            return result

        return Op(json.dumps({"type": "reset", "data": data}), read, opens=True)

    def step(
        self,
        action: dict[str, Any] | BaseModel,
        action_text: str | None,
        action_token_ids: list[int] | None,
        action_logprobs: list[float] | None = None,
        sampling_temperature: float | None = None,
    ) -> Op[StepResult]:
        """A step; refused here, whatever the server would do, unless an episode is running."""
        trajectory = self.trajectory
        if trajectory is None:
            raise EpisodeNotStartedError("step before reset: call reset() first", code=ErrorCode.EPISODE_NOT_STARTED)
        if trajectory.status != "running":
            message = (
                f"episode {trajectory.episode_id} has ended ({trajectory.status}); call reset() to start a new one"
            )
            if trajectory.status == "cut":
                raise ConnectionLostError(
                    f"{message} (the connection was lost: {trajectory.error.message if trajectory.error else ''})"
                )
            cls = EpisodeDoneError if trajectory.status == "done" else EpisodeNotStartedError
            raise cls(message, code=cls.code)
        payload = action.model_dump(exclude_defaults=True) if isinstance(action, BaseModel) else dict(action)
        ids = list(action_token_ids) if action_token_ids is not None else None
        logprobs = list(action_logprobs) if action_logprobs is not None else None
        if logprobs is not None and len(logprobs) != len(ids or ()):
            raise ValueError("action_logprobs needs action_token_ids of the same length")

        def read(reply: str | bytes) -> StepResult:
            result = self._observation(reply)
            record = StepRecord(
                action=payload,
                action_text=action_text,
                action_token_ids=ids,
                action_logprobs=logprobs,
                sampling_temperature=sampling_temperature,
                observation=result.record(),
            )
            if self.writer is not None and self._key is not None:
                try:  # disk first: memory is never ahead of it
                    self.writer.step(self._key, len(trajectory.steps), record)
                except (OSError, ValueError) as e:  # the journal cannot take it: the episode cannot go on
                    trajectory.status, trajectory.error, self._key = "abandoned", EpisodeError.of(e), None
                    raise
            trajectory.steps.append(record)
            if result.done:
                self.end("done")
            return result

        return Op(json.dumps({"type": "step", "data": payload}), read, ends_on_loss=True)

    def state(self) -> Op[dict[str, Any]]:
        def read(reply: str | bytes) -> dict[str, Any]:
            frame = self._frame(reply)
            if frame.get("type") != "state":
                raise ValueError(f"expected a state frame, got {frame.get('type')!r}")
            return dict(frame.get("data") or {})

        return Op('{"type":"state"}', read, ends_on_loss=True)

    # -- outcomes ---------------------------------------------------------------------------------------
    def end(self, status: EpisodeStatus, error: BaseException | None = None) -> None:
        """End the running episode as ``status`` (journal first, then memory); no-op when none is running."""
        trajectory = self.trajectory
        if trajectory is None or trajectory.status != "running":
            return
        ended = trajectory.model_copy(
            update={"status": status, "error": None if error is None else EpisodeError.of(error)}
        )
        if self.writer is not None and self._key is not None and not self.writer.closed:
            self.writer.end(self._key, ended)
        trajectory.status, trajectory.error = ended.status, ended.error
        self._key = None

    def server_error(self, error: ServerError) -> bool:
        """Record what a server error means for the episode; True when the server closes the connection."""
        if error.code in CLOSING_CODES:
            self.end("cut", error)
            return True
        if error.code in _EPISODE_ENDING:
            self.end("abandoned", error)
        return False

    def answer(self, op: Op[T], reply: Any, drop: Callable[[], None]) -> T:
        """``op``'s result from its reply; a server error that closes the connection calls ``drop`` first."""
        try:
            return op.read(reply)
        except ServerError as e:
            if self.server_error(e):
                drop()
            raise

    def exchanging(self, op: Op[Any], drop: Callable[[], None]) -> Failures:
        """Wraps sending ``op`` and receiving its reply: any failure, an interruption included, calls ``drop`` (a
        late reply must never pair with the next request) and raises its typed error; the running episode is cut
        (or abandoned, when the caller was interrupted). Exceptions that are not transport failures pass as they are.
        """

        def failed(exc: BaseException) -> EnvClientError | None:
            drop()
            error = self.transport_error(exc)
            if op.ends_on_loss or error is None:
                self.end("abandoned" if error is None else "cut", error or exc)
            return error

        return Failures(BaseException, failed)

    def sending(self) -> AbstractContextManager[None]:
        """Wraps sending a request frame: a closed connection is not an error yet, because the server's refusal
        (e.g. ``CAPACITY_REACHED``) may already be buffered; the receive that follows reads it, or raises."""
        return suppress(ConnectionClosed)

    def closing(self) -> AbstractContextManager[None]:
        """Wraps the goodbye (``CLOSE_FRAME``, then the closing handshake): a connection already gone is fine."""
        return suppress(ConnectionClosed, OSError)

    def transport_error(self, exc: BaseException) -> EnvClientError | None:
        """Who closed what, as a typed error; None for exceptions that are not transport failures."""
        url = ws_url(self.base_url)
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            return EnvTimeoutError(
                f"no reply from {url} within message_timeout_s={self.message_timeout_s}s; the client closed the "
                "connection (the server is hung or overloaded)"
            )
        if isinstance(exc, ConnectionClosed):
            sent, rcvd = exc.sent, exc.rcvd
            if rcvd is None and sent is not None and "keepalive" in sent.reason:
                return EnvTimeoutError(
                    f"{url} did not answer a keepalive ping within {self.ping_timeout_s}s; the client closed the "
                    "connection (the server is hung)"
                )
            if rcvd is not None:
                return ConnectionLostError(
                    f"the server closed the connection to {url} (code {rcvd.code}, {rcvd.reason!r}); "
                    "call reset() to start a new episode"
                )
            return ConnectionLostError(
                f"the connection to {url} dropped without a close frame (the server process died or the network "
                "failed); call reset() to start a new episode"
            )
        if isinstance(exc, (InvalidHandshake, InvalidURI)):
            return ConnectionLostError(f"cannot connect to {url}: {exc}")
        if isinstance(exc, OSError):
            return ConnectionLostError(f"connection to {url} lost: {exc}")
        return None

    def connecting(self, op: Op[Any]) -> Failures:
        """Wraps opening the WebSocket for ``op``: refused unless ``op`` may open one (only a reset does: never a
        silent resume); a failure to connect raises its typed error."""
        if not op.opens:
            raise ConnectionLostError("not connected (the connection was lost): call reset() to start a new episode")
        return Failures(Exception, self._connect_error)

    def fetching(self, path: str) -> Failures:
        """Wraps one GET of a stateless route: a timeout or transport failure raises its typed error."""

        def failed(exc: BaseException) -> EnvClientError | None:
            if isinstance(exc, httpx.TimeoutException):
                return EnvTimeoutError(f"GET {path}: no answer within message_timeout_s={self.message_timeout_s}s")
            if isinstance(exc, httpx.HTTPError):
                return ConnectionLostError(f"GET {path}: {exc}")
            return None

        return Failures(Exception, failed)

    def _connect_error(self, exc: BaseException) -> EnvClientError | None:
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            return EnvTimeoutError(
                f"no connection to {self.base_url} within connect_timeout_s={self.connect_timeout_s}s"
            )
        return self.transport_error(exc)

    def http_reply(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            raise error_from_payload(_json_or_text(response))
        data: dict[str, Any] = response.json()
        return data

    # -- parsing ----------------------------------------------------------------------------------------
    def _frame(self, reply: str | bytes) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(reply)
        if frame.get("type") == "error":
            raise error_from_payload(frame.get("data") or {})
        return frame

    def _observation(self, reply: str | bytes) -> StepResult:
        frame = self._frame(reply)
        if frame.get("type") != "observation":
            raise ValueError(f"expected an observation frame, got {frame.get('type')!r}")
        return parse_observation(frame["data"], self.rule)


class Failures:
    """A ``with`` block whose exceptions of type ``catch`` are raised as what ``translate`` makes of them (after
    whatever it does first); an exception it returns None for propagates unchanged. A plain context manager, so the
    blocking and the asyncio client wrap their transport calls (awaited or not) in the same one."""

    def __init__(self, catch: type[BaseException], translate: Callable[[BaseException], EnvClientError | None]) -> None:
        self.catch = catch
        self.translate = translate

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None or not isinstance(exc, self.catch):
            return
        error = self.translate(exc)
        if error is not None:
            raise error from exc


def open_writer(writer: TrajectoryWriter | str | Path | None) -> TrajectoryWriter | None:
    if writer is None or isinstance(writer, TrajectoryWriter):
        return writer
    return TrajectoryWriter(writer)


def _json_or_text(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {"code": "EXECUTION_ERROR", "message": f"HTTP {response.status_code}: {response.text[:500]}"}
    if isinstance(data, dict) and "code" in data:
        return data
    return {"code": "EXECUTION_ERROR", "message": f"HTTP {response.status_code}: {data}"}
