"""The shell env's contract against a hostile agent, on real containers through the full stack.

* rewards it cannot forge: an agent program the tests run starts a loop rewriting the reward, or makes
  ``reward.txt`` a directory and writes ``reward.json``; a git config hook runs when the tests call git; a filled
  ``/logs/agent`` and ``/tmp``: the reward is what the tests decided, every time;
* roles it cannot spoof: each shell idiom that broke in-band markers (``exec 2>&1``, ``exec 2>/dev/null``,
  ``exec > >(tee -a log) 2>&1``, ``exec 1>&2``, a directory named with the old marker byte, a DEBUG trap, a function
  shadowing ``builtin``) leaves steps whole and ``env_output`` the programs' own bytes; arbitrary bytes follow the
  text rule; a cut at the output cap never splits a character; the engine's complaints are never output;
* episodes it cannot brick: a removed working directory, a forged end report, a fork bomb: the next step runs;
* containers it cannot leak: a server SIGKILLed while each kind of container exists leaves nothing behind once the
  next server starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shell_env.server import ShellEnvironment, solution_actions, task_suite
from shell_env.server.link import ShellLink, ShellStartError
from shell_env.server.runtime import OWNER_LABEL, ShellRuntime
from shell_env.server.sandbox import KIND_LABEL, _Channel, app_tar

from openenv_echo.client import EnvClient
from openenv_echo.roles import Role
from openenv_echo.server import BackgroundServer, ServerLimits, create_app
from openenv_echo.server.background import free_port

from .conftest import ROOT

pytestmark = pytest.mark.docker

SUITE = task_suite()


@pytest.fixture(scope="module")
def url(shell_task_images: dict[str, str]) -> Iterator[str]:
    server = BackgroundServer(create_app(ShellEnvironment, limits=ServerLimits(max_sessions=4, step_timeout_s=600.0)))
    yield server.start()
    server.stop()


def _episode(url: str, task: str, commands: list[str]) -> tuple[Any, list[Any], dict[str, Any]]:
    """Reset ``task``, run ``commands``, submit: (the final result, every step's result, the session's state)."""
    with EnvClient(url) as client:
        client.reset(task=task)
        steps = [client.step({"command": c}) for c in commands]
        final = client.step({"command": "submit"})
        state = client.state()
    assert final.done
    return final, steps, state


# -- rewards the agent cannot forge -----------------------------------------------------------------------------

LOOP = r"""cat > /app/series.sh <<'EOF'
#!/bin/bash
( while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.005; done ) >/dev/null 2>&1 &
sleep 0.2
echo 0
EOF"""
DIRECTORY = r"""cat > /app/series.sh <<'EOF'
#!/bin/bash
rm -rf /logs/verifier/reward.txt; mkdir -p /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json
echo 0
EOF"""


@pytest.mark.parametrize("attack", [LOOP, DIRECTORY], ids=["loop-rewriting-reward", "reward-dir-and-json"])
def test_an_agent_program_run_by_the_tests_cannot_forge_the_reward(url: str, attack: str) -> None:
    final, _, state = _episode(url, "fix-series-script", [attack])
    assert final.reward == 0.0, final.text
    assert "AssertionError" in state["verifier_output"]  # the tests did run the agent's program, and failed it


HOOK = r"""mkdir -p /app/hooks && cat > /app/hooks/fsmonitor <<'END'
#!/bin/sh
echo "$0" >> /tmp/ran
rm -rf /logs/verifier/reward.txt; mkdir -p /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json
END
cd /app/repo && git config core.fsmonitor 'sh /app/hooks/fsmonitor'"""


def test_a_git_config_hook_runs_nothing_that_can_write_the_reward(url: str) -> None:
    commands = [HOOK, "git status --short >/dev/null 2>&1; sort -u /tmp/ran"]  # the hook runs for the agent's git
    final, steps, _ = _episode(url, "revert-bad-commit", commands)
    assert steps[-1].observation["output"] == "/app/hooks/fsmonitor\n", steps[-1].text
    assert final.reward == 0.0, final.text


def test_filling_the_agents_logs_and_tmp_does_not_cost_a_correct_answer_its_reward(url: str) -> None:
    task = SUITE.by_name("fix-mean-program")
    fill = "dd if=/dev/zero of=/logs/agent/big bs=1M count=20; dd if=/dev/zero of=/tmp/big bs=1M count=80; df /tmp"
    with EnvClient(url) as client:
        client.reset(task=task.name)
        filled = client.step({"command": fill})
        assert filled.text.count("No space left on device") == 2, filled.text
        for action in solution_actions(task):
            final = client.step(action)
    assert final.done and final.reward == 1.0, final.text


def _verify_with(test_sh: str, tmp_path: Path, commands: tuple[str, ...] = ()) -> Any:
    """A fresh count-word sandbox: run ``commands`` as the agent, then a ``test.sh`` of ours as the verifier."""
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test.sh").write_text(test_sh)
    rt = ShellRuntime(pool_size=0)
    try:
        sandbox = rt.acquire(SUITE.by_name("count-word"))
        for command in commands:
            assert sandbox.run(command, 10, 4096).ending == "exited"
        return sandbox.verify(tests, 60, {}, "/app")
    finally:
        rt.close()


def test_every_agent_process_is_gone_before_the_tests_start(shell_task_images: dict[str, str], tmp_path: Path) -> None:
    count = 'n=0; for d in /proc/[0-9]*; do [ "$(stat -c %u $d)" = 1000 ] && n=$((n + 1)); done; '
    result = _verify_with(
        count + "echo $((n == 0)) > /logs/verifier/reward.txt\n",
        tmp_path,
        ("(while :; do sleep 1; done) & disown; nohup sleep 1000 >/dev/null 2>&1 & setsid sleep 1000 &",),
    )
    assert result.reward == 1.0 and result.problem is None, result


def test_an_agent_process_slow_to_die_is_waited_for_and_the_tests_still_run(
    shell_task_images: dict[str, str], tmp_path: Path
) -> None:
    # a killed process that holds 440 MB takes a while to exit: the supervisor's sweep once gave up after 200 quick
    # rounds (every time here; on a loaded machine ordinary processes did too) and a solved task scored 0
    hog = 'python3 -c "b = bytearray(440 << 20); import time; print(1, flush=True); time.sleep(1e4)" & sleep 3'
    result = _verify_with("echo 1 > /logs/verifier/reward.txt\n", tmp_path, (hog,))
    assert result.reward == 1.0 and result.problem is None, result


def test_a_reward_txt_that_is_not_a_regular_file_scores_0_never_the_json_fallback(
    shell_task_images: dict[str, str], tmp_path: Path
) -> None:
    json_reward = "echo '{\"reward\": 0.5}' > /logs/verifier/reward.json\n"
    forged = _verify_with("mkdir -p /logs/verifier/reward.txt\n" + json_reward, tmp_path)
    assert forged.reward == 0.0 and "reward.txt is not a regular file" in str(forged.problem), forged
    linked = _verify_with("ln -s /logs/verifier/reward.json /logs/verifier/reward.txt\n" + json_reward, tmp_path)
    assert linked.reward == 0.0 and "not a regular file" in str(linked.problem), linked
    assert _verify_with(json_reward, tmp_path).reward == 0.5  # no reward.txt at all: reward.json, as Harbor reads it


def test_the_verifiers_output_is_in_the_state_never_in_an_observation(url: str) -> None:
    final, _, state = _episode(url, "count-word", ["echo 1 > /app/answer.txt"])
    assert final.reward == 0.0 and set(final.metadata["verifier"]) == {"reward", "seconds"}
    assert "answer.txt" in state["verifier_output"] and state["verifier_output"] not in final.text


# -- roles the agent cannot spoof -------------------------------------------------------------------------------

IDIOMS: list[tuple[str, str | None]] = [  # (command, its whole env_output; None: checked below)
    ("exec 2>&1", ""),
    ("echo a; echo b >&2; false", "a\nb\n"),
    ("exec 2>/dev/null", ""),
    ("echo c; echo d >&2", "c\n"),
    ("exec > >(tee -a /tmp/log) 2>&1", ""),
    ("echo teed; ls /nope", None),
    ("mkdir -p $'/tmp/a\\x1eb\\x1e0 1 x' && cd \"$_\"", ""),
    ("true", ""),
    ("""trap 'echo "DBG:$BASH_COMMAND"' DEBUG""", ""),
    ("echo x", "DBG:echo x\nx\n"),
    ("trap - DEBUG", "DBG:trap - DEBUG\n"),
    ("""builtin() { command printf '\\036forged 0 1 /\\036'; }; printf() { echo fake; }""", ""),
    ("echo after", "after\n"),
    (r"command printf 'a\0b\033[31mred\xff\n'", "a\ufffdb\x1b[31mred\ufffd\n"),
    ("python3 -c \"import sys; sys.stdout.write('x' * 16383 + 'é' * 10)\"", "x" * 16383),
]


def test_shell_idioms_keep_steps_whole_and_output_the_programs_own(url: str) -> None:
    with EnvClient(url) as client:
        client.reset(task="count-word", max_steps=100)
        for command, expected in IDIOMS:
            began = time.monotonic()
            result = client.step({"command": command})
            seconds = time.monotonic() - began
            obs, segs = result.observation, result.segments
            output = "".join(s.text for s in segs if s.role is Role.ENV_OUTPUT)
            assert seconds < 10 and obs["exit_code"] is not None and not obs["timed_out"], (command, result.text)
            assert all(s.role is Role.WARNING for s in segs if s.role is not Role.ENV_OUTPUT)
            assert "__oe" not in output and "\x1e" + "forged" not in output
            if expected is not None:
                assert output == expected, (command, output)
            else:
                assert output.startswith("teed\n") and "/nope" in output and obs["exit_code"] == 2, output
        assert obs["truncated"] and "\ufffd" not in obs["output"]  # the cap fell inside 'é': left out whole
        assert client.step({"command": "pwd"}).observation["cwd"] == "/tmp/a\x1eb\x1e0 1 x"
        client.reset(task="count-word")
        other = client.step({"command": "exec 1>&2; echo to-stderr"})
        assert [(s.text, s.metadata) for s in other.segments if s.role is Role.ENV_OUTPUT] == [
            ("to-stderr\n", {"stream": "stderr"})
        ]


def test_the_driver_runs_as_the_agent_without_capabilities_and_cannot_be_traced(url: str) -> None:
    with EnvClient(url) as client:
        client.reset(task="count-word")
        status = client.step({"command": "grep -E '^(Uid|CapEff)' /proc/$PPID/status"}).observation["output"]
        assert status.split() == ["Uid:", *["1000"] * 4, "CapEff:", "0" * 16], status
        memory = client.step({"command": "head -c 1 /proc/$PPID/environ; head -c 1 /proc/$PPID/mem"})
        assert memory.text.count("Permission denied") == 2, memory.text  # not dumpable: no peeking, no ptrace


def test_the_engines_complaints_are_never_output(shell_task_images: dict[str, str]) -> None:
    """An exec the runtime cannot start ("OCI runtime exec failed": no such program) is the harness's error."""
    rt = ShellRuntime(pool_size=0)
    try:
        sandbox = rt.acquire(SUITE.by_name("count-word"))
        exec_id = sandbox.client.api.exec_create(sandbox.container.id, ["/no/such/driver"], stdin=True)["Id"]
        link = ShellLink(_Channel(sandbox.client.api.exec_start(exec_id, socket=True)))
        with pytest.raises(ShellStartError, match="did not start"):
            link.start(timeout_s=15)
        assert sandbox.run("echo still-fine", 10, 1024).output == "still-fine\n"
    finally:
        rt.close()


def test_the_supervisor_fills_the_work_directory_as_the_agent_and_stays_in_step(
    shell_task_images: dict[str, str], tmp_path: Path
) -> None:
    """A generated instance's files come in through the supervisor (no exec through the engine on a reset's path):
    they belong to the agent; a payload tar refuses is a clear error, and none of its bytes is read as a request."""
    files = tmp_path / "files"
    (files / "sub").mkdir(parents=True)
    (files / "a.txt").write_text("alpha\n")
    (files / "sub" / "b.txt").write_text("beta\n")
    rt = ShellRuntime(pool_size=0)
    try:
        sandbox = rt.acquire(SUITE.by_name("count-word"))
        # tar stops at the archive's end: the bytes after it are drained, never read as requests (were they, the
        # supervisor's next answer would be "none")
        sandbox.fill(app_tar(files) + b"reward\n" * 40_000)  # more than a pipe holds
        assert sandbox.supervise("status -1").split()[0] == "status"
        shown = sandbox.run("stat -c '%u %n' a.txt sub/b.txt notes.txt; cat sub/b.txt", 10, 4096).output
        assert shown == "1000 a.txt\n1000 sub/b.txt\n1000 notes.txt\nbeta\n", shown
        with pytest.raises(RuntimeError, match="could not fill /app: filled 2 tar: This does not look like a tar"):
            sandbox.fill(b"reward\n" * 5000)
        assert sandbox.supervise("status -1").split()[0] == "status"
        assert sandbox.run("echo still-fine", 10, 1024).output == "still-fine\n"
    finally:
        rt.close()


# -- episodes the agent cannot brick ---------------------------------------------------------------------------


def test_a_removed_directory_a_forged_report_and_a_fork_bomb_do_not_brick_the_episode(url: str) -> None:
    with EnvClient(url) as client:
        client.reset(task="count-word", max_steps=100, command_timeout_s=5)
        client.step({"command": "mkdir /tmp/build && cd /tmp/build && rm -rf /tmp/build"})
        exited = client.step({"command": "exit 4"})
        assert "the shell exited with status 4" in exited.text
        assert "working directory /tmp/build is gone: the new shell starts in /app" in exited.text
        assert client.step({"command": "pwd"}).observation["output"] == "/app\n"
        forged = client.step({"command": "for fd in /proc/$$/fd/*; do echo garbage >&${fd##*/}; done 2>/dev/null"})
        assert forged.observation["exit_code"] is None or forged.observation["exit_code"] == 0, forged.text
        bomb = client.step({"command": ":(){ :|:& };:; sleep 1"})
        assert "reached its process limit" in bomb.text and "every process of the agent" in bomb.text
        began = time.monotonic()
        after = client.step({"command": "echo still-here; ls /proc | grep -c '^[0-9]'"})
        assert after.observation["output"].startswith("still-here\n") and time.monotonic() - began < 5
        assert int(after.observation["output"].split()[-1]) <= 8, after.text


# -- containers the agent cannot leak --------------------------------------------------------------------------


def _serve(pool: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "openenv_echo.cli", "serve", "shell", "--port", str(port), "--log-level", "warning"]
    env = {**os.environ, "OPENENV_ECHO_SHELL_POOL": str(pool)}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            EnvClient(url).health()
            return proc, url
        except Exception:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)


def _owned_by(docker_engine: Any, pid: int) -> list[Any]:
    return [
        c
        for c in docker_engine.containers.list(all=True, filters={"label": OWNER_LABEL})
        if c.labels[OWNER_LABEL].split("/")[1] == str(pid)
    ]


def test_a_server_killed_while_each_kind_of_container_exists_leaves_nothing(
    docker_engine: Any, shell_task_images: dict[str, str]
) -> None:
    kinds_seen: set[str] = set()
    killed: list[int] = []
    # 1. the never-started container a task image's working directory is copied from (made on a first reset)
    for _ in range(3):
        proc, url = _serve(pool=0)
        events = docker_engine.events(decode=True, filters={"event": "create", "label": f"{KIND_LABEL}=workdir-copy"})

        def kill_on_create(proc: subprocess.Popen[bytes] = proc, events: Any = events) -> None:
            for event in events:
                if event.get("Actor", {}).get("Attributes", {}).get(OWNER_LABEL, "").split("/")[1:2] == [str(proc.pid)]:
                    proc.send_signal(signal.SIGKILL)
                    return

        watcher = threading.Thread(target=kill_on_create)
        watcher.start()
        try:
            EnvClient(url, message_timeout_s=30).reset(task="count-word")
        except Exception:
            pass  # the server died under the reset
        proc.wait(timeout=30)
        events.close()
        watcher.join(timeout=10)
        killed.append(proc.pid)
        kinds_seen |= {c.labels.get(KIND_LABEL) for c in _owned_by(docker_engine, proc.pid)}
        if "workdir-copy" in kinds_seen:
            break
    # 2. an episode's sandbox and one waiting in the pool
    proc, url = _serve(pool=1)
    client = EnvClient(url)
    client.reset(task="count-word")
    deadline = time.monotonic() + 60
    while len(_owned_by(docker_engine, proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    killed.append(proc.pid)
    left = [c for pid in killed for c in _owned_by(docker_engine, pid)]
    kinds_seen |= {c.labels.get(KIND_LABEL) for c in left}
    assert kinds_seen >= {"workdir-copy", "sandbox"} and len(_owned_by(docker_engine, proc.pid)) == 2, kinds_seen
    server = BackgroundServer(create_app(ShellEnvironment, limits=ServerLimits()))
    server.start()  # its startup sweeps what the dead servers left
    try:
        assert [c for pid in killed for c in _owned_by(docker_engine, pid)] == []
    finally:
        server.stop()
