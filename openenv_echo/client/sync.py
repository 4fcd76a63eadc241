"""``EnvClient``: the synchronous client (WebSocket for episodes, HTTP for the stateless routes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import ClientConnection, connect

from ..trajectory import ChatMessage, Trajectory, TrajectoryWriter
from ..wire import CLOSING_CODES
from .episode import EpisodeRecorder, http_url, open_writer, ws_url
from .errors import ConnectionLostError, EnvClientError, EnvTimeoutError, ServerError, error_from_payload
from .results import PlainTextRule, SegmentRule, StepResult

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
T = TypeVar("T")


class EnvClient:
    """Runs episodes against any OpenEnv-compatible server and records them as ``Trajectory`` objects.

    One client is one server session (one WebSocket). ``reset`` starts an episode (reconnecting if the
    connection was lost), ``step`` sends an action, and ``trajectory`` is the episode recorded so far. Use
    it as a context manager, or call ``close``. ``writer`` (a path or ``TrajectoryWriter``) receives every
    episode when it ends.
    """

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        segment_rule: SegmentRule = PlainTextRule(),
        writer: TrajectoryWriter | str | Path | None = None,
        env_name: str | None = None,
        headers: dict[str, str] | None = None,
        provider: Any = None,
    ) -> None:
        self.base_url = http_url(base_url)
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self.max_message_bytes = max_message_bytes
        self.headers = headers or {}
        self._recorder = EpisodeRecorder(segment_rule, open_writer(writer), env_name)
        self._owns_writer = not isinstance(writer, TrajectoryWriter)
        self._ws: ClientConnection | None = None
        self._http: httpx.Client | None = None
        self._provider = provider

    @classmethod
    def from_provider(cls, provider: Any, **kwargs: Any) -> EnvClient:
        """Start ``provider`` (local process or Docker) and connect to it; ``close`` stops it again."""
        return cls(provider.start(), provider=provider, **kwargs)

    # -- episode API ------------------------------------------------------------------------------------
    @property
    def trajectory(self) -> Trajectory | None:
        """The episode being recorded (or the last one)."""
        return self._recorder.trajectory

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        *,
        messages: list[dict[str, Any] | ChatMessage] | None = None,
        return_tokens: bool = False,
        metadata: dict[str, Any] | None = None,
        **options: Any,
    ) -> StepResult:
        """Start a new episode. ``messages`` are the policy's initial chat messages (recorded as context);
        ``options`` are env-specific reset options; ``return_tokens`` asks for server-side token ids."""
        frame, episode_id = self._recorder.reset_frame(seed, episode_id, return_tokens, options)
        return self._call(
            frame, lambda r: self._recorder.on_reset_reply(r, episode_id, messages, metadata), reconnect=True
        )

    def step(
        self,
        action: dict[str, Any] | BaseModel,
        *,
        action_text: str | None = None,
        action_token_ids: list[int] | None = None,
    ) -> StepResult:
        """Send one action. ``action_text`` / ``action_token_ids`` are what the policy produced for it."""
        frame = self._recorder.step_frame(action, action_text, action_token_ids)
        try:
            return self._call(frame, self._recorder.on_step_reply)
        finally:
            self._recorder.abandon_step()

    def state(self) -> dict[str, Any]:
        return self._call('{"type":"state"}', self._recorder.on_state_reply)

    def close(self) -> None:
        """End the session (``close`` frame), write an unfinished episode, stop an owned provider."""
        self._recorder.finish()
        if self._ws is not None:
            try:
                self._ws.send('{"type":"close"}')
                self._ws.close()
            except Exception:
                pass
            self._ws = None
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._owns_writer and self._recorder.writer is not None:
            self._recorder.writer.close()
            self._recorder.writer = None
        if self._provider is not None:
            self._provider.stop()
            self._provider = None

    def __enter__(self) -> EnvClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- stateless HTTP routes --------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._get("/health")

    def metadata(self) -> dict[str, Any]:
        return self._get("/metadata")

    def schema(self) -> dict[str, Any]:
        return self._get("/schema")

    def _get(self, path: str) -> dict[str, Any]:
        if self._http is None:
            self._http = httpx.Client(
                base_url=self.base_url, timeout=self.message_timeout_s, headers=self.headers, trust_env=False
            )
        try:
            response = self._http.get(path)
        except httpx.TimeoutException as e:
            raise EnvTimeoutError(f"GET {path}: no answer within {self.message_timeout_s}s") from e
        except httpx.HTTPError as e:
            raise ConnectionLostError(f"GET {path}: {e}") from e
        if response.status_code >= 400:
            raise error_from_payload(_json_or_text(response))
        return response.json()

    # -- transport --------------------------------------------------------------------------------------
    def _connect(self) -> ClientConnection:
        try:
            return connect(
                ws_url(self.base_url),
                open_timeout=self.connect_timeout_s,
                max_size=self.max_message_bytes,
                compression=None,
                proxy=None,
                additional_headers=self.headers or None,
            )
        except TimeoutError as e:
            raise EnvTimeoutError(f"no connection to {self.base_url} within {self.connect_timeout_s}s") from e
        except (OSError, InvalidHandshake, InvalidURI) as e:
            raise ConnectionLostError(f"cannot connect to {ws_url(self.base_url)}: {e}") from e

    def _call(self, frame: str, parse: Callable[[str | bytes], T], reconnect: bool = False) -> T:
        try:
            return parse(self._request(frame, reconnect))
        except ServerError as e:
            if e.code in CLOSING_CODES:  # the server closes the socket after these
                self._drop()
            raise

    def _request(self, frame: str, reconnect: bool = False) -> str | bytes:
        if self._ws is None:
            if not reconnect and self._recorder.trajectory is not None:
                raise ConnectionLostError(
                    "not connected (the connection was lost): call reset() to start a new episode"
                )
            self._ws = self._connect()
        try:
            try:
                self._ws.send(frame)
            except ConnectionClosed:
                pass  # a refusal (e.g. CAPACITY_REACHED) may already be buffered: recv reads it, or raises
            return self._ws.recv(timeout=self.message_timeout_s)
        except TimeoutError as e:
            self._drop()
            raise EnvTimeoutError(f"no reply within {self.message_timeout_s}s; connection dropped") from e
        except ConnectionClosed as e:
            self._drop()
            raise _closed_error(e) from e
        except OSError as e:
            self._drop()
            raise ConnectionLostError(f"connection to {self.base_url} lost: {e}") from e

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:
                pass


def _closed_error(e: ConnectionClosed) -> EnvClientError:
    rcvd = e.rcvd
    detail = f"code {rcvd.code}, {rcvd.reason!r}" if rcvd is not None else "no close frame"
    return ConnectionLostError(f"connection closed by the server ({detail}); call reset() to start a new episode")


def _json_or_text(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {"code": "EXECUTION_ERROR", "message": f"HTTP {response.status_code}: {response.text[:500]}"}
    if isinstance(data, dict) and "code" in data:
        return data
    return {"code": "EXECUTION_ERROR", "message": f"HTTP {response.status_code}: {data}"}
