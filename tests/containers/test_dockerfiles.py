"""Static checks of the container files (no engine needed): the env Dockerfiles stay in sync and stay
OpenEnv-validator friendly, docker-compose.yml can scale."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from .conftest import ENVS, ROOT

DOCKERFILES = {env: ROOT / "envs" / f"{env}_env" / "server" / "Dockerfile" for env in ENVS}


def _instructions(text: str) -> list[str]:
    """Dockerfile instructions with continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
    return [" ".join(l.split()) for l in joined.splitlines() if l.strip()]


SHELL_TAIL = [
    "COPY envs/shell_env/tasks /opt/openenv-echo/shell-tasks",
    "ENV OPENENV_ECHO_SHELL_TASKS=/opt/openenv-echo/shell-tasks",
]


def test_env_dockerfiles_differ_only_in_env_name() -> None:
    """Every layer before ENV_NAME is shared by all env images; the shell image only adds its task suite at the end."""
    bodies = {}
    for env, path in DOCKERFILES.items():
        lines = _instructions(path.read_text())
        assert f"ARG ENV_NAME={env}" in lines, path
        bodies[env] = [l for l in lines if not l.startswith("ARG ENV_NAME=")]
    assert bodies["shell"][-len(SHELL_TAIL) :] == SHELL_TAIL
    bodies["shell"] = bodies["shell"][: -len(SHELL_TAIL)]
    assert all(body == bodies["echo"] for body in bodies.values())


@pytest.mark.parametrize("env", ENVS)
def test_dockerfile_is_validator_friendly(env: str) -> None:
    lines = _instructions(DOCKERFILES[env].read_text())
    assert lines[0] == "ARG BASE_IMAGE=python:3.11-slim"
    assert lines.count("USER 65532:65532") == 1 and lines.index("USER 65532:65532") > lines.index("FROM ${BASE_IMAGE}")
    assert "EXPOSE 8000" in lines
    assert not any(l.startswith("VOLUME") for l in lines)  # OpenEnv's validator refuses mounts
    health = next(l for l in lines if l.startswith("HEALTHCHECK"))
    assert "urllib.request" in health and "curl" not in health and "/health" in health
    # the health check asks the probe listener, which answers while the main port sheds a connection flood
    assert "EXPOSE 8001" in lines and "127.0.0.1:8001/health" in health
    assert any("OPENENV_ECHO_PROBE_PORT=8001" in l for l in lines)
    assert any(l.startswith("CMD") and "--port 8000" in l and "0.0.0.0" in l for l in lines)
    assert any("--no-index --find-links /wheelhouse" in l for l in lines)  # installs offline from the wheelhouse
    assert any("HOME=/tmp" in l for l in lines)  # writable home under the read-only root


def test_compose_file_scales_and_hardens() -> None:
    import yaml

    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert spec["version"] == "2.4"  # docker-compose v1 needs 2.x for pids_limit/init
    services = spec["services"]
    assert set(services) == set(ENVS)
    ranges = []
    for env, svc in services.items():
        assert "container_name" not in svc  # would break --scale
        assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == DOCKERFILES[env].resolve()
        assert svc["build"]["args"]["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim}"
        assert svc["image"] == f"openenv-echo/{env}:latest"
        assert svc["user"] == "65532:65532" and svc["read_only"] is True and svc["cap_drop"] == ["ALL"]
        assert svc["pids_limit"] == 256 and any(t.startswith("/tmp:") for t in svc["tmpfs"])
        assert "no-new-privileges:true" in svc["security_opt"]
        assert "/health" in " ".join(svc["healthcheck"]["test"])
        (port,) = svc["ports"]
        m = re.fullmatch(r"127\.0\.0\.1:\$\{[A-Z_]+:-(\d+)-(\d+)\}:8000", port)
        assert m, port  # loopback only, a host port RANGE so replicas never collide
        ranges.append(range(int(m[1]), int(m[2]) + 1))
    for i, a in enumerate(ranges):
        for b in ranges[i + 1 :]:
            assert not set(a) & set(b)


def test_compose_config_is_accepted_by_docker_compose() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose (v1) not installed")
    proc = subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_dockerignore_keeps_the_wheelhouse_and_drops_the_venv() -> None:
    patterns = [
        l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")
    ]
    assert ".venv" in patterns and ".git" in patterns and "tests" in patterns
    assert ".cache/*" in patterns and "!.cache/wheelhouse" in patterns
    assert "openenv_echo" not in patterns and "pyproject.toml" not in patterns
