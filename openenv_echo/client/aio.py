"""``AsyncEnvClient``: the asyncio twin of ``EnvClient`` (same API, awaitable), for many sessions at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from ..trajectory import ChatMessage, Trajectory, TrajectoryWriter
from ..wire import CLOSING_CODES
from .episode import EpisodeRecorder, http_url, open_writer, ws_url
from .errors import ConnectionLostError, EnvTimeoutError, ServerError, error_from_payload
from .results import PlainTextRule, SegmentRule, StepResult
from .sync import DEFAULT_MAX_MESSAGE_BYTES, _closed_error, _json_or_text

T = TypeVar("T")


class AsyncEnvClient:
    """Asynchronous ``EnvClient``: ``async with AsyncEnvClient(url) as env: await env.reset()``."""

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
    ) -> None:
        self.base_url = http_url(base_url)
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self.max_message_bytes = max_message_bytes
        self.headers = headers or {}
        self._recorder = EpisodeRecorder(segment_rule, open_writer(writer), env_name)
        self._owns_writer = not isinstance(writer, TrajectoryWriter)
        self._ws: ClientConnection | None = None
        self._http: httpx.AsyncClient | None = None

    @property
    def trajectory(self) -> Trajectory | None:
        return self._recorder.trajectory

    async def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        *,
        messages: list[dict[str, Any] | ChatMessage] | None = None,
        return_tokens: bool = False,
        metadata: dict[str, Any] | None = None,
        **options: Any,
    ) -> StepResult:
        frame, episode_id = self._recorder.reset_frame(seed, episode_id, return_tokens, options)
        return await self._call(
            frame, lambda r: self._recorder.on_reset_reply(r, episode_id, messages, metadata), reconnect=True
        )

    async def step(
        self,
        action: dict[str, Any] | BaseModel,
        *,
        action_text: str | None = None,
        action_token_ids: list[int] | None = None,
    ) -> StepResult:
        frame = self._recorder.step_frame(action, action_text, action_token_ids)
        try:
            return await self._call(frame, self._recorder.on_step_reply)
        finally:
            self._recorder.abandon_step()

    async def state(self) -> dict[str, Any]:
        return await self._call('{"type":"state"}', self._recorder.on_state_reply)

    async def close(self) -> None:
        self._recorder.finish()
        if self._ws is not None:
            try:
                await self._ws.send('{"type":"close"}')
                await self._ws.close()
            except Exception:
                pass
            self._ws = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._owns_writer and self._recorder.writer is not None:
            self._recorder.writer.close()
            self._recorder.writer = None

    async def __aenter__(self) -> AsyncEnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def health(self) -> dict[str, Any]:
        return await self._get("/health")

    async def metadata(self) -> dict[str, Any]:
        return await self._get("/metadata")

    async def schema(self) -> dict[str, Any]:
        return await self._get("/schema")

    async def _get(self, path: str) -> dict[str, Any]:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.base_url, timeout=self.message_timeout_s, headers=self.headers, trust_env=False
            )
        try:
            response = await self._http.get(path)
        except httpx.TimeoutException as e:
            raise EnvTimeoutError(f"GET {path}: no answer within {self.message_timeout_s}s") from e
        except httpx.HTTPError as e:
            raise ConnectionLostError(f"GET {path}: {e}") from e
        if response.status_code >= 400:
            raise error_from_payload(_json_or_text(response))
        return response.json()

    async def _connect(self) -> ClientConnection:
        try:
            return await connect(
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

    async def _call(self, frame: str, parse: Callable[[str | bytes], T], reconnect: bool = False) -> T:
        try:
            return parse(await self._request(frame, reconnect))
        except ServerError as e:
            if e.code in CLOSING_CODES:
                await self._drop()
            raise

    async def _request(self, frame: str, reconnect: bool = False) -> str | bytes:
        if self._ws is None:
            if not reconnect and self._recorder.trajectory is not None:
                raise ConnectionLostError(
                    "not connected (the connection was lost): call reset() to start a new episode"
                )
            self._ws = await self._connect()
        try:
            try:
                await self._ws.send(frame)
            except ConnectionClosed:
                pass  # a refusal (e.g. CAPACITY_REACHED) may already be buffered: recv reads it, or raises
            return await asyncio.wait_for(self._ws.recv(), self.message_timeout_s)
        except (TimeoutError, asyncio.TimeoutError) as e:
            await self._drop()
            raise EnvTimeoutError(f"no reply within {self.message_timeout_s}s; connection dropped") from e
        except ConnectionClosed as e:
            await self._drop()
            raise _closed_error(e) from e
        except OSError as e:
            await self._drop()
            raise ConnectionLostError(f"connection to {self.base_url} lost: {e}") from e

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await ws.close()
            except Exception:
                pass
