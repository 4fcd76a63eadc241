"""The documentation site: built strictly, its API reference complete (``test_site_reader`` reads it in Chromium).

The build is ``mkdocs build --strict`` (what ``make docs`` runs): a broken link, a page missing from the nav or a
reference that does not resolve fails it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from .conftest import build_site

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
PACKAGE = ROOT / "openenv_echo"
# openenv_echo and every subpackage (found on disk, so a new one is covered), plus the trajectory module it re-exports
PACKAGES = sorted(
    ".".join(("openenv_echo", *init.parent.relative_to(PACKAGE).parts)) for init in PACKAGE.rglob("__init__.py")
) + ["openenv_echo.trajectory"]
# and the env packages' server side (envs/<name>_env/server: the terminal, sql and shell envs' logic)
PACKAGES += sorted(f"{init.parent.parent.name}.server" for init in (ROOT / "envs").glob("*_env/server/__init__.py"))
OWN_VENV = {"verifiers"}  # libraries not installable beside the main environment (make setup-verifiers)


def test_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in (
        "index.html",
        "getting-started.html",
        "guides/token-masks.html",
        "rfcs/0001-role-spec.html",
        "reference/client.html",
        "changelog.html",
    ):
        assert (site / page).is_file(), page
    home = (site / "index.html").read_text()
    assert "make quickstart" in home and "world_model_coeff" in home  # the README, included
    rfc = (site / "rfcs" / "0001-role-spec.html").read_text()
    assert "env_output" in rfc and "include:" not in rfc  # the RFC's text, not the include line
    assert (site / "search" / "search_index.json").is_file()
    assert (site / "search" / "search_index.js").is_file()  # the offline plugin's copy, for file:// search
    objective = (site / "guides" / "objective.html").read_text()
    assert objective.count("<math") >= 3 and "$$" not in objective and "arithmatex" not in objective  # MathML
    rfc = (site / "rfcs" / "0004-echo-objective.html").read_text()  # the RFC's formulas are math, not code
    assert rfc.count('<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">') >= 4 and "$$" not in rfc
    # offline: no page loads a script, stylesheet or font from elsewhere (theme.font: false; links may point out)
    for built in site.rglob("*.html"):
        html = built.read_text()
        assert not re.search(r'<(script|img)[^>]+src="(https?:)?//', html), built
        assert not re.search(r'<link[^>]+href="(https?:)?//', html), built


def test_links_to_repository_files_are_published(site: Path) -> None:
    """A guide's link to a file outside docs/ resolves on the site (the file is published under _repo/)."""
    trainers = (site / "trainers" / "index.html").read_text()
    targets = re.findall(r'href="([^"#]*_repo/[^"#]+)"', trainers)
    assert targets, "the trainers overview links to its recipes"
    base = site / "trainers"
    for target in targets:
        assert (base / target).resolve().exists(), target


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The hook refuses a link to a file that does not exist (run on a copy of the docs with one bad link)."""
    import shutil

    copy = tmp_path / "repo"
    for name in ("docs", "rfcs", "examples", "openenv_echo", "envs"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("results*", "__pycache__", "tasks"))
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    page = copy / "docs" / "guides" / "objective.md"
    page.write_text(page.read_text() + "\nSee [the missing recipe](../../examples/trainers/nope.py).\n")
    proc = build_site(tmp_path / "site", cwd=copy)
    assert proc.returncode != 0
    assert "broken link" in proc.stderr and "nope.py" in proc.stderr, proc.stderr[-2000:]


def _documented() -> tuple[set[int], set[str]]:
    """Objects (by id) and identifiers that the reference pages render with ``::: identifier``."""
    objects: set[int] = set()
    identifiers: set[str] = set()
    for page in sorted(REFERENCE.glob("*.md")):
        for ident in re.findall(r"^::: (\S+)\s*$", page.read_text(), re.M):
            identifiers.add(ident)
            module, _, attr = ident.rpartition(".")
            try:
                objects.add(id(getattr(importlib.import_module(module), attr)))
            except ModuleNotFoundError as e:
                if e.name not in OWN_VENV:
                    raise
                # a library that lives in an environment of its own: the strict build resolved it from the source
    return objects, identifiers


def test_api_reference_covers_every_public_name() -> None:
    objects, identifiers = _documented()
    assert {"openenv_echo.client", "terminal_env.server"} <= set(PACKAGES)
    missing = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if id(value) in objects or f"{package}.{name}" in identifiers:
                continue
            if not callable(value) and any(i.endswith(f".{name}") for i in identifiers):
                continue  # a constant documented where it is defined
            missing.append(f"{package}.{name}")
    assert not missing, f"public names without an API reference entry (add ::: lines under docs/reference/): {missing}"


def test_every_reference_identifier_resolves() -> None:
    objects, identifiers = _documented()
    assert len(identifiers) >= 100 and len(objects) >= 100


def test_docstrings_use_markdown_not_sphinx_roles() -> None:
    """The API pages render docstrings as Markdown (``docstring_style: google``): a Sphinx role such as
    ``:func:`x``` would show up raw, so the package has none (``x`` in backticks instead)."""
    role = re.compile(r":(meth|func|class|mod|attr|data|exc|obj):`")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if role.search(line)
    ]
    assert not found, found


def test_the_objective_page_leads_with_the_seam(site: Path) -> None:
    """``echo_loss`` is the first entry of the objective's API page (not 10th of 15, alphabetically)."""
    page = (REFERENCE / "objective.md").read_text()
    assert re.findall(r"^::: (\S+)", page, re.M)[0] == "openenv_echo.objective.echo_loss"
    html = (site / "reference" / "objective.html").read_text()
    entries = re.findall(r'<h[23] id="(openenv_echo\.objective\.\w+)"', html)
    assert entries[0] == "openenv_echo.objective.echo_loss", entries[:3]
