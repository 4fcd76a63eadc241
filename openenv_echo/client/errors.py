"""Typed client exceptions: one per server error code, plus connection loss and timeouts."""

from __future__ import annotations

from typing import Any

from ..wire import ErrorCode


class EnvClientError(Exception):
    """Base of every exception the client raises."""


class ServerError(EnvClientError):
    """The server answered with an error frame (or a JSON HTTP error)."""

    code: ErrorCode | str = ErrorCode.EXECUTION_ERROR

    def __init__(self, message: str, code: ErrorCode | str | None = None, data: dict[str, Any] | None = None) -> None:
        shown = code or self.code
        super().__init__(f"{message} (code: {getattr(shown, 'value', shown)})")
        self.message = message
        if code is not None:
            self.code = code
        self.data = data or {}


class InvalidJSONError(ServerError):
    code = ErrorCode.INVALID_JSON


class UnknownTypeError(ServerError):
    code = ErrorCode.UNKNOWN_TYPE


class ActionValidationError(ServerError):
    """The action (or reset options, or frame) failed validation; ``errors`` holds pydantic's list."""

    code = ErrorCode.VALIDATION_ERROR

    @property
    def errors(self) -> list[dict[str, Any]]:
        return list(self.data.get("errors", []))


class ExecutionError(ServerError):
    code = ErrorCode.EXECUTION_ERROR


class CapacityReachedError(ServerError):
    code = ErrorCode.CAPACITY_REACHED


class FactoryError(ServerError):
    code = ErrorCode.FACTORY_ERROR


class SessionError(ServerError):
    code = ErrorCode.SESSION_ERROR


class MessageTooLargeError(ServerError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class EpisodeNotStartedError(ServerError):
    code = ErrorCode.EPISODE_NOT_STARTED


class EpisodeDoneError(ServerError):
    code = ErrorCode.EPISODE_DONE


class StepTimeoutError(ServerError):
    """The server gave up on a slow step (server-side ``step_timeout_s``)."""

    code = ErrorCode.STEP_TIMEOUT


class TokenizerUnavailableError(ServerError):
    code = ErrorCode.TOKENIZER_UNAVAILABLE


class SandboxLostError(ServerError):
    """The episode's sandbox (a container) died mid-episode: ``logs`` holds its last log lines, ``status`` how it
    ended. The session stays open; ``reset()`` starts a new episode in a fresh sandbox."""

    code = ErrorCode.SANDBOX_LOST

    @property
    def logs(self) -> str:
        return str(self.data.get("logs", ""))

    @property
    def status(self) -> str:
        return str(self.data.get("status", ""))


class ConnectionLostError(EnvClientError):
    """The connection dropped (server died, network, or the server closed it). The episode is gone: ``reset()``
    opens a new connection and starts a new episode explicitly."""


class EnvTimeoutError(EnvClientError):
    """No reply within the client's ``message_timeout_s`` (or no connection within ``connect_timeout_s``).

    The connection is dropped to avoid pairing a late reply with the next request."""


_BY_CODE: dict[str, type[ServerError]] = {
    cls.code.value: cls
    for cls in (
        InvalidJSONError,
        UnknownTypeError,
        ActionValidationError,
        ExecutionError,
        CapacityReachedError,
        FactoryError,
        SessionError,
        MessageTooLargeError,
        EpisodeNotStartedError,
        EpisodeDoneError,
        StepTimeoutError,
        TokenizerUnavailableError,
        SandboxLostError,
    )
}


def error_from_payload(data: dict[str, Any]) -> ServerError:
    """The typed exception for an error frame's ``data`` (unknown codes give a plain ``ServerError``)."""
    code = str(data.get("code", "UNKNOWN"))
    message = str(data.get("message", "server error"))
    cls = _BY_CODE.get(code, ServerError)
    return cls(message, code=ErrorCode(code) if code in _BY_CODE else code, data=data)
