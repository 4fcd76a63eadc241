"""The envs the demo runs on, as the policy sees them: a system prompt, how the policy's text becomes an action,
and the scripted expert's actions with the text the policy would have written for them.

* ``terminal`` (the default): incident triage on a simulated Linux machine; the policy writes one shell command
  line per turn, and ``submit <kind> <service>`` to answer.
* ``sql``: a data question over a generated SQLite database; the policy writes one JSON object per turn,
  ``{"query": "SELECT ..."}`` or ``{"answer": "..."}``, as the env's own task text asks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DemoEnv:
    """One env of the demo: everything the demo needs to know about it besides the server."""

    name: str
    system_prompt: str
    to_action: Callable[[str], dict[str, Any]]
    """The policy's decoded text -> the action sent to the server (never raises: bad text is the env's to answer)."""
    expert: Callable[[int], list[dict[str, Any]]]
    """Seed -> the scripted expert's actions."""
    action_text: Callable[[dict[str, Any]], str]
    """An expert action -> the text the policy would write for it (what SFT trains on)."""
    max_env_steps: int
    """Default ``max_steps`` reset option (the expert's longest episode fits)."""


def _terminal_expert(seed: int) -> list[dict[str, Any]]:
    from ..envs.terminal import expert_actions

    return list(expert_actions(seed))


def _sql_expert(seed: int) -> list[dict[str, Any]]:
    from ..envs.sql.expert import expert_actions

    return list(expert_actions(seed))


def sql_action(text: str) -> dict[str, Any]:
    """``{"query": ...}`` or ``{"answer": ...}`` from the policy's JSON; anything else becomes ``{}``, which the env
    answers with its harness format warning (a step, like any malformed agent input)."""
    try:
        obj = json.loads(text.strip())
    except (ValueError, RecursionError):
        return {}
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if k in ("query", "answer") and isinstance(v, str)}


TERMINAL = DemoEnv(
    name="terminal",
    system_prompt=(
        "You are an on-call engineer at a Linux root shell. Reply with exactly one shell command line per turn and "
        "nothing else. When you know the root cause, reply: submit <kind> <service>"
    ),
    to_action=lambda text: {"command": text.strip()},
    expert=_terminal_expert,
    action_text=lambda a: str(a["command"]),
    max_env_steps=8,
)

SQL = DemoEnv(
    name="sql",
    system_prompt=(
        "You are a data analyst with read-only SQL access. Reply with exactly one JSON object per turn and nothing "
        'else: {"query": "<one SQLite statement>"}, or, when you know the answer, {"answer": "<the value>"}'
    ),
    to_action=sql_action,
    expert=_sql_expert,
    action_text=lambda a: json.dumps(a, ensure_ascii=False),
    max_env_steps=5,
)

DEMO_ENVS: dict[str, DemoEnv] = {e.name: e for e in (TERMINAL, SQL)}
"""``--env`` choices."""
