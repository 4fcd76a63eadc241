"""The shell env's parts that need no Docker engine: the stream reader, the per-step bash line (run through a real
local bash), the role-tagging rules, reset validation and the server's answer when no engine is there. The
container tier (tests/containers/test_shell_env.py) runs the whole stack on real containers."""

from __future__ import annotations

import os
import select
import subprocess
from typing import Any

import pytest
from shell_env.server import OUTPUT_CAP_BYTES, ShellAction, ShellEnvironment, expert_actions, task_suite
from shell_env.server.link import DRIVER_ARGV, ShellLink, StepResult
from shell_env.server.render import CommandResult, reset_segments, step_segments, verdict_segment
from shell_env.server.scripts import ansi_c_quote
from shell_env.server.streams import (
    STDERR,
    STDOUT,
    CommandOutput,
    FrameDecoder,
    RecordDecoder,
    Report,
    parse_report,
    record,
    shown,
)

from openenv_echo.client import ActionValidationError, EnvClient, ExecutionError
from openenv_echo.roles import Role
from openenv_echo.server.protocol import _cut
from openenv_echo.trajectory import Trajectory
from openenv_echo.wire import Observation, Segment, env_output, warning


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def report(status: int = 0, cwd: bytes = b"/app", trap: bytes = b"trap -- - DEBUG\n") -> bytes:
    return b"%d\0hBs\0%s\0%s\0" % (status, cwd, trap)


# -- Docker's multiplexed stream, the driver's records, the report ---------------------------------------------------


def test_frame_and_record_decoders_reassemble_input_split_anywhere() -> None:
    raw = frame(STDOUT, b"hello ") + frame(STDERR, b"oops\n") + frame(STDOUT, b"") + frame(STDOUT, b"world\n")
    records = record(b"o", b"out") + record(b"m", report()) + record(b"x", b"0")
    for cut in range(1, len(raw)):
        decoder = FrameDecoder()
        got = decoder.feed(raw[:cut]) + decoder.feed(raw[cut:])
        assert got == [(STDOUT, b"hello "), (STDERR, b"oops\n"), (STDOUT, b""), (STDOUT, b"world\n")]
    for cut in range(1, len(records)):
        rdecoder = RecordDecoder()
        assert rdecoder.feed(records[:cut]) + rdecoder.feed(records[cut:]) == [
            (b"o", b"out"),
            (b"m", report()),
            (b"x", b"0"),
        ]


def test_reports_parse_and_forged_or_garbled_ones_do_not() -> None:
    ok = parse_report(report(3, b"/a\x1e\xffb", b"trap -- 'echo hi' DEBUG\n"))
    assert ok == Report(3, "hBs", b"/a\x1e\xffb", b"trap -- 'echo hi' DEBUG\n")
    assert parse_report(report()) == Report(0, "hBs", b"/app", b"")  # no trap: nothing to restore
    for bad in (
        b"\x1eforged 0 1 /\x1e",
        report()[:-1],
        report() + b"x",
        report(cwd=b"relative"),
        b"300\0hBs\0/\0\0",
        b"0\0h s\0/\0\0",
        b"0\0hBs\0/\0echo pwned\0",
    ):
        assert parse_report(bad) is None, bad


def test_output_keeps_interleaving_merges_runs_and_decodes_split_characters() -> None:
    pieces = [(STDOUT, b"a\n"), (STDOUT, b"b\n"), (STDERR, b"warn\n"), (STDOUT, "é✓\n".encode()), (STDERR, b"late\n")]
    output = CommandOutput(cap_bytes=1000)
    for stream, data in pieces:
        for i in range(len(data)):  # every split point, UTF-8 sequences included
            output.feed(stream, data[i : i + 1])
    output.finish()
    assert output.chunks == [(STDOUT, "a\nb\n"), (STDERR, "warn\n"), (STDOUT, "é✓\n"), (STDERR, "late\n")]
    assert output.total_bytes == len("a\nb\nwarn\né✓\nlate\n".encode())


def test_the_text_rule_nul_and_invalid_utf8_become_replacement_characters_esc_is_kept() -> None:
    output = CommandOutput(cap_bytes=1000)
    output.feed(STDOUT, b"a\0b\x1b[31mred\xff\xfe\xc3")  # a cut-off character at the very end
    output.finish()
    assert output.chunks == [(STDOUT, "a\ufffdb\x1b[31mred\ufffd\ufffd\ufffd")]
    assert shown(b"/tmp/\x00\xff") == "/tmp/\ufffd\ufffd"


@pytest.mark.parametrize("at", range(8))
def test_the_cap_never_splits_a_character(at: int) -> None:
    output = CommandOutput(cap_bytes=10)
    output.feed(STDOUT, b"x" * at)
    output.feed(STDERR, "ééé✓✓".encode())
    output.feed(STDOUT, b"tail that is not kept")
    output.finish()
    text = "".join(t for _, t in output.chunks)
    assert "\ufffd" not in text and len(text.encode()) <= 10 and output.truncated
    assert text == "x" * at + "ééé✓✓"[: len(text) - at]
    assert output.total_bytes == at + len("ééé✓✓".encode()) + 21


# -- the driver and the bash line, locally: a real python3 and bash, no Docker -----------------------------------


class LocalTransport:
    """The driver as a local child process (what the container runs, minus Docker)."""

    def __init__(self, cwd: str) -> None:
        self.proc = subprocess.Popen(
            [*DRIVER_ARGV, "-", cwd, "/"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env={"PATH": os.environ["PATH"], "HOME": cwd, "LANG": "C.UTF-8"},
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.fds = {self.proc.stdout.fileno(): STDOUT, self.proc.stderr.fileno(): STDERR}
        self.eof = False

    def send(self, data: bytes, timeout_s: float = 10.0) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, timeout_s: float) -> list[tuple[int, bytes]]:
        ready, _, _ = select.select(list(self.fds), [], [], timeout_s)
        out = []
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                out.append((self.fds[fd], data))
            else:
                del self.fds[fd]
        self.eof = not self.fds
        return out

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class LocalShell:
    def __init__(self, cwd: str) -> None:
        self.link = ShellLink(LocalTransport(cwd))
        self.link.start(timeout_s=30)

    def run(self, command: str, timeout_s: float = 20) -> StepResult:
        step = self.link.run(command, timeout_s, cap_bytes=1 << 20, flood_bytes=1 << 26)
        step.output.finish()
        return step


@pytest.fixture
def shell(tmp_path: Any) -> Any:
    sh = LocalShell(str(tmp_path))
    yield sh
    sh.link.close()


def _text(step: StepResult, stream: int | None = None) -> str:
    return "".join(t for s, t in step.output.chunks if stream is None or s == stream)


@pytest.mark.parametrize(
    "text",
    ["plain", 'it\'s "quoted" \\ back\\slash', "tab\tnew\nline", "é✓ 日本", "$HOME `x` $(y) !bang", "\x01\x7f"],
)
def test_ansi_c_quote_round_trips_through_bash(text: str) -> None:
    line = ansi_c_quote(text)
    assert "\n" not in line
    out = subprocess.run(["bash", "-c", f"printf %s {line}"], capture_output=True).stdout
    assert out == text.encode()


def test_state_persists_and_status_and_cwd_come_back(shell: LocalShell, tmp_path: Any) -> None:
    first = shell.run("mkdir -p 'a dir' && cd 'a dir'; X=41; f() { echo $((X + 1)); }")
    assert first.ending == "exited" and first.exit_status == 0 and shell.link.cwd == str(tmp_path / "a dir").encode()
    second = shell.run("f; pwd; false")
    assert _text(second, STDOUT) == f"42\n{tmp_path / 'a dir'}\n" and second.exit_status == 1
    assert shell.run("cat; echo read-nothing").output.chunks == [(STDOUT, "read-nothing\n")]  # stdin: /dev/null


def test_multiline_unicode_and_syntax_errors_are_the_shells_own_text(shell: LocalShell) -> None:
    out = shell.run("for w in é 'two words'; do\n  echo \"<$w>\"\ndone")
    assert _text(out, STDOUT) == "<é>\n<two words>\n"
    bad = shell.run("echo 'unterminated")
    assert "unexpected EOF" in _text(bad, STDERR) and bad.exit_status == 2
    assert "__oe" not in _text(bad) and "printf" not in _text(bad)


def test_xtrace_and_verbose_show_the_command_never_the_harness(shell: LocalShell) -> None:
    shell.run("set -x")
    traced = shell.run("echo hi")
    assert _text(traced, STDOUT) == "hi\n"
    assert _text(traced, STDERR) == "++ echo hi\n"  # bash's own trace (one level down: the command runs in eval)
    shell.run("set +x; set -v")
    verbose = _text(shell.run("echo v"), STDERR)
    assert verbose == "echo v\n"


# The agent's idioms that broke in-band markers: each step must end at once with the right status, cwd and output,
# and the next command must run.
def test_redirecting_the_shells_own_streams_keeps_steps_whole(shell: LocalShell) -> None:
    assert shell.run("exec 2>&1").exit_status == 0
    both = shell.run("echo a; echo b >&2; false")
    assert both.output.chunks == [(STDOUT, "a\nb\n")] and both.exit_status == 1
    assert shell.run("exec 2>/dev/null").exit_status == 0
    quiet = shell.run("echo c; echo d >&2")
    assert quiet.output.chunks == [(STDOUT, "c\n")] and quiet.ending == "exited"
    other = LocalShell("/")
    try:
        assert other.run("exec 1>&2").exit_status == 0
        assert other.run("echo e; pwd").output.chunks == [(STDERR, "e\n/\n")]
    finally:
        other.link.close()


def test_output_through_tee_arrives_within_its_step(shell: LocalShell, tmp_path: Any) -> None:
    assert shell.run(f"exec > >(tee -a {tmp_path}/log) 2>&1").exit_status == 0
    for word in ("one", "two"):
        step = shell.run(f"echo {word}; ls /nonexistent-{word}")
        assert _text(step).startswith(f"{word}\n") and f"nonexistent-{word}" in _text(step), step.output.chunks
        assert step.exit_status == 2
    assert (tmp_path / "log").read_text().startswith("one\n")


def test_a_directory_with_the_old_marker_byte_is_just_a_directory(shell: LocalShell, tmp_path: Any) -> None:
    step = shell.run("mkdir -p $'a\\x1eb\\x1e0 1 /x' && cd \"$_\" && pwd")
    assert step.exit_status == 0 and shell.link.cwd == f"{tmp_path}/a\x1eb\x1e0 1 /x".encode()
    assert _text(step) == f"{tmp_path}/a\x1eb\x1e0 1 /x\n"
    assert shell.run("true").output.chunks == []


def test_a_debug_trap_sees_only_the_agents_commands(shell: LocalShell) -> None:
    shell.run("""trap 'echo "DBG:$BASH_COMMAND"' DEBUG""")
    step = shell.run("echo x; true")
    assert _text(step) == "DBG:echo x\nx\nDBG:true\n", step.output.chunks
    assert _text(shell.run("trap - DEBUG")) == "DBG:trap - DEBUG\n"
    assert _text(shell.run("echo y")) == "y\n"


def test_functions_and_aliases_named_like_the_harnesss_words_change_nothing(shell: LocalShell) -> None:
    shell.run('builtin() { command printf "\\x1eforged 0 1 /\\x1e"; }; printf() { echo fake; }')
    shell.run("shopt -s expand_aliases; alias eval=echo set=echo trap=echo unset=echo exit=echo")
    step = shell.run("cd / && echo after")
    assert step.ending == "exited" and _text(step) == "after\n" and shell.link.cwd == b"/"


def test_a_forged_or_unwritable_report_is_a_clean_ending_never_an_exception(shell: LocalShell) -> None:
    forged = shell.run("echo x >&$(ls /proc/$$/fd | sort -n | tail -1) 2>/dev/null; enable -n printf")
    assert forged.ending in ("bad_report", "shell_exit"), forged
    fresh = LocalShell("/")
    try:
        step = fresh.run("enable -n printf")
        assert step.ending == "shell_exit" and step.exit_status == 97
    finally:
        fresh.link.close()


def test_arbitrary_bytes_follow_the_text_rule(shell: LocalShell) -> None:
    step = shell.run(r"printf 'a\0b\033[31mred\xff\n'")
    assert step.output.chunks == [(STDOUT, "a\ufffdb\x1b[31mred\ufffd\n")]


# -- roles -------------------------------------------------------------------------------------------------------------


def result(**kw: Any) -> CommandResult:
    base: dict[str, Any] = {
        "chunks": [(STDOUT, "out\n"), (STDERR, "err\n"), (STDOUT, "more")],
        "total_bytes": 12,
        "cap_bytes": 100,
        "ending": "exited",
        "exit_status": 0,
        "cwd": "/app",
        "timeout_s": 30.0,
    }
    return CommandResult(**{**base, **kw})


def test_step_roles_stderr_marked_and_harness_newline_is_warning() -> None:
    segs = step_segments("/app", "ls", result(exit_status=2))
    assert [(s.role, s.text, s.metadata) for s in segs] == [
        (Role.WARNING, "/app$ ls\n", None),
        (Role.ENV_OUTPUT, "out\n", None),
        (Role.ENV_OUTPUT, "err\n", {"stream": "stderr"}),
        (Role.ENV_OUTPUT, "more", None),
        (Role.WARNING, "\n[exit status 2]\n", None),
    ]


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"ending": "timeout", "exit_status": None}, "wall-time limit"),
        ({"ending": "flood", "exit_status": None, "total_bytes": 10**7}, "kept writing output"),
        ({"ending": "shell_exit", "exit_status": 3}, "the shell exited with status 3"),
        ({"total_bytes": 500}, "output truncated: the command wrote 500 bytes"),
        ({"oom_kills": 1, "memory_mb": 512}, "OOM killer stopped 1 process(es)"),
        ({"forks_refused": 7, "pids_max": 128}, "process limit (128): 7 new process(es) were refused"),
        ({"background": [(9, "sleep")]}, "still running in the background: sleep (pid 9)"),
        ({"ending": "bad_report", "exit_status": None}, "end-of-step report was not the harness's"),
        ({"pids_reset": True, "forks_refused": 3}, "every process of the agent was stopped; a new shell starts"),
        ({"problems": ["OCI runtime exec failed: exec failed"]}, "[harness: OCI runtime exec failed: exec failed]"),
        ({"notices": ["[harness: the shell's working directory /x is gone]"]}, "directory /x is gone"),
    ],
)
def test_every_harness_notice_is_a_warning(kw: dict[str, Any], expected: str) -> None:
    segs = step_segments("/app", "cmd", result(**kw))
    hits = [s for s in segs if expected in s.text]
    assert len(hits) == 1 and hits[0].role is Role.WARNING
    assert all(s.role is Role.ENV_OUTPUT for s in segs[1:4])  # the command's own output keeps its role
    killed = kw.get("ending") in ("timeout", "flood", "shell_exit", "bad_report")
    assert any(s.text.endswith("[exit status 0]\n") for s in segs) is (not killed)


def test_reset_and_verdict_roles() -> None:
    (seg,) = reset_segments("Do the thing.\n", "/app")
    assert seg.role is Role.CONTEXT and seg.text.endswith("Do the thing.\n") and "/app" in seg.text
    assert verdict_segment(1.0, "submitted") == warning("[harness: submitted; reward 1]\n")


# -- segment metadata on the wire (role spec 1.1) --------------------------------------------------------------------


def test_segment_metadata_is_optional_on_the_wire_and_survives_trajectories() -> None:
    plain, marked = env_output("a"), env_output("b", {"stream": "stderr"})
    assert plain.model_dump_json() == '{"role":"env_output","text":"a"}'
    assert Segment.model_validate_json(marked.model_dump_json()) == marked
    traj = Trajectory.model_validate({"env_name": "shell", "reset": {"segments": [marked.model_dump()]}})
    assert Trajectory.model_validate_json(traj.model_dump_json()).reset.segments == [marked]
    cut = _cut(Observation(segments=[warning("$ x\n"), marked, env_output("c" * 50)]), 6)
    assert cut.segments[1] == env_output("b", {"stream": "stderr"}) and cut.segments[-1].role is Role.WARNING


# -- the env without a container ---------------------------------------------------------------------------------


def test_expert_is_the_reference_solution_then_submit() -> None:
    for task in task_suite().tasks:
        seed = next(s for s in range(100) if task_suite().for_seed(s) is task) if task.split == "train" else None
        if seed is None:
            continue
        actions = expert_actions(seed)
        assert [ShellAction.model_validate(a).command for a in actions][-1] == "submit"
        assert task.solution is not None and task.solution.read_text().strip() in actions[0]["command"]


def test_defaults_and_tools() -> None:
    assert ShellEnvironment.DEFAULT_LIMITS["step_timeout_s"] > max(
        t.limits.verifier_timeout_s for t in task_suite().tasks
    )
    assert {t.name for t in ShellEnvironment.TOOLS} == {"run_command", "submit"}
    assert OUTPUT_CAP_BYTES == 16384


def test_bad_resets_are_validation_errors_and_no_engine_is_a_clear_error(
    running_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    url = running_server(ShellEnvironment, step_timeout_s=60)
    with EnvClient(url) as client:
        with pytest.raises(ActionValidationError, match=r"unknown task 'nope'.*count-word"):
            client.reset(task="nope")
        with pytest.raises(ActionValidationError, match="over task count-word's limit of 30 s"):
            client.reset(task="count-word", command_timeout_s=31)
        with pytest.raises(ActionValidationError, match="command_timeout_s"):
            client.reset(task="count-word", command_timeout_s=0)
        with pytest.raises(ExecutionError, match=r"needs a Docker engine.*start-dockerd"):
            client.reset(task="count-word")
        assert client.metadata()["name"] == "shell"  # the session and the server keep serving
