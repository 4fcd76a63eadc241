"""The OpenEnv packages under envs/: manifests pass `openenv validate`, the app modules serve, the runtime plans
replay cleanly through OpenEnv's own runtime graders (against a loopback server instead of a Docker build)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import tomllib

from openenv_echo.envs import ENVIRONMENTS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {name: spec.package for name, spec in ENVIRONMENTS.items()}


def _load_app(pkg: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"_{pkg}_app", ROOT / "envs" / pkg / "server" / "app.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("pkg", PACKAGES.values())
def test_static_validation_passes(pkg):
    """What `openenv validate <dir> --level static` runs (the CLI calls this function), in-process: the CLI itself
    spends ~12 s importing gradio, too slow to spawn per package in the test tier."""
    from openenv.validation import runner as validation
    from openenv.validation.types import Level

    report = validation.run_validation(ROOT / "envs" / pkg, max_level=Level.STATIC)
    assert [(r.check_id, r.status.value) for r in report.results] == [("static.manifest", "pass")]
    assert report.verdict.value == "pass"


@pytest.mark.parametrize("name,pkg", PACKAGES.items())
def test_package_layout(name, pkg):
    root = ROOT / "envs" / pkg
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == f"openenv-{pkg.replace('_', '-')}"
    assert any(d.split("[")[0] == "openenv-echo" for d in project["dependencies"])
    assert project["scripts"]["server"] == f"{pkg}.server.app:main"
    mod = _load_app(pkg)
    assert callable(mod.main) and mod.app.title
    assert 'if __name__ == "__main__":\n    main()' in (root / "server" / "app.py").read_text()
    plan = json.loads((root / "validation" / "runtime.json").read_text())
    assert plan["plan_schema_version"] == "1" and 1 <= len(plan["actions"]) <= 100
    assert (root / "README.md").read_text().startswith("---\n")


def test_package_clients_and_models(running_server):
    sys.path.insert(0, str(ROOT / "envs"))
    try:
        import sql_env
        import terminal_env
    finally:
        sys.path.remove(str(ROOT / "envs"))
    from sql_env.server import SqlAction
    from terminal_env.server import TerminalObservation

    assert sql_env.SqlAction is SqlAction and terminal_env.TerminalObservation is TerminalObservation
    url = running_server(_load_app("terminal_env").app)
    with terminal_env.TerminalEnv(url) as env:
        env.reset(seed=2)
        r = env.run_command("hostname")
        assert r.segments[1].text.strip() and env.metadata()["name"] == "terminal"


@pytest.mark.parametrize("pkg", [p for n, p in PACKAGES.items() if not ENVIRONMENTS[n].needs_docker])
def test_runtime_graders_pass_on_a_loopback_server(pkg, running_server):
    """(The shell env's runtime validation needs a Docker engine: tests/containers/test_shell_env.py.)"""
    from openenv.validation import runner as validation
    from openenv.validation.providers import ExecResult, ProviderCapability
    from openenv.validation.types import Level

    url = running_server(_load_app(pkg).app)

    class Subject:
        base_url = url

        def inspect(self) -> dict:
            return {}

        def logs(self, max_bytes: int = 65536) -> str:
            return ""

        def exec(self, argv: list[str], timeout_s: float) -> ExecResult:
            return ExecResult(0, "", "", 0.0)

        def stop(self) -> None:
            pass

    class Loopback:
        """A provider whose "image" is the server this test already started."""

        name = "loopback"
        capabilities = frozenset({ProviderCapability.IMAGE_BUILD})
        supported_network_modes = frozenset({"public", "no-network"})

        def build(self, root: Path, execution: object) -> str:
            return "sha256:" + "0" * 64

        def start(self, spec: object) -> Subject:
            return Subject()

    report = validation.run_validation(ROOT / "envs" / pkg, max_level=Level.RUNTIME, provider=Loopback())
    status = {r.check_id: r.status.value for r in report.results}
    for check in (
        "static.manifest",
        "runtime.startup",
        "runtime.observation_schema",
        "runtime.reward_well_formed",
        "runtime.state_contract",
    ):
        assert status[check] == "pass", (check, [(r.check_id, r.evidence) for r in report.results])
    assert "fail" not in status.values() and "error" not in status.values()
