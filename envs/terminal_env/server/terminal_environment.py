"""``TerminalEnvironment``: incident triage on a seeded virtual Linux host.

Role tagging at emit time (see ``openenv_echo.roles``):

* reset: the task statement is ``context``; the login banner the host printed is ``env_output``;
* step: the echoed prompt ``$ <command>\\n`` is ``warning``; everything the machine printed (stdout and stderr,
  including ``bash: foo: command not found`` and ``cat: x: No such file or directory``) is ``env_output``; harness
  text (truncation notices, refusals of unsupported shell features, work-limit kills, submit format messages, the
  verdict, the step-limit notice) is ``warning``.

Episodes end on ``submit <kind> <service>`` (reward from ``tasks.verify``) or after ``max_steps`` steps (reward 0).
Every other step has reward 0.0. Same seed + same commands -> byte-identical observations.
"""

from __future__ import annotations

import random
import shlex
from typing import Any

from openenv_echo.envs.splits import TASK_SPLITS
from openenv_echo.server.environment import EnvError, Environment, MaxSteps
from openenv_echo.server.tools import EnvTool
from openenv_echo.wire import ErrorCode, Segment, context, env_output, warning

from .commands import new_shell
from .machine import INCIDENT_KINDS, generate_machine
from .machine_state import Machine
from .models import CommandArguments, IncidentKind, SubmitArguments, TerminalAction, TerminalObservation
from .shell import MAX_COMMAND_CHARS, Shell
from .tasks import login_banner, parse_submit, task_text, verify

DEFAULT_MAX_STEPS = 30
MAX_OUTPUT_BYTES = 4096
MAX_OUTPUT_LINES = 200
ECHO_CHARS = 512


class TerminalEnvironment(Environment[TerminalAction, TerminalObservation]):
    """Incident triage in a read-only shell on a generated Linux host; answer with `submit <kind> <service>`."""

    name = "terminal"
    action_type = TerminalAction
    observation_type = TerminalObservation
    # Commands are pure Python but a pipeline may use its whole work budget (~0.1-0.3 s of CPU): each session runs
    # in a worker process of its own, so one busy session never stalls the event loop that serves the others.
    BLOCKING = True
    TASK_SEEDS = TASK_SPLITS
    TOOLS = (
        EnvTool(
            name="run_command",
            description="Run a bash command line on the host; returns what it printed and its exit status.",
            arguments=CommandArguments,
            action=lambda a: TerminalAction(command=a.command),
            result=lambda obs: {"output": obs.output, "exit_code": obs.exit_code, "truncated": obs.truncated},
        ),
        EnvTool(
            name="submit",
            description="Answer with the incident's kind and the service at its root; ends the episode.",
            arguments=SubmitArguments,
            action=lambda a: TerminalAction(command=f"submit {a.kind} {shlex.quote(a.service)}"),
            result=lambda obs: {"reward": obs.reward, "done": obs.done},
        ),
    )

    def __init__(self) -> None:
        super().__init__()
        self.machine: Machine | None = None
        self.shell: Shell | None = None
        self.seed: int | None = None
        self.max_steps = DEFAULT_MAX_STEPS

    def _reset(
        self, seed: int | None, incident: IncidentKind | None = None, max_steps: MaxSteps = DEFAULT_MAX_STEPS
    ) -> TerminalObservation:
        if incident is not None and incident not in INCIDENT_KINDS:
            raise EnvError(
                f"unknown incident kind {incident!r}; known: {', '.join(INCIDENT_KINDS)}", ErrorCode.VALIDATION_ERROR
            )
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or not 1 <= max_steps <= 1000:
            raise EnvError("max_steps must be an integer in [1, 1000]", ErrorCode.VALIDATION_ERROR)
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)  # unseeded episodes are just not reproducible
        self.seed = seed
        self.max_steps = max_steps
        self.machine = generate_machine(seed, incident)
        self.shell = new_shell(self.machine, max_bytes=MAX_OUTPUT_BYTES, max_lines=MAX_OUTPUT_LINES)
        return TerminalObservation(
            segments=[
                context(task_text(self.machine, max_steps)),
                env_output(login_banner(self.machine, self.machine.now)),
            ],
            cwd=self.shell.cwd,
            steps_left=max_steps,
            metadata={"seed": seed, "hostname": self.machine.hostname},
        )

    def _step(self, action: TerminalAction) -> TerminalObservation:
        assert self.shell is not None and self.machine is not None
        cmd = action.command
        steps_left = self.max_steps - (self._step_count + 1)
        shown = cmd if len(cmd) <= ECHO_CHARS else cmd[:ECHO_CHARS] + f"… [{len(cmd) - ECHO_CHARS} more characters]"
        shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates cannot go on the wire
        segments: list[Segment] = [warning(f"$ {shown}\n")]
        exit_code: int | None = None
        truncated = False
        output = ""
        done = False
        reward = 0.0
        metadata: dict[str, Any] = {}
        bad = next(
            (c for c in cmd if (ord(c) < 32 and c not in "\t\n") or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF), None
        )
        words = cmd.split()
        if len(cmd) > MAX_COMMAND_CHARS:
            segments.append(
                warning(
                    f"[harness: command rejected: {len(cmd)} characters exceeds the "
                    f"{MAX_COMMAND_CHARS}-character limit; nothing was run]\n"
                )
            )
            exit_code = 2
        elif bad is not None:
            what = (
                "a lone surrogate (not valid Unicode text)" if ord(bad) >= 0xD800 else f"the control character {bad!r}"
            )
            segments.append(warning(f"[harness: command rejected: it contains {what}; nothing was run]\n"))
            exit_code = 2
        elif words and words[0] == "submit":
            try:
                args = shlex.split(cmd)[1:]
            except ValueError:
                args = words[1:]
            parsed = parse_submit(args)
            if isinstance(parsed, str):
                segments.append(warning(f"[harness: {parsed}]\n"))
            else:
                kind, service = parsed
                verdict = verify(self.machine, kind, service)
                reward, done = verdict.score, True
                segments.append(
                    warning(
                        f"[harness: answer recorded: {kind} {service}: {verdict.text()}; reward {verdict.score:g}]\n"
                    )
                )
                metadata = {
                    "answer": {"kind": kind, "service": service},
                    "expected": {"kind": self.machine.incident.kind, "service": self.machine.incident.service},
                    "score": verdict.score,
                }
        else:
            result = self.shell.run(cmd)
            output = result.output
            if output:
                segments.append(env_output(output))
            segments.extend(warning(n) for n in result.notices)
            exit_code, truncated = result.exit_code, result.truncated
        if not done and steps_left <= 0:
            done = True
            segments.append(
                warning(f"[harness: step limit ({self.max_steps}) reached without an answer; episode over, reward 0]\n")
            )
            metadata = {
                "expected": {"kind": self.machine.incident.kind, "service": self.machine.incident.service},
                "score": 0.0,
            }
        return TerminalObservation(
            segments=segments,
            output=output,
            exit_code=exit_code,
            cwd=self.shell.cwd,
            truncated=truncated,
            steps_left=max(steps_left, 0),
            reward=reward,
            done=done,
            metadata=metadata,
        )

    def extra_state(self) -> dict[str, Any]:
        if self.machine is None or self.shell is None:
            return {}
        return {
            "seed": self.seed,
            "hostname": self.machine.hostname,
            "cwd": self.shell.cwd,
            "max_steps": self.max_steps,
        }
