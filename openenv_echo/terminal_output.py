"""Printing role-tagged text to a terminal: a colour per role, or a ``⟦role⟧`` label per segment without colour.

Env text is written exactly as received: never through rich markup (``[echo] `` stays), never re-wrapped,
tabs kept. Colour is used only on a colour terminal; with ``--plain``, ``NO_COLOR``, a pipe or a log file each
segment is preceded by its label instead, e.g. ``⟦warning⟧[echo] ⟦env_output⟧hi``. Either way, control characters
other than newline and tab are shown escaped (``\\x1b``) so env text can neither restyle nor erase its label.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment as RichSegment
from rich.style import Style
from rich.text import Text

from .roles import Role
from .trajectory import Trajectory
from .wire import Segment

ROLE_STYLES: dict[Role, str] = {
    Role.CONTEXT: "bright_black",
    Role.ACTION: "bold cyan",
    Role.ENV_OUTPUT: "green",
    Role.WARNING: "yellow",
}

# what each role means, for a reader of the printed episode (the legend)
ROLE_MEANINGS: dict[Role, str] = {
    Role.CONTEXT: "the task, prompts and chat scaffolding",
    Role.ACTION: "what the agent sent",
    Role.ENV_OUTPUT: "what the environment answered (ECHO's world-model target)",
    Role.WARNING: "harness text around it, e.g. '[echo] ' (not an error)",
}

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def make_console(*, plain: bool = False, stderr: bool = False) -> Console:
    """A console that never interprets markup or re-wraps text; colourless when ``plain`` or ``NO_COLOR`` is set
    (rich itself turns colour off for pipes and files)."""
    colourless = plain or os.environ.get("NO_COLOR", "") != ""
    return Console(
        stderr=stderr,
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=True,
        color_system=None if colourless else "auto",
    )


def has_colour(console: Console) -> bool:
    """Whether ``console`` shows colour (else roles are shown by labels)."""
    return console.color_system is not None and not console.no_color


def role_label(role: Role) -> str:
    """The label printed before a segment when there is no colour: ``⟦env_output⟧``."""
    return f"⟦{role.value}⟧"


def legend(colour: bool = True) -> Text:
    """The roles, one line each: the name in its colour (or its label) and what it means."""
    text = Text("roles (who wrote each piece of text below):\n")
    width = max(len(role_label(r)) for r in ROLE_STYLES)
    for role, style in ROLE_STYLES.items():
        name = f" {role.value} " if colour else role_label(role)
        text.append("  ")
        text.append(name, style=f"reverse {style}" if colour else "")
        text.append(" " * (width - len(name) + 2) + ROLE_MEANINGS[role] + "\n")
    text.rstrip()
    return text


def _escaped(text: str) -> str:
    """``text`` with its control characters (other than newline and tab) as Python escapes, e.g. ``\\x1b``."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class _Exact:
    """A renderable of pre-styled pieces that rich passes through untouched (no markup, wrap or tab expansion)."""

    def __init__(self, pieces: list[RichSegment]) -> None:
        self.pieces = pieces

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.pieces


def write_segments(console: Console, segments: Iterable[tuple[Role, str]], *, end_line: bool = False) -> None:
    """Write ``(role, text)`` pairs exactly: styled by role on a colour terminal, else each after its label.
    ``end_line`` adds a newline if the text did not end with one (before a summary or a table)."""
    colour = has_colour(console)
    pieces: list[RichSegment] = []
    for role, text in segments:
        if not text:
            continue
        if colour:
            style = Style.parse(ROLE_STYLES[role])
            shown = _escaped(text)
            for line in shown.splitlines(True):
                body = line.rstrip("\n")
                pieces.append(RichSegment(body, style))
                if len(body) < len(line):
                    pieces.append(RichSegment(line[len(body) :]))
        else:
            pieces.append(RichSegment(role_label(role) + _escaped(text)))
    if end_line and pieces and not pieces[-1].text.endswith("\n"):
        pieces.append(RichSegment("\n"))
    console.print(_Exact(pieces), end="")


def action_segment(action_text: str | None, action: dict[str, Any]) -> Segment:
    """The action as the trajectory shows it: the text the agent wrote, else ``> {json}``; one line."""
    text = action_text if action_text is not None else "> " + json.dumps(action, ensure_ascii=False)
    return Segment(role=Role.ACTION, text=text if text.endswith("\n") else text + "\n")


def trajectory_segments(traj: Trajectory) -> list[Segment]:
    """The whole conversation as segments: messages, reset observation, then actions and observations."""
    out = [Segment(role=Role.CONTEXT, text=f"[{m.role}] {m.content}\n") for m in traj.messages]
    if traj.reset is not None:
        out.extend(traj.reset.segments)
    for step in traj.steps:
        out.append(action_segment(step.action_text, step.action))
        out.extend(step.observation.segments)
    return out


def print_segments(console: Console, segments: Iterable[Segment], *, end_line: bool = False) -> None:
    """Print segments exactly, by role (see the module docstring for the format)."""
    write_segments(console, ((s.role, s.text) for s in segments), end_line=end_line)


def role_chars(traj: Trajectory) -> Counter[Role]:
    """Characters per role over the whole trajectory."""
    counts: Counter[Role] = Counter()
    for seg in trajectory_segments(traj):
        counts[seg.role] += len(seg.text)
    return counts


def reward_text(traj: Trajectory) -> str:
    """``reward=R`` with where R comes from: the sum of the steps' rewards (the first 8 shown)."""
    rewards = [f"{s.observation.reward:g}" for s in traj.steps if s.observation.reward is not None]
    if len(rewards) < 2:
        return f"reward={traj.total_reward:g}"
    shown = " + ".join(rewards[:8]) + (" + ..." if len(rewards) > 8 else "")
    return f"reward={traj.total_reward:g} (sum of step rewards: {shown})"


def summary_line(traj: Trajectory) -> str:
    """``episode <id>  steps=N  reward=R (sum of step rewards: ...)  done=B  chars: context=.., ...``."""
    counts = role_chars(traj)
    chars = ", ".join(f"{r.value}={counts[r]}" for r in Role)
    return f"episode {traj.episode_id}  steps={len(traj.steps)}  {reward_text(traj)}  done={traj.done}  chars: {chars}"


def print_trajectory(traj: Trajectory, console: Console) -> Counter[Role]:
    """Print ``traj`` by role (legend, text, summary line); returns the characters per role."""
    console.print(legend(has_colour(console)))
    print_segments(console, trajectory_segments(traj), end_line=True)
    console.print(summary_line(traj))
    return role_chars(traj)
