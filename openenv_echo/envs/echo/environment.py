"""The echo environment: the harness wraps each echoed message in a ``warning`` prefix.

Reset gives the task as ``context``; each step answers ``[echo] `` (warning) + the message (env_output), with a
format warning for an empty message. Reward is the message length / 100 (capped at 1); the episode ends on
``bye`` or after ``max_steps`` (a reset option, default 8).
"""

from __future__ import annotations

from ...server.environment import Environment, MaxSteps
from ...server.tools import EnvTool
from ...wire import context, env_output, warning
from .models import EchoAction, EchoObservation, MessageArguments

PROMPT = "You are talking to an echo server. Send a message and it will repeat it. Say 'bye' to finish.\n"
PREFIX = "[echo] "


class EchoEnvironment(Environment[EchoAction, EchoObservation]):
    """Echoes messages back, wrapped in a harness prefix."""

    name = "echo"
    action_type = EchoAction
    observation_type = EchoObservation
    TOOLS = (
        EnvTool(
            name="echo_message",
            description="Echo back the provided message.",
            arguments=MessageArguments,
            action=lambda a: EchoAction(message=a.message),
            result=lambda obs: obs.echoed_message,
        ),
        EnvTool(
            name="echo_with_length",
            description="Echo back the message with its length.",
            arguments=MessageArguments,
            action=lambda a: EchoAction(message=a.message),
            result=lambda obs: {"message": obs.echoed_message, "length": obs.message_length},
        ),
    )

    def __init__(self) -> None:
        super().__init__()
        self._max_steps = 8

    def _reset(self, seed: int | None, max_steps: MaxSteps = 8) -> EchoObservation:
        self._max_steps = max_steps
        return EchoObservation(segments=[context(PROMPT)])

    def _step(self, action: EchoAction) -> EchoObservation:
        msg = action.message
        done = msg.strip().lower() == "bye" or self._step_count + 1 >= self._max_steps
        if not msg:
            segments = [warning("WARNING: empty message; nothing to echo.\n")]
        else:
            segments = [warning(PREFIX), env_output(msg + "\n")]
        return EchoObservation(
            segments=segments,
            echoed_message=msg,
            message_length=len(msg),
            reward=min(len(msg) / 100.0, 1.0),
            done=done,
        )
