"""echo: the canonical minimal environment, for protocol conformance and benchmarks."""

from .environment import EchoEnvironment
from .models import EchoAction, EchoObservation

__all__ = ["EchoAction", "EchoEnvironment", "EchoObservation"]


def demo_actions(seed: int) -> list[dict[str, str]]:
    """A short scripted episode for ``openenv-echo quickstart echo``."""
    words = ["hello", "world models", "learn what tools say back", "", "bye"]
    return [{"message": w} for w in words[seed % 2 :]]
