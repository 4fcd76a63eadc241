"""The shell env's parts that need no Docker engine: the stream reader, the per-step bash line (run through a real
local bash), the role-tagging rules, reset validation and the server's answer when no engine is there. The
container tier (tests/containers/test_shell_env.py) runs the whole stack on real containers."""

from __future__ import annotations

import os
import random
import subprocess
import time
from typing import Any

import pytest

from openenv_echo.client import ActionValidationError, EnvClient, ExecutionError
from openenv_echo.envs.shell import OUTPUT_CAP_BYTES, ShellAction, ShellEnvironment, expert_actions, task_suite
from openenv_echo.envs.shell.render import CommandResult, reset_segments, step_segments, verdict_segment
from openenv_echo.envs.shell.scripts import MARK, ansi_c_quote, command_line
from openenv_echo.envs.shell.streams import STDERR, STDOUT, CommandOutput, FrameDecoder
from openenv_echo.roles import Role
from openenv_echo.server.protocol import _cut
from openenv_echo.trajectory import Trajectory
from openenv_echo.wire import Observation, Segment, env_output, warning

NONCE = "0123456789abcdef"


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def end_markers(status: int = 0, pid: int = 7, cwd: str = "/app") -> tuple[bytes, bytes]:
    return (MARK + f"{NONCE} {status} {pid} {cwd}".encode() + MARK, MARK + NONCE.encode() + MARK)


# -- Docker's multiplexed stream -------------------------------------------------------------------------------------


def test_frame_decoder_reassembles_frames_split_anywhere() -> None:
    raw = frame(STDOUT, b"hello ") + frame(STDERR, b"oops\n") + frame(STDOUT, b"") + frame(STDOUT, b"world\n")
    for cut in range(1, len(raw)):
        decoder = FrameDecoder()
        got = decoder.feed(raw[:cut]) + decoder.feed(raw[cut:])
        assert got == [(STDOUT, b"hello "), (STDERR, b"oops\n"), (STDOUT, b""), (STDOUT, b"world\n")]


def test_output_keeps_interleaving_merges_runs_and_cuts_markers_fed_byte_by_byte() -> None:
    out_mark, err_mark = end_markers(3, 41, "/app/my dir")
    pieces = [
        (STDOUT, b"a\n"),
        (STDOUT, b"b\n"),
        (STDERR, b"warn\n"),
        (STDOUT, "é✓\n".encode() + out_mark),
        (STDERR, b"late\n" + err_mark),
    ]
    output = CommandOutput(NONCE, cap_bytes=1000)
    for stream, data in pieces:
        for i in range(len(data)):  # every split point, marker and UTF-8 sequences included
            output.feed(stream, data[i : i + 1])
    output.finish()
    assert output.complete
    assert output.chunks == [(STDOUT, "a\nb\n"), (STDERR, "warn\n"), (STDOUT, "é✓\n"), (STDERR, "late\n")]
    assert output.marker_fields() == (3, 41, "/app/my dir")
    assert output.total_bytes == len("a\nb\nwarn\né✓\nlate\n".encode())


def test_output_over_the_cap_is_counted_not_kept() -> None:
    output = CommandOutput(NONCE, cap_bytes=10)
    output.feed(STDOUT, b"0123456")
    output.feed(STDERR, "ééé".encode())  # the cap falls inside a 2-byte character
    output.feed(STDOUT, b"tail that is not kept")
    output.finish()
    assert output.truncated and output.total_bytes == 7 + 6 + 21
    assert output.chunks == [(STDOUT, "0123456"), (STDERR, "é\ufffd")]
    assert not output.complete and output.marker_fields() is None


def test_a_prefix_of_the_marker_that_is_not_the_marker_is_output() -> None:
    output = CommandOutput(NONCE, cap_bytes=100)
    output.feed(STDOUT, MARK + b"0123")  # looks like the start of the marker...
    output.feed(STDOUT, b"xyz\n")  # ...but is not
    output.finish()
    assert output.chunks == [(STDOUT, "\x1e0123xyz\n")] and not output.complete


# -- the bash line, through a real bash ------------------------------------------------------------------------------


class LocalShell:
    """``command_line`` fed to a local ``bash --noprofile --norc`` (what the container runs, minus Docker)."""

    def __init__(self, cwd: str) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env={"PATH": os.environ["PATH"], "HOME": cwd, "LANG": "C.UTF-8"},
        )
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]
        os.set_blocking(self.proc.stderr.fileno(), False)  # type: ignore[union-attr]

    def run(self, command: str) -> CommandOutput:
        nonce = f"{random.getrandbits(64):016x}"
        assert self.proc.stdin is not None
        self.proc.stdin.write(command_line(command, nonce))
        self.proc.stdin.flush()
        output = CommandOutput(nonce, cap_bytes=1 << 20)
        deadline = time.monotonic() + 10
        while not output.complete and time.monotonic() < deadline:
            for stream, pipe in ((STDOUT, self.proc.stdout), (STDERR, self.proc.stderr)):
                data = pipe.read() if pipe is not None else None
                if data:
                    output.feed(stream, data)
            time.sleep(0.002)
        output.finish()
        assert output.complete, output.chunks
        return output

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def shell(tmp_path: Any) -> Any:
    sh = LocalShell(str(tmp_path))
    yield sh
    sh.close()


def _text(output: CommandOutput, stream: int) -> str:
    return "".join(t for s, t in output.chunks if s == stream)


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
    assert first.marker_fields()[0] == 0 and first.marker_fields()[2] == str(tmp_path / "a dir")  # type: ignore[index]
    second = shell.run("f; pwd; false")
    assert _text(second, STDOUT) == f"42\n{tmp_path / 'a dir'}\n"
    assert second.marker_fields()[0] == 1  # type: ignore[index]
    assert shell.run("cat; echo read-nothing").chunks == [(STDOUT, "read-nothing\n")]  # stdin is /dev/null


def test_multiline_unicode_and_syntax_errors_are_the_shells_own_text(shell: LocalShell) -> None:
    out = shell.run("for w in é 'two words'; do\n  echo \"<$w>\"\ndone")
    assert _text(out, STDOUT) == "<é>\n<two words>\n"
    bad = shell.run("echo 'unterminated")
    assert "unexpected EOF" in _text(bad, STDERR) and bad.marker_fields()[0] == 2  # type: ignore[index]
    assert "__oe" not in _text(bad, STDERR) and "printf" not in _text(bad, STDERR)


def test_xtrace_and_verbose_show_the_command_never_the_harness(shell: LocalShell) -> None:
    shell.run("set -x")
    traced = shell.run("echo hi")
    assert _text(traced, STDOUT) == "hi\n"
    assert _text(traced, STDERR) == "++ echo hi\n"  # bash's own trace (one level down: the command runs in eval)
    shell.run("set +x; set -v")
    verbose = _text(shell.run("echo v"), STDERR)
    assert "__oe" not in verbose and "printf" not in verbose and "eval" not in verbose


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
    ],
)
def test_every_harness_notice_is_a_warning(kw: dict[str, Any], expected: str) -> None:
    segs = step_segments("/app", "cmd", result(**kw))
    hits = [s for s in segs if expected in s.text]
    assert len(hits) == 1 and hits[0].role is Role.WARNING
    assert all(s.role is Role.ENV_OUTPUT for s in segs[1:4])  # the command's own output keeps its role
    killed = kw.get("ending") in ("timeout", "flood", "shell_exit")
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
