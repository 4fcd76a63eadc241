"""LocalProcessProvider: a real child server process on loopback, a real client episode, real failures."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from openenv_echo.client import EnvClient
from openenv_echo.providers import LocalProcessProvider, ProviderError
from openenv_echo.roles import Role


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as dead
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_echo_episode_through_local_process() -> None:
    provider = LocalProcessProvider("echo", max_sessions=2)
    with EnvClient.from_provider(provider) as client:
        assert provider.is_running() and provider.base_url.startswith("http://127.0.0.1:")
        pid = provider.pid
        assert pid is not None
        client.reset(seed=0, messages=[{"role": "user", "content": "echo me"}])
        result = client.step({"message": "hi there"}, action_text="hi there")
        assert [(s.role, s.text) for s in result.segments] == [
            (Role.WARNING, "[echo] "),
            (Role.ENV_OUTPUT, "hi there\n"),
        ]
        assert result.reward == pytest.approx(0.08)
        assert client.step({"message": "bye"}, action_text="bye").done
        trajectory = client.trajectory
        assert trajectory is not None
        assert [m.role for m in trajectory.messages] == ["user"]
        assert trajectory.reset is not None and [s.role for s in trajectory.reset.segments] == [Role.CONTEXT]
        assert [s.action_text for s in trajectory.steps] == ["hi there", "bye"]
        assert trajectory.steps[1].observation.done
        # the limits reached the server process through OPENENV_ECHO_* variables
        assert "max_sessions=2" in provider.logs(200)
    # closing the client stopped the provider it owned
    assert not provider.started and not provider.is_running()
    deadline = time.monotonic() + 5
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(pid)


def test_context_manager_and_idempotent_start_stop() -> None:
    with LocalProcessProvider("echo") as provider:
        url = provider.base_url
        assert provider.start() == url  # second start: same server
        assert httpx.get(url + "/health", trust_env=False).json() == {"status": "healthy"}
        provider.check()
    provider.stop()  # second stop is harmless
    with pytest.raises(ProviderError, match="not started"):
        provider.base_url
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", trust_env=False, timeout=1)


def test_unknown_env_reports_the_servers_last_log_lines() -> None:
    provider = LocalProcessProvider("no_such_env")
    with pytest.raises(ProviderError) as info:
        provider.start()
    err = info.value
    assert "exited with code" in err.message
    assert "unknown environment 'no_such_env'" in err.logs
    assert "last log lines of local:no_such_env" in str(err)
    assert not provider.started


def test_bad_module_path_reports_import_error() -> None:
    with pytest.raises(ProviderError) as info:
        LocalProcessProvider("openenv_echo.no_such_module:Env").start()
    assert "No module named 'openenv_echo.no_such_module'" in info.value.logs  # the server's own error line


def test_cwd_serves_the_code_found_there(tmp_path: Path) -> None:
    """``python -m`` puts the working directory first on the path: a module only ``cwd`` holds is served (how a
    before/after benchmark serves another checkout)."""
    (tmp_path / "cwd_only_env.py").write_text(
        "from openenv_echo.envs.echo.environment import EchoEnvironment\n\nclass CwdEcho(EchoEnvironment):\n    pass\n"
    )
    with pytest.raises(ProviderError) as info:  # not importable from anywhere else
        LocalProcessProvider("cwd_only_env:CwdEcho").start()
    assert "No module named 'cwd_only_env'" in info.value.logs
    with LocalProcessProvider("cwd_only_env:CwdEcho", cwd=tmp_path) as provider:
        assert provider.pid is not None and os.readlink(f"/proc/{provider.pid}/cwd") == str(tmp_path)
        with EnvClient(provider.base_url) as client:
            client.reset(seed=0, messages=[{"role": "user", "content": "echo me"}])
            assert client.step({"message": "hi"}, action_text="hi").segments[-1].text == "hi\n"


def test_server_dying_later_is_reported_with_logs() -> None:
    with LocalProcessProvider("echo") as provider:
        client = EnvClient(provider.base_url, connect_timeout_s=2)
        client.reset()
        os.kill(provider.pid, signal.SIGKILL)  # type: ignore[arg-type]
        deadline = time.monotonic() + 5
        while provider.is_running() and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(ProviderError, match="exited on signal SIGKILL") as info:
            provider.check()
        assert "Uvicorn running on" in info.value.logs
        with pytest.raises(ProviderError, match="server exited on signal SIGKILL") as info:
            with provider.reporting():
                client.step({"message": "anyone?"})
        assert info.value.__cause__ is not None
        client.close()


def test_busy_port_is_a_provider_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ProviderError) as info:
            LocalProcessProvider("echo", port=port, startup_timeout_s=15).start()
    assert "address already in use" in info.value.logs.lower()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"max_sessions": 0}, ValidationError),
        ({"no_such_limit": 1}, ValidationError),
        ({"mode": "turbo"}, ValueError),
    ],
)
def test_bad_arguments_fail_before_starting(kwargs: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        LocalProcessProvider("echo", **kwargs)


def test_empty_env_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="env_name"):
        LocalProcessProvider("")


def test_startup_timeout_reports_logs() -> None:
    # a server that never answers /health: python sleeping instead of serving
    provider = LocalProcessProvider("echo", startup_timeout_s=1.0)
    provider.command = lambda: [
        provider.python,
        "-c",
        "print('sleeping instead of serving', flush=True); import time; time.sleep(60)",
    ]  # type: ignore[method-assign]
    with pytest.raises(ProviderError, match=r"did not return 200 within 1s") as info:
        provider.start()
    assert "sleeping instead of serving" in info.value.logs
    assert not provider.started


def test_only_the_limits_given_reach_the_child_the_rest_are_the_envs_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # the server's 2 s default step timeout once overrode the shell env's own (1900 s: a verifier runs in a step)
    for name in ("OPENENV_ECHO_STEP_TIMEOUT_S", "OPENENV_ECHO_MAX_SESSIONS"):
        monkeypatch.delenv(name, raising=False)
    assert "OPENENV_ECHO_STEP_TIMEOUT_S" not in LocalProcessProvider("shell")._child_env()
    given = LocalProcessProvider("shell", step_timeout_s=5.0, max_sessions=3)._child_env()
    assert given["OPENENV_ECHO_STEP_TIMEOUT_S"] == "5.0" and given["OPENENV_ECHO_MAX_SESSIONS"] == "3"
