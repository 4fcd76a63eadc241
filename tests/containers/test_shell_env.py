"""The shell env through the full stack: client -> server -> one container per episode -> the task's verifier.

A server of the env runs on loopback in this process (its containers on the real engine). Acceptance: every
shipped task's reference solution earns 1 and an untouched submission 0; the hostile list is answered within the
container's limits while a second session keeps being served; a container killed mid-episode is a typed error
carrying its last log lines; containers go away on episode end, reset, disconnect, idle timeout, shutdown and (for
a killed server) at the next server's start; no container is left behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from shell_env.server import ShellEnvironment, solution_actions, task_suite
from shell_env.server.generate_tasks import GENERATED_FAMILIES
from shell_env.server.runtime import OWNER_LABEL, owner_token
from shell_env.server.shell_environment import task_for_seed

from openenv_echo.client import EnvClient, SandboxLostError
from openenv_echo.roles import Role
from openenv_echo.server import BackgroundServer, ServerLimits, create_app
from openenv_echo.server.background import free_port
from openenv_echo.wire import warning

from .conftest import ROOT

pytestmark = pytest.mark.docker

SUITE = task_suite()
SECRET = "openenv-echo-host-secret-4f1c"


def _ours(docker_engine: Any) -> list[Any]:
    """The containers of this process's shell servers (a compose shell service may hold its own)."""
    return docker_engine.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={owner_token()}"})


def _gone(docker_engine: Any, container_id: str, timeout_s: float = 30.0) -> bool:
    import docker.errors

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            docker_engine.containers.get(container_id)
        except docker.errors.NotFound:
            return True
        time.sleep(0.2)
    return False


def _start_server(**limits: Any) -> BackgroundServer:
    settings = {"max_sessions": 8, "step_timeout_s": 600.0, **limits}
    return BackgroundServer(create_app(ShellEnvironment, limits=ServerLimits(**settings)))


@pytest.fixture(scope="module")
def shell_url(shell_task_images: dict[str, str], docker_engine: Any) -> Iterator[str]:
    os.environ[SECRET] = "do-not-leak"  # the server's environment: no episode may see it
    server = _start_server()
    url = server.start()
    yield url
    server.stop()
    os.environ.pop(SECRET, None)
    assert _ours(docker_engine) == [], "the server's shutdown left containers"


def _near_miss(task: Any) -> dict[str, str]:
    script = (task.path / "solution" / "near_miss.sh").read_text(encoding="utf-8").rstrip()
    return {"command": f"bash <<'__NEAR_MISS__'\n{script}\n__NEAR_MISS__"}


def _three_submissions(
    url: str, name: str, seed: int | None = None
) -> tuple[tuple[float, float, float], list[dict[str, Any]]]:
    """The rewards of the reference solution, of an untouched submission and of the task's near miss (the shipped
    task ``name``, or the task of training ``seed``), and what the verifier said of each (its problem, the end of
    what the tests printed): a failure explains itself."""
    task = SUITE.by_name(name) if seed is None else task_for_seed(seed)
    options: dict[str, Any] = {"task": name} if seed is None else {"seed": seed}
    rewards, verdicts = [], []
    with EnvClient(url) as client:
        for actions in (solution_actions(task), [{"command": "submit"}], [_near_miss(task), {"command": "submit"}]):
            first = client.reset(**options)
            assert [s.role for s in first.segments] == [Role.CONTEXT] and task.instruction in first.text
            assert first.metadata["task"] == task.name
            for action in actions:
                result = client.step(action)
            assert result.done, result.text
            assert "output" not in result.metadata["verifier"]  # what the tests printed stays off the observation
            rewards.append(float(result.reward or 0.0))
            output = client.state().get("verifier_output") or ""
            verdicts.append({**result.metadata["verifier"], "output": output[-600:]})
    return (rewards[0], rewards[1], rewards[2]), verdicts


@pytest.mark.timeout(1200)  # 126 episodes on a loaded 2-core machine
def test_every_task_scores_1_solved_0_untouched_0_near_miss(shell_url: str) -> None:
    names = [t.name for t in SUITE.tasks]
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = dict(zip(names, pool.map(lambda n: _three_submissions(shell_url, n), names)))
    wrong = {
        name: {"rewards": rewards, "verifier (solved, untouched, near miss)": verdicts}
        for name, (rewards, verdicts) in outcomes.items()
        if rewards != (1.0, 0.0, 0.0)
    }
    assert not wrong, wrong


@pytest.mark.timeout(900)
def test_generated_training_instances_score_1_solved_0_untouched_0_near_miss(shell_url: str) -> None:
    """Training seeds past the shipped training tasks are fresh instances on their family's image (no build): one
    per generated family, each at a different depth of the seed range."""
    shipped, families = len(SUITE.split("train")), len(GENERATED_FAMILIES)
    seeds = [shipped + i + families * (7 * i + 3) for i in range(families)]
    tasks = [task_for_seed(seed) for seed in seeds]
    assert sorted(t.image_of or "" for t in tasks) == sorted(f.name for f in GENERATED_FAMILIES)
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = dict(zip(seeds, pool.map(lambda seed: _three_submissions(shell_url, "", seed), seeds)))
    wrong = {
        f"seed {seed} ({task_for_seed(seed).name})": {"rewards": rewards, "verifier": verdicts}
        for seed, (rewards, verdicts) in outcomes.items()
        if rewards != (1.0, 0.0, 0.0)
    }
    assert not wrong, wrong


def test_a_step_shows_roles_streams_status_and_keeps_shell_state(shell_url: str) -> None:
    with EnvClient(shell_url) as client:
        client.reset(task="count-word")
        client.step({"command": "cd /tmp && X=42"})
        command = "echo out-$X; sleep 0.2; echo err >&2; sleep 0.2; echo tail; sleep 0.2; exit_not_found"
        result = client.step({"command": command})
        obs = result.observation
        assert obs["cwd"] == "/tmp" and obs["exit_code"] == 127 and obs["steps_left"] == 48
        segs = result.segments
        assert segs[0] == warning(f"/tmp$ {command}\n") and segs[-1] == warning("[exit status 127]\n")
        assert [(s.role, s.metadata) for s in segs[1:-1]] == [
            (Role.ENV_OUTPUT, None),
            (Role.ENV_OUTPUT, {"stream": "stderr"}),
            (Role.ENV_OUTPUT, None),
            (Role.ENV_OUTPUT, {"stream": "stderr"}),
        ]  # stdout and stderr interleaved as the processes wrote them
        assert [s.text for s in segs[1:4]] == ["out-42\n", "err\n", "tail\n"]
        assert "exit_not_found: command not found" in segs[4].text
        assert result.text == "".join(s.text for s in segs)


def hostile_commands(host_file: Path) -> list[tuple[str, str]]:
    return [
        ("leave files", "echo x > /tmp/leak-check; echo x > /app/leak-check"),
        ("memory hog", "python3 -c 'x = bytearray(4 * 1024**3)'"),
        ("disk filler", "dd if=/dev/zero of=/app/big bs=1M count=2000"),
        ("network", "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)\""),
        ("sleep forever", "sleep infinity"),
        ("output flood", "yes flood"),
        ("background", "(while :; do sleep 1; done) & echo started"),
        ("write outside", "echo x > /etc/passwd; echo x > /usr/bin/pwned; echo 1 > /logs/verifier/reward.txt"),
        ("host files and env", f"env; cat /proc/1/environ; ls /var/run/docker.sock; cat {host_file}"),
        ("nul byte", "echo a\x00b"),
        ("fork bomb", ":(){ :|:& };:; sleep 1"),
        ("after the bomb", "echo still-here"),
    ]


def check_answer(name: str, text: str, obs: dict[str, Any], host_file: Path) -> None:
    """What each hostile command must be answered with (the world's own words, or the harness's notice)."""
    if name == "leave files":
        assert obs["exit_code"] == 0
    elif name == "memory hog":
        # killed by the kernel (137); on a loaded machine filling 512 MB can outlast the 3 s limit, and the harness's
        # kill then comes first: either way the OOM notice is there
        assert obs["exit_code"] == 137 or obs["timed_out"], text
        assert "OOM killer stopped" in text and "limit is 512 MB" in text
    elif name == "disk filler":
        assert "No space left on device" in text and obs["exit_code"] == 1
    elif name == "network":
        assert "Network is unreachable" in text and obs["exit_code"] == 1
    elif name == "sleep forever":
        assert obs["timed_out"] and obs["exit_code"] is None and "after 3 s (its wall-time limit)" in text
    elif name == "output flood":
        assert obs["truncated"] and "output truncated" in text and "kept writing output" in text
        assert len(obs["output"].encode()) <= 16384
    elif name == "background":
        assert "started" in obs["output"] and "still running in the background: bash" in text
    elif name == "write outside":
        assert text.count("Read-only file system") == 2 and "reward.txt: Permission denied" in text
    elif name == "host files and env":
        assert SECRET not in text and "HOME=/tmp" in text
        assert "/proc/1/environ: Permission denied" in text and "docker.sock': No such file" in text
        assert f"{host_file}: No such file" in text
    elif name == "nul byte":
        assert "command rejected: it contains a NUL character" in text and obs["exit_code"] is None
    elif name == "fork bomb":  # the pids limit holds it; the command's wall time stops it
        assert "reached its process limit (128)" in text and "Resource temporarily unavailable" in text
    elif name == "after the bomb":
        assert "still-here" in obs["output"]


def test_hostile_commands_are_bounded_and_answered_while_another_session_is_served(
    shell_url: str, tmp_path: Path
) -> None:
    host_file = tmp_path / "host-only.txt"
    host_file.write_text("host secret\n")
    latencies: list[float] = []
    problems: list[str] = []
    stop = threading.Event()

    def neighbour() -> None:
        try:
            with EnvClient(shell_url) as other:
                other.reset(task="count-word", max_steps=1000)
                while not stop.is_set():
                    began = time.monotonic()
                    r = other.step({"command": "echo ping"})
                    latencies.append(time.monotonic() - began)
                    if r.observation["output"] != "ping\n":
                        problems.append(r.text)
                    time.sleep(0.05)
                seen = other.step({"command": "ls -a /tmp /app"}).observation["output"]
                if "leak-check" in seen:
                    problems.append(f"another session's files are visible: {seen}")
        except Exception as e:  # reported by the main thread
            problems.append(repr(e))

    thread = threading.Thread(target=neighbour)
    thread.start()
    answers: dict[str, tuple[Any, float]] = {}
    try:
        with EnvClient(shell_url) as client:
            client.reset(task="count-word", command_timeout_s=3)
            for name, command in hostile_commands(host_file):
                began = time.monotonic()
                answers[name] = (client.step({"command": command}), time.monotonic() - began)
            client.reset(task="count-word")  # the next episode starts clean: no file, no process of the last one
            clean = client.step({"command": "ls -a /tmp /app; ls /proc | grep -c '^[0-9]'"}).observation["output"]
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive() and not problems, problems
    for name, (result, seconds) in answers.items():
        assert seconds < 20, (name, seconds)  # 3 s per command + kill + a new shell, on a loaded 2-core machine
        try:
            check_answer(name, result.text, result.observation, host_file)
        except AssertionError as e:
            raise AssertionError(f"{name}: {result.text!r}") from e
    assert "leak-check" not in clean and int(clean.split()[-1]) <= 8, clean
    assert latencies and max(latencies) < 10, sorted(latencies)[-5:]


def test_a_killed_container_is_a_typed_error_with_its_last_log_lines(shell_url: str, docker_engine: Any) -> None:
    with EnvClient(shell_url) as client:
        first = client.reset(task="count-word")
        container = first.metadata["container"]
        docker_engine.containers.get(container).kill()
        with pytest.raises(SandboxLostError) as lost:
            client.step({"command": "ls"})
        assert "openenv-echo sandbox: ready" in lost.value.logs
        assert "exited" in lost.value.status and "container is gone" in lost.value.message
        assert client.reset(task="count-word").metadata["container"] != container  # the session goes on
        assert client.step({"command": "true"}).observation["exit_code"] == 0
    assert _gone(docker_engine, container)


def test_containers_go_on_episode_end_reset_disconnect_and_the_pool_serves_resets(
    shell_url: str, docker_engine: Any
) -> None:
    from shell_env.server import runtime as runtime_module

    rt = runtime_module.runtime()
    with EnvClient(shell_url) as client:
        a = client.reset(task="large-files").metadata["container"]
        assert runtime_module.wait_for(lambda: rt.warm("large-files") >= 1, 60)  # a replacement waits in the pool
        warm_before = rt.warm_starts
        began = time.monotonic()
        b = client.reset(task="large-files").metadata["container"]  # reset: a fresh container, the old one goes
        warm_reset_s = time.monotonic() - began
        assert rt.warm_starts == warm_before + 1 and warm_reset_s < 5
        assert a != b and _gone(docker_engine, a)
        assert client.step({"command": "submit"}).done
        assert _gone(docker_engine, b)  # the episode ended
        c = client.reset(task="large-files").metadata["container"]
    assert _gone(docker_engine, c)  # the client went away


def test_idle_sessions_lose_their_container(shell_task_images: dict[str, str], docker_engine: Any) -> None:
    with _start_server(idle_timeout_s=1.0) as url:
        client = EnvClient(url)
        container = client.reset(task="count-word").metadata["container"]
        assert _gone(docker_engine, container, timeout_s=20)
        client.close()


def test_a_restarted_server_removes_what_a_killed_one_left(
    shell_task_images: dict[str, str], docker_engine: Any
) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "openenv_echo.cli", "serve", "shell", "--port", str(port), "--log-level", "warning"]
    env = {**os.environ, "OPENENV_ECHO_SHELL_POOL": "0"}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                EnvClient(url).health()
                break
            except Exception:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
        client = EnvClient(url)
        container = client.reset(task="count-word").metadata["container"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        docker_engine.containers.get(container)  # left behind (stopped: its supervisor's stdin closed with the server)
    finally:
        if proc.poll() is None:
            proc.kill()
    with _start_server():
        assert _gone(docker_engine, container, timeout_s=10)


def test_openenv_clients_drive_the_shell_env(shell_url: str) -> None:
    from openenv.core.generic_client import GenericEnvClient

    from tests.compat.typed_clients import TYPED_CLIENTS, ShellAction

    with TYPED_CLIENTS["shell"](base_url=shell_url).sync() as typed:
        typed.reset(task="count-word", episode_id="compat-shell")
        result = typed.step(ShellAction(command="echo hi"))
        assert result.observation.output == "hi\n" and result.observation.exit_code == 0
        assert typed.state().step_count == 1
    with GenericEnvClient(base_url=shell_url).sync() as generic:
        generic.reset(task="count-word")
        assert generic.step({"command": "submit"}).done is True
    with EnvClient(shell_url) as client:  # the MCP tools are the same transitions
        client.reset(task="count-word")
        tools = client.step({"type": "list_tools"}).observation["tools"]
        assert [t["name"] for t in tools] == ["run_command", "submit"]
        ran = client.step({"type": "call_tool", "tool_name": "run_command", "arguments": {"command": "echo hi"}})
        assert ran.observation["result"]["output"] == "hi\n" and ran.segments[1].text == "hi\n"
        done = client.step({"type": "call_tool", "tool_name": "submit", "arguments": {}})
        assert done.done and done.observation["result"] == {"reward": 0.0, "done": True}


def test_openenv_runtime_graders_pass_on_a_loopback_server(shell_url: str) -> None:
    """OpenEnv's runtime graders (startup, schema, reward, state contract) replaying validation/runtime.json."""
    from tests.openenv_compat import RUNTIME_CHECKS, runtime_results

    status = runtime_results(ROOT / "envs" / "shell_env", shell_url)
    assert all(status[check] == "pass" for check in ("runtime.startup", *RUNTIME_CHECKS)), status


def test_ready_while_the_engine_answers(docker_engine: Any) -> None:
    ShellEnvironment._readiness = (float("-inf"), None)  # no answer cached from another test
    assert asyncio.run(ShellEnvironment.not_ready()) is None
