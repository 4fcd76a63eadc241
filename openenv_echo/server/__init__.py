"""The server side of openenv-echo: environments, the FastAPI app and its limits."""

from .app import create_app
from .environment import EnvError, Environment, EpisodeDone, EpisodeNotStarted, MaxSteps
from .limits import ServerLimits
from .serve import serve, uvicorn_config
from .tools import EnvTool

__all__ = [
    "EnvError",
    "EnvTool",
    "Environment",
    "EpisodeDone",
    "EpisodeNotStarted",
    "MaxSteps",
    "ServerLimits",
    "create_app",
    "serve",
    "uvicorn_config",
]

from .background import BackgroundServer, free_port

__all__ += ["BackgroundServer", "free_port"]
