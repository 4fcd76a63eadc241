"""``AsyncEnvClient``: the asyncio face of the client core (same API, awaitable), for many sessions at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect

from ..trajectory import ChatMessage
from .base import ClientBase
from .core import CLOSE_FRAME, Op, ws_url
from .results import StepResult

T = TypeVar("T")


class AsyncEnvClient(ClientBase):
    """Asynchronous ``EnvClient``: ``async with AsyncEnvClient(url) as env: await env.reset()``."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._ws: ClientConnection | None = None
        self._http: httpx.AsyncClient | None = None

    async def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        *,
        messages: Sequence[dict[str, Any] | ChatMessage] | None = None,
        return_tokens: bool = False,
        metadata: dict[str, Any] | None = None,
        **options: Any,
    ) -> StepResult:
        """See ``EnvClient.reset``."""
        return await self._run(self._core.reset(seed, episode_id, messages, return_tokens, metadata, options))

    async def step(
        self,
        action: dict[str, Any] | BaseModel,
        *,
        action_text: str | None = None,
        action_token_ids: list[int] | None = None,
        action_logprobs: list[float] | None = None,
        sampling_temperature: float | None = None,
    ) -> StepResult:
        """See ``EnvClient.step``."""
        return await self._run(
            self._core.step(action, action_text, action_token_ids, action_logprobs, sampling_temperature)
        )

    async def state(self) -> dict[str, Any]:
        return await self._run(self._core.state())

    async def close(self) -> None:
        """See ``EnvClient.close`` (an owned provider is stopped in a worker thread)."""
        self._core.end("abandoned")
        if self._ws is not None:
            ws, self._ws = self._ws, None
            try:
                with self._core.closing():
                    await ws.send(CLOSE_FRAME)
                    await ws.close()
            finally:
                ws.transport.abort()  # a no-op after a clean close; frees the socket when close was interrupted
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self._close_writer()
        if self._provider is not None:
            provider, self._provider = self._provider, None
            await asyncio.to_thread(provider.stop)

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
            self._http = httpx.AsyncClient(**self._core.http_options())
        with self._core.fetching(path):
            response = await self._http.get(path)
        return self._core.http_reply(response)

    async def _run(self, op: Op[T]) -> T:
        if self._ws is None:
            with self._core.connecting(op):
                self._ws = await connect(ws_url(self.base_url), **self._core.connect_options())
        ws = self._ws
        with self._core.exchanging(op, self._drop):
            with self._core.sending():
                await ws.send(op.frame)
            reply = await asyncio.wait_for(ws.recv(), self.message_timeout_s)
        return self._core.answer(op, reply, self._drop)

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.transport.abort()  # no closing handshake with a peer that may be hung
