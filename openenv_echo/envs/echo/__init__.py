"""echo: the canonical minimal environment, for protocol conformance and benchmarks."""

from .environment import EchoEnvironment
from .models import EchoAction, EchoObservation

__all__ = ["EchoAction", "EchoEnvironment", "EchoObservation", "expert_actions"]


def expert_actions(seed: int) -> list[dict[str, str]]:
    """The scripted episode of the echo env (``openenv-echo quickstart echo``, the package oracle)."""
    words = ["hello", "world models", "learn what tools say back", "", "bye"]
    return [{"message": w} for w in words[seed % 2 :]]
