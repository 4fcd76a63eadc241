"""The docker scripts parse, and start-dockerd.sh fails loudly (never silently) when no engine can start."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT

SCRIPTS = sorted((ROOT / "scripts" / "docker").glob("*.sh"))


def test_scripts_exist() -> None:
    names = {p.name for p in SCRIPTS}
    assert {"build-base-image.sh", "build-wheelhouse.sh", "start-dockerd.sh", "ci-tier.sh"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse_and_are_executable(script: Path) -> None:
    assert script.stat().st_mode & 0o111, f"{script} is not executable"
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_start_dockerd_fails_loudly_when_the_daemon_dies(tmp_path: Path) -> None:
    """A daemon that exits at once (e.g. no cgroups / iptables): exit 1 with a banner and the daemon's log."""
    fake = tmp_path / "bin"
    fake.mkdir()
    _stub(fake, "docker", "exit 1")  # `docker info` never answers
    _stub(fake, "docker-compose", "exit 0")
    _stub(fake, "dockerd", "echo 'failed to start daemon: Devices cgroup isn'\"'\"'t mounted' >&2; exit 1")
    _stub(fake, "pgrep", "exit 1")  # no dockerd process (ignores a real one on this machine)
    _stub(fake, "id", "echo 0")  # behave as root so the script tries to start the daemon
    log = tmp_path / "dockerd.log"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "DOCKERD_LOG": str(log), "DOCKERD_WAIT_S": "5"}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "docker" / "start-dockerd.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "DOCKER ENGINE UNAVAILABLE: dockerd exited during startup" in proc.stderr
    assert "This is a failure, not a skip." in proc.stderr
    assert "Devices cgroup isn't mounted" in proc.stderr  # the daemon's own last log lines


def test_start_dockerd_fails_loudly_without_root(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    _stub(fake, "docker", "exit 1")
    _stub(fake, "docker-compose", "exit 0")
    _stub(fake, "dockerd", "exit 1")
    _stub(fake, "id", "echo 1000")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "DOCKERD_LOG": str(tmp_path / "d.log")}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "docker" / "start-dockerd.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "DOCKER ENGINE UNAVAILABLE: no engine running and not root" in proc.stderr
