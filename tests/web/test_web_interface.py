"""OpenEnv's web interface (``ENABLE_WEB_INTERFACE=true``): its routes over HTTP, and the page played in a real
headless Chromium (Selenium + the distribution's chromedriver): every segment coloured by role, per-role counts."""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

from openenv_echo.envs import load_env
from openenv_echo.server import BackgroundServer, create_app

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def web_url(request: pytest.FixtureRequest) -> str:
    server = BackgroundServer(create_app(load_env("echo"), web=True))
    request.addfinalizer(server.stop)
    return server.start()


def test_enabled_by_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENABLE_WEB_INTERFACE", "true")
    assert "/web/step" in {r.path for r in create_app(load_env("echo")).routes}  # type: ignore[attr-defined]
    monkeypatch.setenv("ENABLE_WEB_INTERFACE", "false")
    assert "/web/step" not in {r.path for r in create_app(load_env("echo")).routes}  # type: ignore[attr-defined]


def test_web_routes(web_url: str) -> None:
    get = lambda path, **kw: httpx.get(web_url + path, trust_env=False, **kw)  # noqa: E731
    post = lambda path, body: httpx.post(web_url + path, json=body, trust_env=False)  # noqa: E731
    assert get("/", follow_redirects=False).status_code == 307 and get("/web").headers["location"] == "/web/"
    assert "role-env_output" in get("/web/").text
    assert get("/web/metadata").json()["name"] == "echo"
    assert (
        post("/web/reset", {"seed": 1, "episode_id": "web"}).json()["observation"]["segments"][0]["role"] == "context"
    )
    step = post("/web/step", {"action": {"message": "hi"}}).json()
    assert step["observation"]["echoed_message"] == "hi"
    assert get("/web/state").json() == {"episode_id": "web", "step_count": 1}
    bad = post("/web/step", {"action": {"nope": 1}})
    assert bad.status_code == 422 and bad.json()["code"] == "VALIDATION_ERROR"
    assert post("/web/reset", {"difficulty": 3}).status_code == 422


def test_play_in_headless_chromium(web_url: str) -> None:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        message = "needs chromium + chromedriver (apt-get install -y chromium chromium-driver; .ci/run does)"
        if os.environ.get("OPENENV_ECHO_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(web_url + "/web")  # redirected to /web/
        wait = WebDriverWait(driver, 20)
        driver.find_element(By.ID, "seed").send_keys("3")
        driver.find_element(By.ID, "reset").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript .role-context"))
        box = driver.find_element(By.ID, "action")
        box.clear()
        box.send_keys('{"message": "hello browser"}')
        driver.find_element(By.ID, "step").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript .role-env_output"))
        segments = [
            (s.get_attribute("data-role"), s.text, s.value_of_css_property("color"))
            for s in driver.find_elements(By.CSS_SELECTOR, "#transcript .seg")
        ]
        roles = [r for r, _, _ in segments]
        assert roles == ["context", "action", "warning", "env_output"]
        assert segments[3][1] == "hello browser"
        colours = {r: c for r, _, c in segments}
        assert len(set(colours.values())) == 4, colours  # one colour per role
        count = lambda kind, role: driver.find_element(By.CSS_SELECTOR, f'td.{kind}[data-role="{role}"]').text  # noqa: E731
        assert count("segments", "env_output") == "1" and count("chars", "env_output") == str(len("hello browser\n"))
        assert count("segments", "warning") == "1" and count("chars", "warning") == str(len("[echo] "))
        assert count("segments", "action") == "1"
        box.clear()
        box.send_keys("not json")
        driver.find_element(By.ID, "step").click()
        wait.until(lambda d: "not JSON" in d.find_element(By.ID, "error").text)
    finally:
        driver.quit()
