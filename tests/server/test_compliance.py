"""OpenEnv's own tools are the judge: its validator, its runtime graders and its client."""

from __future__ import annotations

from pathlib import Path

import pytest

from openenv_echo import EnvClient, Role
from tests.openenv_compat import RUNTIME_CHECKS, runtime_results, validate_url, write_package


def test_openenv_validate_url_passes_all_criteria(running_server) -> None:
    url = running_server("echo")
    code, report = validate_url(url)
    assert code == 0, report
    assert report["passed"] is True
    assert report["summary"]["passed_count"] == report["summary"]["total_count"] == 6
    assert report["standard_profile"] == "openenv-http/1.x"
    assert report["mode"] == "simulation"


def test_openenv_validate_url_production_mode(running_server) -> None:
    url = running_server("echo", mode="production")
    code, report = validate_url(url)
    assert code == 0, report
    assert report["mode"] == "production"


def test_openenv_runtime_graders_pass(running_server, tmp_path: Path) -> None:
    url = running_server("echo")
    pkg = write_package(tmp_path / "echo_pkg", "echo", [{"message": "hi"}, {"message": ""}, {"message": "bye"}])
    results = runtime_results(pkg, url)
    assert results["runtime.startup"] == "pass", results
    for check in RUNTIME_CHECKS:
        assert results[check] == "pass", (check, results)


def test_openenv_runtime_grader_catches_out_of_range_reward(running_server, tmp_path: Path) -> None:
    """The grader is live: a declared reward range the env exceeds fails (a long message gives reward 1.0)."""
    url = running_server("echo")
    pkg = write_package(tmp_path / "echo_pkg", "echo", [{"message": "x" * 200}], reward_range=(0.0, 0.5))
    assert runtime_results(pkg, url)["runtime.reward_well_formed"] == "fail"


def test_openenv_generic_client_sees_segments(running_server) -> None:
    from openenv.core.generic_client import GenericEnvClient

    url = running_server("echo")
    with GenericEnvClient(base_url=url).sync() as client:
        first = client.reset(seed=3, episode_id="generic-1")
        assert first.observation["segments"][0]["role"] == "context"
        result = client.step({"message": "hey"})
        assert result.observation["segments"] == [
            {"role": "warning", "text": "[echo] "},
            {"role": "env_output", "text": "hey\n"},
        ]
        assert result.observation["text"] == "[echo] hey\n"
        assert result.reward == pytest.approx(0.03)
        state = client.state()
        assert state["episode_id"] == "generic-1" and state["step_count"] == 1


def test_our_client_against_openenv_create_app(running_server) -> None:
    """A plain OpenEnv env (no segments): the observation text becomes env_output by the documented rule."""
    from openenv.core.env_server.http_server import create_app as openenv_create_app
    from openenv.core.env_server.interfaces import Environment as OEEnvironment
    from openenv.core.env_server.types import Action as OEAction
    from openenv.core.env_server.types import Observation as OEObservation
    from openenv.core.env_server.types import State as OEState

    class PlainAction(OEAction):
        message: str

    class PlainObservation(OEObservation):
        echoed_message: str = ""

    class PlainEnv(OEEnvironment):
        def __init__(self) -> None:
            super().__init__()
            self._state = OEState(episode_id=None, step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs):  # type: ignore[no-untyped-def]
            self._state = OEState(episode_id=episode_id, step_count=0)
            return PlainObservation(echoed_message="ready", reward=0.0)

        def step(self, action, timeout_s=None, **kwargs):  # type: ignore[no-untyped-def]
            self._state.step_count += 1
            return PlainObservation(echoed_message=action.message.upper(), reward=0.5, done=action.message == "bye")

        @property
        def state(self):  # type: ignore[no-untyped-def]
            return self._state

    app = openenv_create_app(PlainEnv, PlainAction, PlainObservation, env_name="plain")
    app.state.limits = None  # BackgroundServer reads app.state.limits; OpenEnv's app has none
    from openenv_echo.server import ServerLimits

    app.state.limits = ServerLimits()
    url = running_server(app)
    with EnvClient(url) as env:
        env.reset(seed=1, episode_id="plain-1")
        r = env.step({"message": "hello"}, action_text="hello")
        assert [(s.role, s.text) for s in r.segments] == [(Role.ENV_OUTPUT, "HELLO")]
        assert r.reward == 0.5
        r = env.step({"message": "bye"}, action_text="bye")
        assert r.done
        assert env.state()["step_count"] == 2
        traj = env.trajectory
        assert traj is not None and [s.action_text for s in traj.steps] == ["hello", "bye"]
        assert traj.reset is not None and traj.reset.segments[0].text == "ready"
