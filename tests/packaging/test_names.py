"""Names that shadow nothing: no module or package of the library or of an env package is named like a standard
library module, so running Python from inside one of their folders (which puts it first on ``sys.path``) still
imports the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "openenv_echo", *sorted((ROOT / "envs").glob("*_env"))]


def _names_below(package: Path) -> set[str]:
    """Every module and package name below ``package`` (each one first on ``sys.path`` when its folder is the cwd)."""
    names = {path.stem for path in package.rglob("*.py") if path.stem != "__init__"}
    return names | {path.parent.name for path in package.rglob("__init__.py")}


@pytest.mark.parametrize("package", PACKAGES, ids=[p.name for p in PACKAGES])
def test_no_module_is_named_like_a_standard_library_module(package: Path) -> None:
    assert package.is_dir()
    assert _names_below(package)  # the walk found the package's modules
    assert sorted(_names_below(package) & sys.stdlib_module_names) == []


def test_the_check_sees_a_shadowing_module(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "tokenize").mkdir(parents=True)
    (tmp_path / "pkg" / "tokenize" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "inspect.py").write_text("")
    assert sorted(_names_below(tmp_path / "pkg") & sys.stdlib_module_names) == ["inspect", "tokenize"]


def test_the_standard_library_imports_from_inside_the_package_folder() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import inspect, tokenize; print(tokenize.__file__)"],
        cwd=ROOT / "openenv_echo",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "openenv_echo" not in done.stdout
