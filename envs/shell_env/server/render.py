"""Role tagging of the shell env, decided where the text is emitted (RFC 0001, section 7).

* reset: the harness's framing and the task's ``instruction.md`` are ``context``;
* step: the prompt and command echo ``<cwd>$ <command>`` is ``warning``; what the command's processes wrote is
  ``env_output``, one segment per run of one stream in the order the frames arrived, stderr runs marked
  ``metadata={"stream": "stderr"}``; then, each a ``warning`` segment: the newline the harness adds when the output
  did not end with one, the truncation notice, the kill notice (wall time, output flood), the shell-exit notice, the
  foreign-report notice, what the driver or the engine complained of, the OOM notice, the process-limit notices,
  the restart notices (a working directory that is gone), the background-process notice, and the exit status line
  ``[exit status N]``;
* submit (and the step limit): the echo, the verdict and the reward are ``warning``.

Nothing here touches Docker: the tests render hand-made results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from openenv_echo.wire import Segment, context, env_output, warning

from .streams import STDERR

ECHO_CHARS = 512
"""Longer commands are shortened in the echo (the agent's own text is in its action)."""

Ending = Literal["exited", "timeout", "flood", "shell_exit", "bad_report"]


@dataclass
class CommandResult:
    """What running one command produced (filled by the sandbox, rendered by ``step_segments``)."""

    chunks: list[tuple[int, str]]
    """``(stream, text)`` in arrival order (``streams.STDOUT``/``STDERR``)."""
    total_bytes: int
    cap_bytes: int
    ending: Ending
    """``exited``: the command finished; ``timeout``/``flood``: the harness killed it; ``shell_exit``: the shell
    itself exited (``exit``, ``set -e``, a signal); ``bad_report``: the end-of-step report was not the harness's
    (something wrote on its descriptor), so the harness killed everything and restarted the shell."""
    exit_status: int | None
    """The command's status (``exited``) or the shell's (``shell_exit``); None when the harness killed it."""
    cwd: str
    """The shell's working directory afterwards."""
    timeout_s: float
    background: list[tuple[int, str]] = field(default_factory=list)
    """Agent processes left running that no earlier step reported: ``(pid, name)``."""
    oom_kills: int = 0
    """Processes the kernel's OOM killer stopped during the step."""
    memory_mb: int = 0
    forks_refused: int = 0
    """New processes the kernel refused during the step: the container was at its pids limit."""
    pids_max: int = 0
    pids_reset: bool = False
    """The step hit the pids limit: every agent process was stopped and the shell restarted (the rule)."""
    problems: list[str] = field(default_factory=list)
    """Harness-side text of the step (the driver's or the engine's complaints): shown as ``warning``."""
    notices: list[str] = field(default_factory=list)
    """Notices of the shell's restart (e.g. its directory was gone)."""

    @property
    def output(self) -> str:
        return "".join(text for _, text in self.chunks)

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.cap_bytes


def reset_segments(instruction: str, workdir: str) -> list[Segment]:
    """The reset observation: framing and instruction, all ``context``."""
    framing = (
        f"You are in a bash shell in a Linux container (working directory {workdir}, no network). Each action is "
        "one command line; its output and exit status come back. Send `submit` (alone on the line) when the task "
        "is done: the task's tests then check the container's state.\n\n"
    )
    return [context(framing + instruction.rstrip("\n") + "\n")]


def echo_segment(cwd: str, command: str) -> Segment:
    """``<cwd>$ <command>`` as the prompt line (``warning``)."""
    shown = command if len(command) <= ECHO_CHARS else command[:ECHO_CHARS] + f"… [{len(command) - ECHO_CHARS} more]"
    shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")
    return warning(f"{cwd}$ {shown}\n")


def step_segments(cwd_before: str, command: str, result: CommandResult) -> list[Segment]:
    """The segments of one command's observation, in the order of the module docstring."""
    segments = [echo_segment(cwd_before, command)]
    for stream, text in result.chunks:
        segments.append(env_output(text, {"stream": "stderr"} if stream == STDERR else None))
    notices: list[str] = []
    if result.truncated:
        notices.append(
            f"[harness: output truncated: the command wrote {result.total_bytes} bytes, the first "
            f"{result.cap_bytes} are shown]"
        )
    if result.ending == "timeout":
        notices.append(
            f"[harness: the command was still running after {result.timeout_s:g} s (its wall-time limit): it was "
            f"killed with every process of the agent; a new shell starts in {result.cwd}, variables reset]"
        )
    elif result.ending == "flood":
        notices.append(
            f"[harness: the command kept writing output ({result.total_bytes} bytes): it was killed with every "
            f"process of the agent; a new shell starts in {result.cwd}, variables reset]"
        )
    elif result.ending == "shell_exit":
        notices.append(
            f"[harness: the shell exited with status {result.exit_status}; a new shell starts in {result.cwd}, "
            "variables reset]"
        )
    elif result.ending == "bad_report":
        notices.append(
            "[harness: the shell's end-of-step report was not the harness's (something wrote on its descriptor): "
            f"every process of the agent was stopped; a new shell starts in {result.cwd}, variables reset]"
        )
    for problem in result.problems:
        text = " ".join(problem.split())
        notices.append(f"[harness: {text[:300]}{'…' if len(text) > 300 else ''}]")
    if result.oom_kills:
        notices.append(
            f"[harness: the kernel's OOM killer stopped {result.oom_kills} process(es): the container's memory "
            f"limit is {result.memory_mb} MB]"
        )
    if result.forks_refused:
        notices.append(
            f"[harness: the container reached its process limit ({result.pids_max}): {result.forks_refused} new "
            "process(es) were refused]"
        )
    if result.pids_reset:
        notices.append(
            "[harness: so that what is left cannot slow later steps, every process of the agent was stopped; a new "
            f"shell starts in {result.cwd}, variables reset]"
        )
    notices += result.notices
    if result.background and result.ending == "exited":
        shown = ", ".join(f"{name} (pid {pid})" for pid, name in result.background[:8])
        more = f" and {len(result.background) - 8} more" if len(result.background) > 8 else ""
        notices.append(
            f"[harness: still running in the background: {shown}{more}; it keeps running, within the container's "
            "limits, until the episode ends]"
        )
    if result.ending == "exited":
        notices.append(f"[exit status {result.exit_status}]")
    lead = "\n" if result.output and not result.output.endswith("\n") else ""
    for i, notice in enumerate(notices):
        segments.append(warning((lead if i == 0 else "") + notice + "\n"))
    return segments


def verdict_segment(reward: float, why: str) -> Segment:
    """The verdict line of ``submit`` or of the step limit (``warning``)."""
    return warning(f"[harness: {why}; reward {reward:g}]\n")
