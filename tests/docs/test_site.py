"""The documentation site: built strictly, its API reference complete, and looked at in a real headless browser.

The build is ``mkdocs build --strict`` (what ``make docs`` runs): a broken link, a page missing from the nav or a
reference that does not resolve fails it. The browser test serves the built site on loopback and opens the home
page, one guide and one API page in Debian's Chromium, checking each renders with navigation and a working search,
and saves a screenshot of each under ``out/screenshots/`` (not committed).
"""

from __future__ import annotations

import functools
import http.server
import importlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
PACKAGE = ROOT / "openenv_echo"
# openenv_echo and every subpackage (found on disk, so a new one is covered), plus the trajectory module it re-exports
PACKAGES = sorted(
    ".".join(("openenv_echo", *init.parent.relative_to(PACKAGE).parts)) for init in PACKAGE.rglob("__init__.py")
) + ["openenv_echo.trajectory"]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SCREENSHOTS = ROOT / "out" / "screenshots"
QUIET = {"NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}  # Material's end-of-life banner is not a build warning
OWN_VENV = {"verifiers"}  # libraries not installable beside the main environment (make setup-verifiers)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **QUIET},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    warnings = [line for line in proc.stderr.splitlines() if re.match(r"^(WARNING|ERROR)\s+-", line)]
    assert not warnings, warnings
    return out


def test_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in (
        "index.html",
        "getting-started/index.html",
        "guides/token-masks/index.html",
        "rfcs/0001-role-spec/index.html",
        "reference/client/index.html",
        "changelog/index.html",
    ):
        assert (site / page).is_file(), page
    home = (site / "index.html").read_text()
    assert "make quickstart" in home and "world_model_coeff" in home  # the README, included
    rfc = (site / "rfcs" / "0001-role-spec" / "index.html").read_text()
    assert "env_output" in rfc and "include:" not in rfc  # the RFC's text, not the include line
    assert (site / "search" / "search_index.json").is_file()
    # offline: no page loads a script, stylesheet or font from elsewhere (theme.font: false; links may point out)
    for built in site.rglob("*.html"):
        html = built.read_text()
        assert not re.search(r'<(script|img)[^>]+src="(https?:)?//', html), built
        assert not re.search(r'<link[^>]+href="(https?:)?//', html), built


def test_links_to_repository_files_are_published(site: Path) -> None:
    """A guide's link to a file outside docs/ resolves on the site (the file is published under _repo/)."""
    trainers = (site / "guides" / "trainers" / "index.html").read_text()
    targets = re.findall(r'href="([^"#]*_repo/[^"#]+)"', trainers)
    assert targets, "the trainers guide links to its recipes"
    base = site / "guides" / "trainers"
    for target in targets:
        assert (base / target).resolve().exists(), target


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The hook refuses a link to a file that does not exist (run on a copy of the docs with one bad link)."""
    import shutil

    copy = tmp_path / "repo"
    for name in ("docs", "rfcs", "examples", "openenv_echo"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("results*", "__pycache__"))
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    page = copy / "docs" / "guides" / "objective.md"
    page.write_text(page.read_text() + "\nSee [the missing recipe](../../examples/trainers/nope.py).\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **QUIET},
    )
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
    assert {"openenv_echo.client", "openenv_echo.envs.terminal"} <= set(PACKAGES)
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


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(
    ("page", "heading"),
    [
        ("", "openenv-echo"),
        ("guides/token-masks/", "Token masks"),
        ("reference/client/", "Client"),
    ],
    ids=["home", "guide", "api"],
)
def test_page_renders_with_navigation_and_search_in_chromium(served: str, page: str, heading: str) -> None:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        message = "needs chromium + chromedriver (apt-get install -y chromium chromium-driver; .ci/run does)"
        if os.environ.get("OPENENV_ECHO_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(f"{served}/{page}")
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "article h1"))
        assert heading in driver.find_element(By.CSS_SELECTOR, "article h1").text
        links = driver.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link")
        titles = {(link.get_attribute("textContent") or "").strip() for link in links}
        assert {"Getting started", "Token masks", "Client"} <= titles, sorted(titles)[:40]
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / f"{page.strip('/').replace('/', '-') or 'home'}.png"))
        # search: the index loads in the browser and finds the objective's coefficient
        box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
        box.click()
        box.send_keys("world_model_coeff")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))
        assert len(driver.find_elements(By.CSS_SELECTOR, ".md-search-result__item")) >= 1
    finally:
        driver.quit()
