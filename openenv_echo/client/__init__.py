"""The client side: sync and async clients that record role-tagged trajectories."""

from .aio import AsyncEnvClient
from .errors import (
    ActionValidationError,
    CapacityReachedError,
    ConnectionLostError,
    EnvClientError,
    EnvTimeoutError,
    EpisodeDoneError,
    EpisodeNotStartedError,
    ExecutionError,
    FactoryError,
    InvalidJSONError,
    MessageTooLargeError,
    SandboxLostError,
    ServerError,
    SessionError,
    StepTimeoutError,
    TokenizerUnavailableError,
    UnknownTypeError,
)
from .results import PlainTextRule, StepResult
from .runner import OnError, PolicyStep, RolloutAborted, Rollouts, run_episode, run_episodes, run_episodes_async
from .sync import EnvClient

__all__ = [
    "ActionValidationError",
    "AsyncEnvClient",
    "CapacityReachedError",
    "ConnectionLostError",
    "EnvClient",
    "EnvClientError",
    "EnvTimeoutError",
    "EpisodeDoneError",
    "EpisodeNotStartedError",
    "ExecutionError",
    "FactoryError",
    "InvalidJSONError",
    "MessageTooLargeError",
    "OnError",
    "PlainTextRule",
    "PolicyStep",
    "RolloutAborted",
    "Rollouts",
    "SandboxLostError",
    "ServerError",
    "SessionError",
    "StepResult",
    "StepTimeoutError",
    "TokenizerUnavailableError",
    "UnknownTypeError",
    "run_episode",
    "run_episodes",
    "run_episodes_async",
]
