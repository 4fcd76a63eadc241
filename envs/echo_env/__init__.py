"""OpenEnv package of the openenv-echo `echo` environment."""

from .client import EchoEnv
from .models import EchoAction, EchoObservation

__all__ = ["EchoAction", "EchoEnv", "EchoObservation"]
