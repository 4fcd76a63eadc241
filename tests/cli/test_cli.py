"""The ``openenv-echo`` CLI as a user meets it: a real subprocess, real servers on loopback, exact output."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from openenv_echo.cli import EXIT_CODES_HELP
from openenv_echo.server import ServerLimits
from openenv_echo.trajectory import read_trajectories

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str = "", timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run ``python -m openenv_echo.cli ARGS`` with this checkout first on the path; stdout is a pipe."""
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")])
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "openenv_echo.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        cwd=ROOT,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "; " in lines[0], lines[0]  # problem; fix
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def echo_url(running_server: Callable[..., str]) -> str:
    return running_server("echo")


# -- --help ----------------------------------------------------------------------------------------------------------


def test_top_help_has_exit_code_table_literally() -> None:
    proc = cli("--help")
    assert proc.returncode == 0
    for line in ("Exit codes:", "0    success", "1    runtime failure", "2    usage error", "130  interrupted"):
        assert line in proc.stdout
    assert "⟦warning⟧" in proc.stdout and "--plain" in proc.stdout and "--debug" in proc.stdout
    assert "Exit codes:" in EXIT_CODES_HELP


def test_no_arguments_shows_the_help() -> None:
    proc = cli()
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: openenv-echo") and "Exit codes:" in proc.stdout


def test_serve_help_shows_defaults_and_env_vars() -> None:
    out = " ".join(cli("serve", "--help").stdout.split())  # help is wrapped to the terminal width
    defaults = ServerLimits()
    assert f"(default {defaults.max_sessions}; env OPENENV_ECHO_MAX_SESSIONS)" in out
    assert f"(default {defaults.step_timeout_s}; env OPENENV_ECHO_STEP_TIMEOUT_S)" in out
    assert "[default: 8000; 0<=x<=65535]" in out and "simulation|production" in out


# -- usage errors: exit 2, one line -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("serve", "foo"), ("unknown environment 'foo'", "echo, shell, sql, terminal", "serve --help")),
        (("serve", "nosuchmodule:Env"), ("cannot load 'nosuchmodule:Env'", "module:Class")),
        (("serve", "echo", "--prot", "3"), ("no such option: --prot", "--port")),
        (("serve", "echo", "--mode", "x"), ("--mode",)),
        (("serve", "echo", "--max-sessions", "0"), ("max_sessions", "OPENENV_ECHO_")),
        (("serve", "echo", "--tokenizer", "./no/such/dir"), ("./no/such/dir is not a directory", "local:qwen")),
        (("serve", "echo", "--tokenizer", "local:nope"), ("unknown tokenizer family 'nope'",)),
        (("episode", "http://127.0.0.1:9", "-a", "{bad"), ("not valid JSON",)),
        (("show", "no-such-file.jsonl"), ("does not exist",)),
        (("show", "README.md", "--tokenizer", "local:qwen"), ("README.md is not JSON lines",)),
        (("show", "tests/cli/data/trajectory.jsonl"), ("holds trajectories; pass --tokenizer",)),
        (("show", "tests/cli/data/trajectory.jsonl", "--tokenizer", "local:qwen", "--index", "9"), ("out of range",)),
        (("quickstart", "foo"), ("unknown environment 'foo'",)),
        (("validate-runtime", "foo"), ("unknown environment 'foo'",)),
        (("bogus",), ("no such command 'bogus'",)),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    assert_one_line_error(cli(*args), 2, *needles)


def test_bad_limit_from_environment_variable_names_it() -> None:
    proc = cli("serve", "echo", env={"OPENENV_ECHO_MAX_SESSIONS": "many"})
    assert_one_line_error(proc, 2, "max_sessions", "OPENENV_ECHO_<FIELD>")


# -- runtime errors: exit 1, one line; --debug adds the traceback ------------------------------------------------------


def test_dead_server_is_one_line_exit_1() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = assert_one_line_error(cli("episode", f"http://127.0.0.1:{port}", "-a", "hi"), 1, "cannot reach")
    assert "openenv-echo serve" in line
    debug = cli("episode", f"http://127.0.0.1:{port}", "-a", "hi", "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == line


def test_port_in_use_is_one_line_exit_1() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert_one_line_error(cli("serve", "echo", "--port", str(port)), 1, f"127.0.0.1:{port}", "--port")


def test_refused_action_exits_1_and_sends_nothing_after_it(echo_url: str, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = cli("episode", echo_url, "-a", "hi", "-a", '{"bad": 1}', "-a", "bye", "--out", str(out))
    line = assert_one_line_error(proc, 1, "refused action '{\"bad\": 1}'", "VALIDATION_ERROR", "--field")
    assert "⟦action⟧bye" not in proc.stdout and "bye" not in line
    assert "⟦warning⟧[echo] ⟦env_output⟧hi\n" in proc.stdout


# -- literal, role-visible output ----------------------------------------------------------------------------------


def test_episode_prints_env_text_exactly_with_labels_when_piped(echo_url: str, tmp_path: Path) -> None:
    tricky = "[bold]not bold[/] [echo] \ttab :smile: 1.5 'quoted'"
    out = tmp_path / "t.jsonl"
    proc = cli("episode", echo_url, "-a", tricky, "-a", "bye", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    assert f"⟦action⟧{tricky}\n⟦warning⟧[echo] ⟦env_output⟧{tricky}\n" in proc.stdout
    assert "⟦action⟧bye\n⟦warning⟧[echo] ⟦env_output⟧bye\n" in proc.stdout
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("episode ") and "steps=2" in summary and "done=True" in summary
    [recorded] = read_trajectories(out)
    assert recorded.steps[0].observation.segments[0].text == "[echo] "


@pytest.mark.parametrize("colourless", [{"NO_COLOR": "1"}, {"argv": "--plain"}])
def test_no_color_and_plain_give_labels_on_a_colour_terminal(echo_url: str, colourless: dict[str, str]) -> None:
    env = {"FORCE_COLOR": "1", "TERM": "xterm-256color"}
    extra = [colourless.pop("argv")] if "argv" in colourless else []
    env.update(colourless)
    proc = cli("episode", echo_url, "-a", "[x] hi", "-a", "bye", *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    assert "⟦warning⟧[echo] ⟦env_output⟧[x] hi\n" in proc.stdout


def test_plain_output_escapes_control_characters_so_env_text_cannot_erase_its_label(echo_url: str) -> None:
    proc = cli("episode", echo_url, "-a", "hi\x1b[2K\r\x7f", "--plain")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\r" not in proc.stdout and "\x7f" not in proc.stdout
    assert "⟦env_output⟧hi\\x1b[2K\\r\\x7f\n" in proc.stdout


def test_colour_terminal_styles_roles_and_keeps_text_exact(echo_url: str) -> None:
    proc = cli("episode", echo_url, "-a", "[x] hi\x1b[31m", "-a", "bye", env={"FORCE_COLOR": "1", "TERM": "xterm"})
    assert proc.returncode == 0, proc.stderr
    assert "⟦" not in proc.stdout.split("\n", 1)[1]  # no labels after the legend line
    assert "\x1b[33m[echo] \x1b[0m\x1b[32m[x] hi\\x1b[31m\x1b[0m\n" in proc.stdout  # env's ESC shown escaped
    plain = ANSI.sub("", proc.stdout)
    assert "[echo] [x] hi\\x1b[31m\n" in plain and "[echo] bye\n" in plain


def test_interactive_reads_actions_until_eof_and_reports_refusals(echo_url: str) -> None:
    proc = cli("episode", echo_url, "-i", stdin='hi\n{"x": 1}\n{nojson\nmore\n')
    assert proc.returncode == 0, proc.stderr
    assert "⟦warning⟧[echo] ⟦env_output⟧hi\n" in proc.stdout and "⟦env_output⟧more\n" in proc.stdout
    assert "error: the server refused this action" in proc.stderr and "not valid JSON" in proc.stderr
    assert "steps=2" in proc.stdout and "done=False" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("episode ")  # nothing of a prompt in the output


def test_quickstart_terminal_shows_the_verdict_line_exactly(tmp_path: Path) -> None:
    proc = cli("quickstart", "terminal", "--seed", "5", "--out", str(tmp_path / "q.jsonl"))
    assert proc.returncode == 0, proc.stderr
    verdict = [ln for ln in proc.stdout.splitlines() if "answer recorded" in ln]
    assert len(verdict) == 1 and re.fullmatch(
        r"⟦warning⟧\[harness: answer recorded: \S+ \S+: .+; reward [\d.]+\]", verdict[0]
    )
    assert "⟦warning⟧$ submit " in proc.stdout


def test_quickstart_echo_reads_right_to_a_newcomer(tmp_path: Path) -> None:
    """The legend says what each role means (warning is harness text, not an error), the first step is an ordinary
    echo, the deliberately empty message is visibly one, and the summary says where its reward comes from."""
    proc = cli("quickstart", "echo", "--out", str(tmp_path / "q.jsonl"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index("roles (who wrote each piece of text below):")
    legend = dict(ln.split(maxsplit=1) for ln in lines[start + 1 : start + 5])
    assert list(legend) == ["⟦context⟧", "⟦action⟧", "⟦env_output⟧", "⟦warning⟧"]
    assert "world-model target" in legend["⟦env_output⟧"] and "not an error" in legend["⟦warning⟧"]
    body = lines[start + 5 :]
    assert body[1:3] == ["⟦action⟧hello", "⟦warning⟧[echo] ⟦env_output⟧hello"]  # an ordinary step first
    assert '⟦action⟧> {"message": ""}' in body  # the empty message, shown as what was sent
    [summary] = [ln for ln in body if ln.startswith("episode ")]
    rewards = re.search(r"reward=([\d.]+) \(sum of step rewards: ([^)]*)\)", summary)
    assert rewards, summary
    parts = [float(x) for x in rewards[2].split(" + ")]
    assert len(parts) == 5 and abs(sum(parts) - float(rewards[1])) < 1e-9
    assert parts[0] == len("hello") / 100  # echo's reward: the message length / 100


def test_legend_in_colour_names_each_role_with_its_meaning(echo_url: str) -> None:
    proc = cli("episode", echo_url, "-a", "hi", env={"FORCE_COLOR": "1", "TERM": "xterm"})
    assert proc.returncode == 0, proc.stderr
    plain = ANSI.sub("", proc.stdout).splitlines()
    assert plain[0] == "roles (who wrote each piece of text below):"
    assert plain[4].split()[0] == "warning" and plain[4].endswith("(not an error)")
    assert "steps=1  reward=0.02  done=False" in plain[-1]  # one step: nothing to sum, no explanation


def test_show_prints_text_by_label_and_the_counts_table(echo_url: str, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert cli("episode", echo_url, "-a", "[b]hi[/b]", "-a", "bye", "--out", str(out)).returncode == 0
    proc = cli("show", str(out), "--tokenizer", "local:qwen", "--html", str(tmp_path / "t.html"))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    assert "⟦warning⟧[echo] ⟦env_output⟧[b]hi[/b]" in proc.stdout
    assert "tokens per role" in proc.stdout and "|O|=" in proc.stdout
    assert "[b]hi[/b]" in (tmp_path / "t.html").read_text()


def test_serve_module_class_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "my_env.py").write_text(
        "from openenv_echo.envs.echo import EchoEnvironment\n\nclass MyEnv(EchoEnvironment):\n    pass\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["PYTHONPATH"] = str(ROOT)
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from openenv_echo.cli import main; sys.exit(main())", "serve", "my_env:MyEnv",
         "--port", str(port), "--log-level", "warning"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        proc = cli("episode", f"http://127.0.0.1:{port}", "-a", "hi", "-a", "bye")
        for _ in range(50):  # the server may still be starting
            if proc.returncode == 0 or server.poll() is not None:
                break
            proc = cli("episode", f"http://127.0.0.1:{port}", "-a", "hi", "-a", "bye")
        assert proc.returncode == 0, (proc.stderr, server.poll())
        assert "⟦warning⟧[echo] ⟦env_output⟧hi\n" in proc.stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
