"""Make targets say what they run, and the docker tier can tell which dockerd it started (to stop only that one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def make_dry_run(target: str, **variables: str) -> str:
    venv = str(Path(sys.executable).parent.parent)
    args = ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}", *(f"{k}={v}" for k, v in variables.items())]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(autouse=True)
def _needs_make() -> None:
    if subprocess.run(["sh", "-c", "command -v make"], capture_output=True).returncode != 0:
        pytest.fail("make is not installed (the README's first commands need it)")


def test_test_fast_runs_no_containers_and_no_trainers() -> None:
    out = make_dry_run("test-fast")
    assert '-m pytest -q -m "not docker and not trainer"' in out
    assert "ci-tier.sh" not in out and "[make test-fast]" in out


def test_test_runs_the_container_tier_then_the_rest() -> None:
    out = make_dry_run("test")
    assert out.index("scripts/docker/ci-tier.sh") < out.index('-m pytest -q -m "not docker"')
    assert "[make test-docker]" in out and "[make test-main]" in out
    assert out.index("mkdocs build --strict") < out.index("scripts/docker/ci-tier.sh")  # the docs site, strictly


def test_docs_builds_the_site_strictly_into_an_uncommitted_dir() -> None:
    out = make_dry_run("docs")
    assert "[make docs]" in out and "/mkdocs build --strict" in out
    assert "/site/" in (ROOT / ".gitignore").read_text().splitlines()


def test_setup_can_take_torch_from_the_cpu_index(tmp_path: Path) -> None:
    venv = tmp_path / "venv"  # a venv that does not exist yet: make shows the whole install
    args = ["make", "-n", "-C", str(ROOT), "setup", f"VENV={venv}", "TORCH_INDEX=https://download.pytorch.org/whl/cpu"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
    assert "-qq --disable-pip-version-check torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in out
    assert "[make setup]" in out and "-e '.[all,test,docs]'" in out


def test_quickstart_installs_the_project_alone_into_the_same_venv(tmp_path: Path) -> None:
    """`make quickstart` on a fresh checkout: the project without torch or extras, pip's warnings off, then the
    episode and what to run next; `make setup` afterwards installs the full stack into that same venv."""
    venv = tmp_path / "venv"
    args = ["make", "-n", "-C", str(ROOT), "quickstart", f"VENV={venv}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
    install = [ln for ln in out.splitlines() if "pip install" in ln and "echo" not in ln.split("pip install")[0]]
    assert any("pip install -qq --disable-pip-version-check -e . " in ln + " " for ln in out.splitlines()), out
    assert "torch" not in " ".join(install) and "[all" not in out, install
    assert f"{venv}/bin/openenv-echo quickstart echo" in out and "[make quickstart] next:" in out
    setup = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "setup", f"VENV={venv}"], capture_output=True, text=True, timeout=60
    ).stdout
    assert f"-m venv {venv}" in setup and f"{venv}/bin/pip install -qq" in setup and "-e '.[all,test,docs]'" in setup


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_start_dockerd_records_the_pid_of_the_daemon_it_started(tmp_path: Path) -> None:
    fake, up, pidfile = tmp_path / "bin", tmp_path / "engine-up", tmp_path / "dockerd.pid"
    fake.mkdir()
    _stub(fake, "docker", f'[ -f "{up}" ] || exit 1; echo 28.0')  # answers once the fake daemon is up
    _stub(fake, "docker-compose", "exit 0")
    _stub(fake, "dockerd", f'echo $$ > "{tmp_path}/real.pid"; touch "{up}"; exec sleep 30')
    _stub(fake, "pgrep", "exit 1")
    _stub(fake, "id", "echo 0")
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "DOCKERD_LOG": str(tmp_path / "d.log"),
        "DOCKERD_WAIT_S": "20",
        "DOCKERD_PIDFILE": str(pidfile),
    }
    script = ROOT / "scripts" / "docker" / "start-dockerd.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    try:
        assert proc.returncode == 0, proc.stderr
        pid = int(pidfile.read_text())
        assert pid == int((tmp_path / "real.pid").read_text())
    finally:
        real = tmp_path / "real.pid"
        if real.exists():
            try:
                os.kill(int(real.read_text()), 15)
            except ProcessLookupError:
                pass
    # an engine already running: nothing started, nothing recorded
    pidfile.write_text("")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and pidfile.read_text() == "" and "already running" in proc.stderr


def test_quickstart_for_real_is_light_quiet_and_runs_the_episode(tmp_path: Path) -> None:
    """`make quickstart` into a fresh venv: no torch and no extras installed, under 150 MB, nothing printed but the
    project's own lines (pip's warnings off) and the episode, then what to run next."""
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "quickstart", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr and "Location" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f"[make quickstart] 1/2 creating {venv} with python3", lines[:3]
    assert lines[1].startswith("[make quickstart] 2/2 pip install -e .")
    assert "⟦warning⟧[echo] ⟦env_output⟧hello" in proc.stdout and "[make quickstart] next:" in proc.stdout
    [site] = (venv / "lib").glob("python3*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert "fastapi" in installed and not installed & {"torch", "transformers", "mkdocs", "ray", "trl"}, installed
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    assert size < 150 * 2**20, f"{size / 2**20:.0f} MB"
