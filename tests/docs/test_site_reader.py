"""The built site read as a person reads it, in Debian's headless Chromium: opened from disk (``file://``, what
the README says to do) and over HTTP on loopback, every nav link followed, a search run and its first result
opened. It fails on a page that does not render (a folder listing where a page should be), a link to a folder, a
raw Sphinx role or mkdocstrings directive in the text, a code block wider than its box in a 1280 px window, or any
request to a place outside the site: every URL the browser asks for (Chromium's network log) must be a file of
the site or loopback. Screenshots of the home page in
both modes go to ``out/screenshots/`` (not committed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SCREENSHOTS = ROOT / "out" / "screenshots"
# a Sphinx role as it shows once rendered (":meth:total", the name's backticks turned into code), an unrendered block
RAW = re.compile(r"(?<![\w/:]):(meth|func|class|mod|attr|data|exc|obj):(?=[`\w~.])|^::: \w", re.M)
LISTING = re.compile(r"^(Index of |Directory listing for )", re.M)  # Chromium's file:// and Python's listings
LOCAL_SCHEMES = {"file", "data", "blob", "about", "chrome", "chrome-extension", "devtools"}
WAIT_S = 60  # a loaded 2-core machine
HITS = ".md-search-result__item a[href]"  # the search's result links


def _external(url: str) -> bool:
    """Whether the browser asked for something outside the site (not a file, not loopback)."""
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return False
    return parts.hostname not in ("127.0.0.1", "localhost", "::1")


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        message = "needs chromium + chromedriver (apt-get install -y chromium chromium-driver; .ci/run does)"
        if os.environ.get("OPENENV_ECHO_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

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
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # the network log
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(WAIT_S)
    try:
        yield browser
    finally:
        browser.quit()


def _requested(driver: Any) -> list[str]:
    """Every URL the browser asked for since the last call: the network log plus the page's resource entries."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    urls += driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return urls


def _read_page(driver: Any, url: str, site: Path, mode: str) -> str:
    """Open ``url`` and check it is a rendered page of the site; returns its title (the article's h1)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    body = driver.find_element(By.TAG_NAME, "body").text
    assert not LISTING.search(driver.title + "\n" + body), f"{url} is a folder listing, not a page"
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, "article h1"))
    article = driver.find_element(By.CSS_SELECTOR, "article").text
    raw = RAW.search(article)
    assert raw is None, f"{url} shows raw markup: {article[max(raw.start() - 80, 0) : raw.end() + 80]!r}"
    # every link of the page into the site names a page or file, never a folder (which a site opened from disk
    # shows as a listing), and from disk that file exists
    hrefs = driver.execute_script("return [...document.querySelectorAll('a[href]')].map(a => a.href)")
    base = urlsplit(url)
    for href in hrefs:
        parts = urlsplit(href)
        if (parts.scheme, parts.netloc) != (base.scheme, base.netloc):
            continue
        assert not parts.path.endswith("/"), f"{url} links to a folder: {href}"
        if mode == "file":
            assert Path(unquote(parts.path)).is_file(), f"{url} links to a missing file: {href}"
    # every code block of a written page fits its box in this 1280 px window: nothing to scroll sideways (the API
    # pages show constants' values as the source writes them, at the package's 120 columns)
    path = urlsplit(url).path
    if "/reference/" not in path:
        wide = driver.execute_script(
            "return [...document.querySelectorAll('article pre > code')]"
            ".filter(c => c.scrollWidth > c.clientWidth + 1)"
            ".map(c => c.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a))"
        )
        assert not wide, f"{url}: code wider than its box: {wide[:3]}"
    return str(driver.find_element(By.CSS_SELECTOR, "article h1").text)


@pytest.mark.parametrize("mode", ["file", "http"])
def test_a_reader_follows_every_nav_link_and_searches(
    driver: Any, site: Path, served: str, mode: str, request: pytest.FixtureRequest
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    home = (site / "index.html").as_uri() if mode == "file" else f"{served}/index.html"
    driver.get_log("performance")  # start the network log here
    assert "openenv-echo" in _read_page(driver, home, site, mode)
    nav = driver.execute_script(
        "return [...document.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]')].map(a => a.href)"
    )
    pages = list(dict.fromkeys(h.split("#", 1)[0] for h in nav))
    links = driver.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary .md-nav__link")
    titles = {(a.get_attribute("textContent") or "").strip() for a in links}
    assert {"Getting started", "Guides", "Trainers", "Reference", "RFCs"} <= titles, sorted(titles)
    assert len(pages) >= 30, pages
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"home-{mode}.png"))
    for page in pages:
        _read_page(driver, page, site, mode)
    requested = _requested(driver)
    outside = [u for u in requested if _external(u)]
    assert not outside, f"the site loaded from outside itself: {sorted(set(outside))[:10]}"

    # search from the home page and from a page one folder down (the worker and index are found relative to the
    # page): the index loads in the browser (from disk: through the vendored worker shim), the first hit opens
    nested = home.rsplit("/", 1)[0] + "/guides/objective.html"
    for start, query in ((home, "world_model_coeff"), (nested, "segment rule")):
        driver.get(start)
        wait = WebDriverWait(driver, WAIT_S)
        box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
        wait.until(lambda d, box=box: box.is_displayed(), message=f"{start}: no search box, no search")
        box.click()
        box.send_keys(query)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, HITS), message=f"{start}: no hit for {query!r}")
        first = str(driver.find_element(By.CSS_SELECTOR, HITS).get_attribute("href"))
        _read_page(driver, first.split("#", 1)[0], site, mode)
        text = driver.find_element(By.CSS_SELECTOR, "article").text.lower()
        assert all(word in text for word in query.lower().split()), (start, query, first)

    outside = [u for u in requested + _requested(driver) if _external(u)]
    assert not outside, f"the site loaded from outside itself: {sorted(set(outside))[:10]}"


def test_the_network_check_sees_an_outside_request(driver: Any, site: Path) -> None:
    """The detector above is not blind: a page that asks for a remote image is caught."""
    driver.get((site / "index.html").as_uri())
    driver.get_log("performance")
    driver.execute_script("const i = new Image(); i.src = 'https://cdn.invalid/x.png'; document.body.append(i)")
    seen: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while "https://cdn.invalid/x.png" not in seen and time.monotonic() < deadline:
        seen += [u for u in _requested(driver) if _external(u)]
        time.sleep(0.2)
    assert "https://cdn.invalid/x.png" in seen, seen
