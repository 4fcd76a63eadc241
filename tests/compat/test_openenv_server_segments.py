"""The cheapest way to give an OpenEnv env roles: keep OpenEnv's own server (``openenv.core`` ``create_app``) and add
a ``segments`` field to the observation. openenv-echo's client reads it as it is (and falls back to its segment rule
on an observation without it); OpenEnv's own client sees one more field and nothing else changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.generic_client import GenericEnvClient

from openenv_echo import EnvClient, Role
from openenv_echo.server import free_port


class ShoutAction(Action):
    message: str


class ShoutObservation(Observation):
    shouted: str = ""
    segments: list[dict[str, str]] | None = None  # the one addition: who wrote each piece of the text


class ShoutEnv(Environment[ShoutAction, ShoutObservation, State]):
    """A plain OpenEnv env; a message of ``plain`` gets no segments (the client's rule applies)."""

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ShoutObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return ShoutObservation(segments=[{"role": "context", "text": "Shout something.\n"}])

    def step(self, action: ShoutAction, timeout_s: float | None = None, **kwargs: Any) -> ShoutObservation:
        self._state.step_count += 1
        loud = action.message.upper()
        if action.message == "plain":
            return ShoutObservation(shouted=loud, reward=0.0)
        segments = [{"role": "warning", "text": "[shout] "}, {"role": "env_output", "text": loud + "\n"}]
        return ShoutObservation(shouted=loud, segments=segments, reward=1.0, done=action.message == "bye")

    @property
    def state(self) -> State:
        return self._state


@pytest.fixture(scope="module")
def openenv_url() -> Iterator[str]:
    """OpenEnv's server, unchanged, on loopback."""
    app = create_app(ShoutEnv, ShoutAction, ShoutObservation, env_name="shout")
    port = free_port("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "OpenEnv's server did not start"
        time.sleep(0.1)
    yield url
    server.should_exit = True
    thread.join(timeout=30)


def test_the_client_reads_segments_from_an_openenv_server(openenv_url: str) -> None:
    with EnvClient(openenv_url) as env:
        first = env.reset(seed=0)
        assert [(s.role, s.text) for s in first.segments] == [(Role.CONTEXT, "Shout something.\n")]
        r = env.step({"message": "hi"}, action_text="hi")
        assert [(s.role, s.text) for s in r.segments] == [(Role.WARNING, "[shout] "), (Role.ENV_OUTPUT, "HI\n")]
        assert r.reward == 1.0 and r.observation["shouted"] == "HI"  # the env's own field, verbatim
        # no segments (null) in the observation: the client's rule (PlainTextRule) makes them, as for any OpenEnv
        # env; with no text field it knows, the env's own fields as compact JSON
        plain = env.step({"message": "plain"})
        assert [s.role for s in plain.segments] == [Role.ENV_OUTPUT] and '"PLAIN"' in plain.segments[0].text
        assert env.step({"message": "bye"}).done
        traj = env.trajectory
    assert traj is not None and [s.observation.segments[0].role for s in traj.steps] == [
        Role.WARNING,
        Role.ENV_OUTPUT,
        Role.WARNING,
    ]


def test_openenvs_own_client_sees_one_more_field(openenv_url: str) -> None:
    with GenericEnvClient(base_url=openenv_url).sync() as client:
        client.reset()
        obs = client.step({"message": "hey"}).observation
    assert obs["shouted"] == "HEY" and obs["segments"][1] == {"role": "env_output", "text": "HEY\n"}
