"""The reference envs' logic lives in their OpenEnv packages above the library: the library never imports an env
package at module level (the registry names them as strings), providers are handed an ``EnvSpec`` and never import
the registry, and a missing env package is named with its install command."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from openenv_echo.envs import ENVIRONMENTS, EnvSpec, spec_of

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "openenv_echo"
ENV_PACKAGES = {p.name for p in (ROOT / "envs").glob("*_env")}


def _imports(tree: ast.AST, *, module_level: bool) -> list[tuple[int, str, int]]:
    """``(line, module, relative level)`` of the imports in ``tree`` (only its top-level statements if asked)."""
    nodes = ast.iter_child_nodes(tree) if module_level else ast.walk(tree)
    out: list[tuple[int, str, int]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.lineno, node.module or "", node.level))
    return out


def test_the_library_imports_no_env_package_at_module_level() -> None:
    assert {"terminal_env", "sql_env", "shell_env"} <= ENV_PACKAGES
    found = []
    for path in sorted(LIBRARY.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, module, level in _imports(tree, module_level=True):
            if level == 0 and module.partition(".")[0] in ENV_PACKAGES:
                found.append(f"{path.relative_to(ROOT)}:{line} {module}")
    assert not found, found


def test_importing_the_library_loads_no_env_package() -> None:
    code = (
        "import sys\n"
        "import openenv_echo, openenv_echo.cli, openenv_echo.envs, openenv_echo.envs.compose, openenv_echo.providers\n"
        "import openenv_echo.providers.ray, openenv_echo.providers.validation, openenv_echo.demo.envs\n"
        f"print(sorted(m for m in sys.modules if m.partition('.')[0] in {sorted(ENV_PACKAGES)!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _is_registry(module: str, level: int) -> bool:
    """An import of ``openenv_echo.envs`` (absolute, or ``..envs`` from a subpackage of the library)."""
    name = module if level == 0 else f"openenv_echo.{module}" if level == 2 else ""
    return name == "openenv_echo.envs" or name.startswith("openenv_echo.envs.")


def test_providers_never_import_the_registry() -> None:
    found = []
    for path in sorted((LIBRARY / "providers").rglob("*.py")):
        for line, module, level in _imports(ast.parse(path.read_text(encoding="utf-8")), module_level=False):
            if _is_registry(module, level):
                found.append(f"{path.relative_to(ROOT)}:{line} {module}")
    assert not found, found


def test_every_registered_env_outside_the_library_is_an_env_package_server() -> None:
    for spec in ENVIRONMENTS.values():
        module = spec.module
        assert module.startswith("openenv_echo.") or module == f"{spec.package}.server", spec
        assert (ROOT / "envs" / spec.package / "openenv.yaml").is_file(), spec
    assert spec_of("terminal").target == "terminal_env.server:TerminalEnvironment"
    with pytest.raises(KeyError, match="unknown environment 'nope'"):
        spec_of("nope")


def test_a_missing_env_package_is_named_with_its_install_command() -> None:
    spec = EnvSpec("absent", "absent_env.server:AbsentEnvironment", "0")
    with pytest.raises(
        ModuleNotFoundError, match=r"envs/absent_env, which is not installed: pip install -e envs/absent_env"
    ):
        spec.load()
