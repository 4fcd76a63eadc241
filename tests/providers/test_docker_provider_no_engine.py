"""DockerProvider without a reachable engine: a clear ProviderError that says how to get one (no docker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from openenv_echo.envs import spec_of
from openenv_echo.providers import DockerProvider, ProviderError, engine_available
from openenv_echo.providers.docker import env_dockerfile, repo_root


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")


def test_unreachable_engine_is_a_provider_error(no_engine: None) -> None:
    provider = DockerProvider("openenv-echo/echo:latest")
    with pytest.raises(ProviderError, match=r"Docker engine not reachable .*no-docker\.sock.*start-dockerd\.sh"):
        provider.start()
    assert not provider.started
    assert not engine_available()


def test_for_env_points_at_the_checkout(no_engine: None) -> None:
    provider = DockerProvider.for_env(spec_of("sql"), base_image="example/base:1")
    assert provider.image == "openenv-echo/sql:latest"
    assert provider.build_context == repo_root()
    assert provider.dockerfile == env_dockerfile("sql") == repo_root() / "envs/sql_env/server/Dockerfile"
    assert provider.build_args == {"BASE_IMAGE": "example/base:1"}
    run = provider._run_options()
    assert run["user"] == "65532:65532" and run["read_only"] and run["cap_drop"] == ["ALL"]
    assert run["ports"] == {"8000/tcp": ("127.0.0.1",)}  # Docker picks the host port, loopback only


def test_limits_become_environment_variables(no_engine: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from openenv_echo.server import ServerLimits

    provider = DockerProvider("img", max_sessions=2, idle_timeout_s=None, env={"X": "1"})
    env = provider._run_options()["environment"]
    assert env.pop("X") == "1"
    assert env["OPENENV_ECHO_MAX_SESSIONS"] == "2" and env["OPENENV_ECHO_IDLE_TIMEOUT_S"] == "none"
    assert set(env) == {"OPENENV_ECHO_" + name.upper() for name in ServerLimits.model_fields}  # every limit
    for key, value in env.items():  # the server in the container reads them back into the same limits
        monkeypatch.setenv(key, value)
    assert ServerLimits.from_env() == ServerLimits(max_sessions=2, idle_timeout_s=None)
    with pytest.raises(ValueError):
        DockerProvider("img", max_sessions=0)
