"""Packaging: PEP 639 licence metadata without deprecation warnings, dependency floors at least OpenEnv's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = [ROOT, *sorted(p.parent for p in (ROOT / "envs").glob("*/pyproject.toml"))]


def _floor(req: Requirement) -> Version | None:
    floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(floors) if floors else None


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_wheel_has_pep639_licence_and_builds_without_deprecation_warnings(project: Path, tmp_path: Path) -> None:
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert _floor(Requirement(meta["build-system"]["requires"][0])) >= Version("77")  # PEP 639 support
    src = tmp_path / "src"  # build from a copy: nothing (build/, *.egg-info) lands in the checkout
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".venv", ".git", ".cache", "out")
    if project == ROOT:
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(project / name, src / name)
        shutil.copytree(project / "openenv_echo", src / "openenv_echo", ignore=ignore)
    else:
        shutil.copytree(project, src, ignore=ignore)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", str(src), "-w",
         str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Deprecat" not in proc.stdout + proc.stderr, "setuptools warned about deprecated metadata"
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        metadata = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in metadata.splitlines()
        if project == ROOT:
            assert any(n.endswith(".dist-info/licenses/LICENSE") for n in z.namelist())


def test_dependency_floors_are_at_least_openenvs() -> None:
    ours = {
        (r := Requirement(spec)).name.lower(): r
        for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    theirs = [Requirement(spec) for spec in requires("openenv") or [] if "extra ==" not in spec]
    checked = 0
    for req in theirs:
        mine = ours.get(req.name.lower())
        if mine is None or _floor(req) is None:
            continue
        checked += 1
        assert _floor(mine) is not None and _floor(mine) >= _floor(req), f"{mine} is below openenv's {req}"
    assert checked >= 5  # fastapi, uvicorn, websockets, httpx, typer, pydantic, rich
