"""``EnvClient``: the blocking face of the client core (WebSocket for episodes, HTTP for the stateless routes)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel
from websockets.sync.client import ClientConnection, connect

from ..trajectory import ChatMessage
from .base import ClientBase
from .core import CLOSE_FRAME, DEFAULT_MAX_MESSAGE_BYTES, Op, ws_url
from .results import StepResult

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "EnvClient"]

T = TypeVar("T")


class EnvClient(ClientBase):
    """Runs episodes against any OpenEnv-compatible server and records them as ``Trajectory`` objects.

    One client is one server session (one WebSocket). ``reset`` starts an episode (reconnecting if the
    connection was lost), ``step`` sends an action, and ``trajectory`` is the episode recorded so far. Use
    it as a context manager, or call ``close``. ``writer`` (a path or ``TrajectoryWriter``) journals every
    step as it completes and every episode's end. A hung server raises ``EnvTimeoutError`` within
    ``message_timeout_s``; a lost connection raises ``ConnectionLostError`` and cuts the episode.
    """

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._ws: ClientConnection | None = None
        self._http: httpx.Client | None = None

    # -- episode API ------------------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        *,
        messages: Sequence[dict[str, Any] | ChatMessage] | None = None,
        return_tokens: bool = False,
        metadata: dict[str, Any] | None = None,
        **options: Any,
    ) -> StepResult:
        """Start a new episode. ``messages`` are the policy's initial chat messages (recorded as context);
        ``options`` are env-specific reset options; ``return_tokens`` asks for server-side token ids (a server
        that cannot attach them raises ``TokenizerUnavailableError``)."""
        return self._run(self._core.reset(seed, episode_id, messages, return_tokens, metadata, options))

    def step(
        self,
        action: dict[str, Any] | BaseModel,
        *,
        action_text: str | None = None,
        action_token_ids: list[int] | None = None,
        action_logprobs: list[float] | None = None,
        sampling_temperature: float | None = None,
    ) -> StepResult:
        """Send one action. ``action_text`` / ``action_token_ids`` (with the sampler's ``action_logprobs`` and
        ``sampling_temperature``) are what the policy produced for it; they are recorded, never sent.
        Refused (``EpisodeDoneError``) once the episode has ended, whatever the server would do."""
        return self._run(self._core.step(action, action_text, action_token_ids, action_logprobs, sampling_temperature))

    def state(self) -> dict[str, Any]:
        return self._run(self._core.state())

    def close(self) -> None:
        """End the session (``close`` frame), end a running episode as ``abandoned``, stop an owned provider."""
        self._core.end("abandoned")
        if self._ws is not None:
            ws, self._ws = self._ws, None
            with self._core.closing():
                ws.send(CLOSE_FRAME)
                ws.close()
        if self._http is not None:
            self._http.close()
            self._http = None
        self._close_writer()
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
            self._http = httpx.Client(**self._core.http_options())
        with self._core.fetching(path):
            response = self._http.get(path)
        return self._core.http_reply(response)

    # -- transport --------------------------------------------------------------------------------------
    def _run(self, op: Op[T]) -> T:
        if self._ws is None:
            with self._core.connecting(op):
                # entered as a context manager: the form every websockets version takes without a warning
                self._ws = connect(ws_url(self.base_url), **self._core.connect_options()).__enter__()
        ws = self._ws
        with self._core.exchanging(op, self._drop):
            with self._core.sending():
                ws.send(op.frame)
            reply = ws.recv(timeout=self.message_timeout_s)
        return self._core.answer(op, reply, self._drop)

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            ws.socket.shutdown(socket.SHUT_RDWR)  # no closing handshake with a peer that may be hung
        except OSError:
            pass
        ws.close()
