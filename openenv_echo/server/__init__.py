"""The server side of openenv-echo: environments, the FastAPI app and its limits."""

from .app import create_app
from .environment import EnvError, Environment, EpisodeDone, EpisodeNotStarted, MaxSteps, ToolSpec
from .limits import ServerLimits
from .serve import serve, uvicorn_config

__all__ = [
    "Environment",
    "EnvError",
    "EpisodeDone",
    "EpisodeNotStarted",
    "MaxSteps",
    "ServerLimits",
    "ToolSpec",
    "create_app",
    "serve",
    "uvicorn_config",
]

from .background import BackgroundServer, free_port  # noqa: E402

__all__ += ["BackgroundServer", "free_port"]
