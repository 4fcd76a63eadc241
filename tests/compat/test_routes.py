"""OpenEnv's semantics on the routes it defines: stateless HTTP ``/step``, reset options passed to the env,
``MAX_CONCURRENT_ENVS``, and the task routes (``/list_environments``, ``/{env}/splits`` ...)."""

from __future__ import annotations

import json

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient
from websockets.sync.client import connect

from openenv_echo.envs import ENVIRONMENTS, load_env
from openenv_echo.server import BackgroundServer, create_app


def test_http_step_answers_like_openenv(env_urls: dict[str, str]) -> None:
    """OpenEnv's HTTP ``/step`` runs on a fresh env and answers 200; so does ours (on a fresh episode)."""
    url = env_urls["echo"]
    native = httpx.post(url + "/step", json={"action": {"message": "Hello"}}, trust_env=False)
    tool = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "Hello"}}
    called = httpx.post(url + "/step", json={"action": tool}, trust_env=False)
    listed = httpx.post(url + "/step", json={"action": {"type": "list_tools"}}, trust_env=False)
    assert [r.status_code for r in (native, called, listed)] == [200, 200, 200]
    assert native.json()["observation"]["echoed_message"] == "Hello" and native.json()["metadata"] is None
    assert called.json()["observation"]["result"] == "Hello" and called.json()["reward"] == 0.05
    assert [t["name"] for t in listed.json()["observation"]["tools"]] == ["echo_message", "echo_with_length"]
    bad = httpx.post(url + "/step", json={"action": {**tool, "tool_name": "nope"}}, trust_env=False)
    assert bad.status_code == 422 and bad.json()["code"] == "VALIDATION_ERROR" and "tool_name" in bad.text
    state = httpx.get(url + "/state", trust_env=False)
    assert state.status_code == 200 and state.json()["step_count"] == 0


@pytest.mark.parametrize(
    ("env", "options"),
    [("echo", {"max_steps": 2}), ("terminal", {"incident": "disk_full", "max_steps": 3}), ("sql", {"max_steps": 2})],
)
def test_reset_options_reach_the_env(env_urls: dict[str, str], env: str, options: dict) -> None:
    with GenericEnvClient(base_url=env_urls[env]).sync() as client:
        client.reset(seed=1, **options)
        assert client.state()["max_steps" if env != "echo" else "step_count"] == (
            options["max_steps"] if env != "echo" else 0
        )


@pytest.mark.parametrize("env", sorted(n for n, s in ENVIRONMENTS.items() if not s.needs_docker))
def test_unknown_reset_option_is_a_clear_error(env_urls: dict[str, str], env: str) -> None:
    with GenericEnvClient(base_url=env_urls[env]).sync() as client:
        with pytest.raises(RuntimeError, match=r"difficulty.*accepted options.*max_steps"):
            client.reset(seed=1, difficulty="hard")
        assert client.reset(seed=1).done is False  # the session keeps serving
    http = httpx.post(env_urls[env] + "/reset", json={"seed": 1, "difficulty": "hard"}, trust_env=False)
    assert http.status_code == 422 and "difficulty" in http.text


def test_max_concurrent_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenEnv's ``MAX_CONCURRENT_ENVS`` sets the session limit when ``OPENENV_ECHO_MAX_SESSIONS`` is unset."""
    monkeypatch.delenv("OPENENV_ECHO_MAX_SESSIONS", raising=False)
    monkeypatch.setenv("MAX_CONCURRENT_ENVS", "2")
    with BackgroundServer(create_app(load_env("echo"))) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        with connect(ws_url, proxy=None), connect(ws_url, proxy=None):
            with connect(ws_url, proxy=None) as third:
                error = json.loads(third.recv())["data"]
        assert (error["code"], error["max_sessions"]) == ("CAPACITY_REACHED", 2)
    monkeypatch.setenv("OPENENV_ECHO_MAX_SESSIONS", "3")
    assert create_app(load_env("echo")).state.limits.max_sessions == 3


def test_task_routes(env_urls: dict[str, str]) -> None:
    url = env_urls["terminal"]
    assert httpx.get(url + "/list_environments", trust_env=False).json() == ["terminal"]
    splits = httpx.get(url + "/Terminal/splits", trust_env=False).json()
    assert splits == [
        {"name": "train", "type": "train"},
        {"name": "validation", "type": "validation"},
        {"name": "test", "type": "test"},
    ]
    post = lambda path, body: httpx.post(url + path, json=body, trust_env=False)  # noqa: E731
    assert post("/terminal/num_tasks", {"split": "validation"}).json() == {"num_tasks": 1000}
    assert post("/terminal/task", {"split": "test", "index": 3}).json() == {"task": {"seed": 2_000_003}}
    assert post("/terminal/task_range", {"split": "test", "start": 1, "stop": 3}).json() == {
        "tasks": [{"seed": 2_000_001}, {"seed": 2_000_002}]
    }
    tasks = post("/terminal/tasks", {"split": "validation"}).json()
    assert tasks["env_name"] == "terminal" and tasks["tasks"][0] == {"seed": 1_000_000} and len(tasks["tasks"]) == 1000
    assert post("/terminal/tasks", {"split": "train"}).status_code == 400  # a million tasks: use task_range
    assert post("/terminal/task", {"split": "test", "index": 1000}).status_code == 400
    assert post("/terminal/task", {"split": "nope", "index": 0}).status_code == 404
    assert post("/sql/num_tasks", {"split": "test"}).status_code == 404  # another env's name
    assert post("/terminal/task", {"split": "test"}).status_code == 422
    # a task is reset options: it starts the episode it names
    with GenericEnvClient(base_url=url).sync() as client:
        client.reset(**post("/terminal/task", {"split": "test", "index": 0}).json()["task"])
        assert client.state()["seed"] == 2_000_000
    echo = env_urls["echo"]
    assert httpx.get(echo + "/echo/splits", trust_env=False).status_code == 404  # no task API: no task routes
