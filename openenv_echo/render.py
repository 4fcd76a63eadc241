"""Terminal rendering of trajectories, colored by role (rich)."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
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


def legend() -> Text:
    text = Text("roles: ")
    for role, style in ROLE_STYLES.items():
        text.append(f" {role.value} ", style=f"reverse {style}")
        text.append(" ")
    return text


def trajectory_segments(traj: Trajectory) -> list[Segment]:
    """The whole conversation as segments: messages, reset observation, then actions and observations."""
    out = [Segment(role=Role.CONTEXT, text=f"[{m.role}] {m.content}\n") for m in traj.messages]
    if traj.reset is not None:
        out.extend(traj.reset.segments)
    for step in traj.steps:
        text = step.action_text if step.action_text is not None else _action_text(step.action)
        out.append(Segment(role=Role.ACTION, text=text if text.endswith("\n") else text + "\n"))
        out.extend(step.observation.segments)
    return out


def _action_text(action: dict) -> str:
    import json

    return "> " + json.dumps(action, ensure_ascii=False)


def render_trajectory(traj: Trajectory, console: Console | None = None) -> Counter[Role]:
    """Print ``traj`` colored by role with per-role character counts; returns the counts."""
    console = console or Console()
    counts: Counter[Role] = Counter()
    body = Text()
    for seg in trajectory_segments(traj):
        body.append(seg.text, style=ROLE_STYLES[seg.role])
        counts[seg.role] += len(seg.text)
    console.print(legend())
    console.print(body, end="")
    summary = ", ".join(f"{r.value}={counts[r]}" for r in Role)
    console.print(
        f"[bold]episode[/] {traj.episode_id}  steps={len(traj.steps)}  reward={traj.total_reward:g}  "
        f"done={traj.done}  chars: {summary}"
    )
    return counts
