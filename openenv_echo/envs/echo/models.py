"""Wire models of the echo environment."""

from __future__ import annotations

from pydantic import Field

from ...wire import Action, Observation


class EchoAction(Action):
    message: str = Field(description="Text to send; the environment echoes it back.", max_length=65536)


class EchoObservation(Observation):
    message_length: int = Field(default=0, ge=0, description="Length of the echoed message in characters.")
