"""Wire models of the echo environment: OpenEnv's echo action and observation fields, plus role segments."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ...wire import Action, Observation


class EchoAction(Action):
    message: str = Field(description="Text to send; the environment echoes it back.", max_length=65536)


class EchoObservation(Observation):
    echoed_message: str = Field(default="", description="The echoed message from the environment.")
    message_length: int = Field(default=0, ge=0, description="Length of the echoed message in characters.")


class MessageArguments(BaseModel):
    """Arguments of the ``echo_message`` and ``echo_with_length`` tools."""

    message: str = Field(description="The message to echo back.", max_length=65536)
