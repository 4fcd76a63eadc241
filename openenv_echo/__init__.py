"""openenv-echo: role-tagged OpenEnv environments and per-token role masks for the ECHO objective.

The top-level package needs no torch: tokenization (``openenv_echo.tokenization``), the objective
(``openenv_echo.objective``) and trainer adapters (``openenv_echo.adapters``) import it lazily.
"""

from ._lazy import lazy_getattr
from .client import (
    AsyncEnvClient,
    EnvClient,
    PlainTextRule,
    PolicyStep,
    StepResult,
    run_episode,
    run_episodes,
)
from .client.errors import (
    ActionValidationError,
    CapacityReachedError,
    ConnectionLostError,
    EnvClientError,
    EnvTimeoutError,
    ServerError,
)
from .providers import DockerProvider, LocalProcessProvider, ProviderError
from .roles import ROLE_SPEC_VERSION, Role
from .server import BackgroundServer, EnvError, Environment, ServerLimits, create_app, serve
from .tokenizer_identity import tokenizer_fingerprint, tokenizer_identity
from .trajectory import (
    ChatMessage,
    ObservationRecord,
    StepRecord,
    Trajectory,
    TrajectoryWriter,
    iter_trajectories,
    read_trajectories,
)
from .wire import (
    Action,
    ErrorCode,
    Observation,
    ObservationTokens,
    Segment,
    State,
    TokenizerIdentity,
    context,
    env_output,
    warning,
)

__version__ = "0.1.0"

# torch-backed (and Ray-backed) names, imported on first use so that the server side never needs torch or Ray
_LAZY = {
    "EchoConfig": "openenv_echo.objective",
    "EchoBatch": "openenv_echo.objective",
    "echo_loss": "openenv_echo.objective",
    "group_advantages": "openenv_echo.objective",
    "token_logps": "openenv_echo.objective",
    "target_logps": "openenv_echo.objective",
    "hidden_logps": "openenv_echo.objective",
    "Denominators": "openenv_echo.objective",
    "TitoBuilder": "openenv_echo.tokenization",
    "TokenizedTrajectory": "openenv_echo.tokenization",
    "tokenize_trajectory": "openenv_echo.tokenization",
    "tokenize_offline": "openenv_echo.tokenization",
    "collate": "openenv_echo.tokenization",
    "build_tokenizer": "openenv_echo.tokenization",
    "load_tokenizer": "openenv_echo.tokenization",
    "segment_tokens": "openenv_echo.tokenization.observation_tokens",
    "RayProvider": "openenv_echo.providers.ray",  # Ray only on first use (the `fleet` extra)
}


__getattr__ = lazy_getattr(globals(), _LAZY, __name__)


__all__ = [
    "ROLE_SPEC_VERSION",
    "Action",
    "ActionValidationError",
    "AsyncEnvClient",
    "BackgroundServer",
    "CapacityReachedError",
    "ChatMessage",
    "ConnectionLostError",
    "DockerProvider",
    "EnvClient",
    "EnvClientError",
    "EnvError",
    "LocalProcessProvider",
    "ProviderError",
    "EnvTimeoutError",
    "Environment",
    "ErrorCode",
    "Observation",
    "ObservationRecord",
    "ObservationTokens",
    "PlainTextRule",
    "PolicyStep",
    "Role",
    "Segment",
    "ServerError",
    "ServerLimits",
    "State",
    "StepRecord",
    "StepResult",
    "TokenizerIdentity",
    "Trajectory",
    "TrajectoryWriter",
    "context",
    "create_app",
    "env_output",
    "iter_trajectories",
    "read_trajectories",
    "run_episode",
    "run_episodes",
    "segment_tokens",
    "serve",
    "tokenizer_fingerprint",
    "tokenizer_identity",
    "warning",
    *_LAZY,
]
