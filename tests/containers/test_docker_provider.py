"""DockerProvider against a real engine: hardening, cleanup, and failures reported with the container's logs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from openenv_echo.client import EnvClient
from openenv_echo.envs import EnvSpec
from openenv_echo.providers import DockerProvider, ProviderError

pytestmark = pytest.mark.docker


def _gone(client: Any, name: str) -> bool:
    return not client.containers.list(all=True, filters={"name": f"^/{name}$"})


def test_container_runs_hardened_and_is_removed_on_stop(docker_engine: Any, env_image: Callable[[str], str]) -> None:
    provider = DockerProvider(env_image("echo"), client=docker_engine, max_sessions=3)
    with EnvClient.from_provider(provider) as client:
        client.reset(seed=1)
        assert client.step({"message": "in a box"}).segments[1].text == "in a box\n"
        attrs = provider.container.attrs
        host = attrs["HostConfig"]
        assert attrs["Config"]["User"] == "65532:65532"
        assert host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in host["SecurityOpt"]
        assert host["PidsLimit"] == 256
        assert "/tmp" in host["Tmpfs"]
        assert host["PortBindings"]["8000/tcp"][0]["HostIp"] == "127.0.0.1"
        assert "OPENENV_ECHO_MAX_SESSIONS=3" in attrs["Config"]["Env"]
        assert not attrs["Mounts"]  # no VOLUME: OpenEnv's validator refuses mounts
        name = provider.name
    assert _gone(docker_engine, name)
    assert provider.exit_status() is not None and not provider.started


def test_container_whose_command_exits_reports_its_last_log_lines(
    docker_engine: Any, env_image: Callable[[str], str]
) -> None:
    provider = DockerProvider(
        env_image("echo"),
        client=docker_engine,
        command=["sh", "-c", "echo 'config missing: /etc/env.toml' >&2; exit 3"],
    )
    with pytest.raises(ProviderError) as info:
        provider.start()
    err = info.value
    assert "code 3" in err.message
    assert "config missing: /etc/env.toml" in err.logs
    assert f"last log lines of container {provider.name}" in str(err)
    assert _gone(docker_engine, provider.name)


def test_unknown_env_in_container_reports_the_servers_error(
    docker_engine: Any, env_image: Callable[[str], str]
) -> None:
    provider = DockerProvider(env_image("echo"), client=docker_engine, env={"OPENENV_ECHO_ENV": "no_such_env"})
    # the CLI refuses an unknown env name as a usage error (exit 2, typer's convention)
    with pytest.raises(ProviderError, match="exited with code 2") as info:
        provider.start()
    assert "unknown environment 'no_such_env'" in info.value.logs


def test_container_dying_later_is_reported_by_check_and_client_errors(
    docker_engine: Any, env_image: Callable[[str], str]
) -> None:
    # serve normally, then die with a message once a marker file appears in the tmpfs
    script = (
        "openenv-echo serve echo --host 0.0.0.0 --port 8000 & pid=$!; "
        "while [ ! -f /tmp/die ]; do sleep 0.1; done; "
        "echo 'fatal: out of widgets' >&2; kill -9 $pid; exit 9"
    )
    with DockerProvider(env_image("echo"), client=docker_engine, command=["sh", "-c", script]) as provider:
        client = EnvClient(provider.base_url, connect_timeout_s=3)
        client.reset()
        provider.check()  # healthy so far
        provider.container.exec_run(["touch", "/tmp/die"], user="65532:65532")
        deadline = time.monotonic() + 20
        while provider.is_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(ProviderError, match="code 9") as info:
            provider.check()
        assert "fatal: out of widgets" in info.value.logs
        with pytest.raises(ProviderError, match="exited with code 9") as info, provider.reporting():
            client.step({"message": "still there?"})
        assert "fatal: out of widgets" in info.value.logs
        client.close()
    assert _gone(docker_engine, provider.name)


def test_missing_image_with_pull_never(docker_engine: Any) -> None:
    provider = DockerProvider("openenv-echo/does-not-exist:never", client=docker_engine, pull="never")
    with pytest.raises(ProviderError, match="not found locally and pull='never'"):
        provider.start()


def test_unpullable_image_is_a_provider_error(docker_engine: Any) -> None:
    provider = DockerProvider("localhost:1/openenv-echo/nothing-here:latest", client=docker_engine)
    with pytest.raises(ProviderError, match="could not be pulled"):
        provider.start()


def test_failing_build_reports_the_build_log(docker_engine: Any, base_image: str, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo 'compiling the widget frobnicator' && exit 4\n")
    provider = DockerProvider("openenv-echo/broken-build:test", build_context=tmp_path, client=docker_engine)
    with pytest.raises(ProviderError, match="docker build of openenv-echo/broken-build:test failed") as info:
        provider.start()
    assert "compiling the widget frobnicator" in info.value.logs


def test_health_timeout_reports_logs(docker_engine: Any, env_image: Callable[[str], str]) -> None:
    provider = DockerProvider(
        env_image("echo"), client=docker_engine, startup_timeout_s=2,
        command=["sh", "-c", "echo 'warming up forever'; sleep 60"],
    )  # fmt: skip
    with pytest.raises(ProviderError, match="did not return 200 within 2s") as info:
        provider.start()
    assert "warming up forever" in info.value.logs
    assert _gone(docker_engine, provider.name)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="image"):
        DockerProvider("")
    with pytest.raises(ValueError, match="pull"):
        DockerProvider("x", pull="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="container name"):
        DockerProvider("x", name="bad name!")
    with pytest.raises(ValueError, match="dockerfile needs build_context"):
        DockerProvider("x", dockerfile="Dockerfile")
    with pytest.raises(ProviderError, match="no Dockerfile for environment 'nope'"):
        DockerProvider.for_env(EnvSpec("nope", "nope:Env", "0"))


def test_health_endpoint_reachable_only_on_loopback(docker_engine: Any, env_image: Callable[[str], str]) -> None:
    with DockerProvider(env_image("echo"), client=docker_engine) as provider:
        assert httpx.get(provider.base_url + "/health", trust_env=False).json() == {"status": "healthy"}
        binding = provider.container.attrs["NetworkSettings"]["Ports"]["8000/tcp"]
        assert [b["HostIp"] for b in binding] == ["127.0.0.1"]
