"""One env registry: docker-compose.yml, the OpenEnv packages, the CLI and the containers tier all follow it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from openenv_echo.envs import ENVIRONMENTS, load_env
from openenv_echo.envs.compose import render
from openenv_echo.server import Environment

ROOT = Path(__file__).resolve().parents[2]


def test_docker_compose_is_generated_from_the_registry() -> None:
    committed = (ROOT / "docker-compose.yml").read_text()
    assert committed == render(), (
        "docker-compose.yml is stale: python -m openenv_echo.envs.compose > docker-compose.yml"
    )
    for spec in ENVIRONMENTS.values():
        assert f"dockerfile: envs/{spec.package}/server/Dockerfile" in committed


def test_every_registered_env_has_a_thin_openenv_package() -> None:
    packages = {p.name for p in (ROOT / "envs").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert packages == {spec.package for spec in ENVIRONMENTS.values()}
    for spec in ENVIRONMENTS.values():
        root = ROOT / "envs" / spec.package
        assert f'package_app("{spec.name}")' in (root / "server" / "app.py").read_text()
        assert f'oracle_main("{spec.name}")' in (root / "validation" / "oracle.py").read_text()
        assert f'env = "{spec.name}"' in (root / "client.py").read_text()
        assert f"name: {spec.package}" in (root / "openenv.yaml").read_text()


def test_registry_entries_load_and_have_an_expert() -> None:
    assert {"echo", "terminal", "sql"} <= set(ENVIRONMENTS)
    for name, spec in ENVIRONMENTS.items():
        cls = load_env(name)
        assert issubclass(cls, Environment) and cls.env_name() == name
        actions = spec.expert_actions(3)
        assert actions and all(cls.action_type.model_validate(a) for a in actions)


def test_oracle_plays_the_expert(running_server) -> None:  # type: ignore[no-untyped-def]
    url = running_server("sql")
    oracle = ROOT / "envs" / "sql_env" / "validation" / "oracle.py"
    out = subprocess.run(
        [sys.executable, str(oracle), "--url", url, "--seed", "4"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) == 1.0
