"""The client against real servers: sync and async twins, many sessions, recording, faults."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from openenv_echo import (
    AsyncEnvClient,
    EnvClient,
    PlainTextRule,
    PolicyStep,
    Role,
    Segment,
    TrajectoryWriter,
    read_trajectories,
    run_episode,
    run_episodes,
)
from openenv_echo.client import (
    ConnectionLostError,
    EnvTimeoutError,
    EpisodeDoneError,
    EpisodeNotStartedError,
    TokenizerUnavailableError,
)
from openenv_echo.server import free_port


def test_sync_episode_records_roles(running_server, tmp_path: Path) -> None:
    url = running_server("echo")
    out = tmp_path / "eps.jsonl"
    with EnvClient(url, writer=out, env_name="echo") as env:
        traj = run_episode(
            env,
            lambda r, t: (
                PolicyStep({"message": "hi"}, text="hi", token_ids=[5, 6]) if not t.steps else {"message": "bye"}
            ),
            seed=4,
            messages=[{"role": "system", "content": "Be brief."}],
        )
    assert traj.done and len(traj.steps) == 2
    assert traj.messages[0].content == "Be brief."
    assert traj.reset is not None and traj.reset.segments[0].role is Role.CONTEXT
    first = traj.steps[0]
    assert first.action == {"message": "hi"} and first.action_text == "hi" and first.action_token_ids == [5, 6]
    assert first.observation.segments == [
        Segment(role=Role.WARNING, text="[echo] "),
        Segment(role=Role.ENV_OUTPUT, text="hi\n"),
    ]
    assert first.observation.fields == {"echoed_message": "hi", "message_length": 2}
    assert traj.total_reward == pytest.approx(0.05)
    assert read_trajectories(out) == [traj]  # written when it ended


def test_unfinished_episode_is_written_on_close_and_on_next_reset(running_server, tmp_path: Path) -> None:
    url = running_server("echo")
    out = tmp_path / "eps.jsonl"
    with EnvClient(url, writer=out) as env:
        env.reset(episode_id="first")
        env.step({"message": "a"})
        env.reset(episode_id="second")
        env.step({"message": "b"})
    got = read_trajectories(out)
    assert [(t.episode_id, t.done, len(t.steps)) for t in got] == [("first", False, 1), ("second", False, 1)]


def test_async_twin_many_sessions(running_server) -> None:
    url = running_server("echo", max_sessions=16)

    async def one(i: int) -> list[str]:
        async with AsyncEnvClient(url) as env:
            await env.reset(seed=i, episode_id=f"ep-{i}")
            texts = [(await env.step({"message": f"s{i}-{k}"})).text for k in range(3)]
            state = await env.state()
            assert state == {"episode_id": f"ep-{i}", "step_count": 3}
            return texts

    async def main() -> list[list[str]]:
        return await asyncio.gather(*(one(i) for i in range(12)))

    results = asyncio.run(main())
    assert results == [[f"[echo] s{i}-{k}\n" for k in range(3)] for i in range(12)]


def test_run_episodes_concurrently_in_seed_order(running_server, tmp_path: Path) -> None:
    url = running_server("echo", max_sessions=4)

    async def policy(result, traj):
        await asyncio.sleep(0)
        return {"message": "bye"} if len(traj.steps) == 2 else {"message": f"{traj.episode_id[:4]}-{len(traj.steps)}"}

    trajs = run_episodes(url, policy, seeds=list(range(10)), concurrency=4, writer=tmp_path / "x.jsonl", progress=False)
    assert len(trajs) == 10 and all(t.done and len(t.steps) == 3 for t in trajs)
    assert len({t.episode_id for t in trajs}) == 10
    assert len(read_trajectories(tmp_path / "x.jsonl")) == 10


def test_http_helpers(running_server) -> None:
    url = running_server("echo")
    with EnvClient(url) as env:
        assert env.health() == {"status": "healthy"}
        assert env.metadata()["name"] == "echo"
        assert "segments" in env.schema()["observation"]["properties"]


def test_custom_plain_text_rule(running_server) -> None:
    """A rule maps plain observations (here: any server) to segments; our own env's segments win over it."""
    rule = PlainTextRule(fields=("message_length",), role=Role.WARNING)
    assert rule({"message_length": "7"}) == [Segment(role=Role.WARNING, text="7")]
    assert rule({"other": 1, "done": False}) == [Segment(role=Role.WARNING, text='{"other": 1}')]
    url = running_server("echo")
    with EnvClient(url, segment_rule=rule) as env:
        env.reset()
        assert env.step({"message": "x"}).segments[1].role is Role.ENV_OUTPUT


def _spawn_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "openenv_echo.cli", "serve", "echo", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def test_server_killed_mid_episode_gives_typed_error_not_hang(tmp_path: Path) -> None:
    port = free_port()
    proc = _spawn_server(port)
    url = f"http://127.0.0.1:{port}"
    try:
        with EnvClient(url, message_timeout_s=5, connect_timeout_s=2, writer=tmp_path / "e.jsonl") as env:
            env.reset(episode_id="doomed")
            env.step({"message": "one"})
            proc.kill()
            proc.wait()
            # a typed error, at the latest when message_timeout_s runs out (EnvTimeoutError): never a hang
            with pytest.raises((ConnectionLostError, EnvTimeoutError)):
                env.step({"message": "two"})
            with pytest.raises(ConnectionLostError):  # the episode is gone; no silent reconnect
                env.step({"message": "three"})
            with pytest.raises(ConnectionLostError):  # reset tries a new connection: nothing listens
                env.reset()
            proc = _spawn_server(port)  # a restarted server: reset starts a new episode explicitly
            assert env.reset(episode_id="reborn").segments
            assert env.step({"message": "four"}).text == "[echo] four\n"
        got = read_trajectories(tmp_path / "e.jsonl")
        assert [(t.episode_id, [s.action["message"] for s in t.steps]) for t in got] == [
            ("doomed", ["one"]),
            ("reborn", ["four"]),
        ]
    finally:
        proc.kill()


def test_connect_to_nothing_is_a_typed_error() -> None:
    with EnvClient(f"http://127.0.0.1:{free_port()}", connect_timeout_s=2) as env:
        with pytest.raises(ConnectionLostError):
            env.reset()


def _plain_openenv_app() -> Any:
    """OpenEnv's own server (``openenv.core`` ``create_app``) around an env that, like many, answers a step after
    ``done`` and ignores ``return_tokens``."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    from openenv_echo.server import ServerLimits

    class Msg(Action):
        message: str

    class Obs(Observation):
        message: str = ""

    class Lenient(Environment):
        def __init__(self) -> None:
            super().__init__()
            self._state = State(step_count=0)

        def reset(self, seed: Any = None, episode_id: Any = None, **kw: Any) -> Obs:
            self._state = State(episode_id=episode_id, step_count=0)
            return Obs(message="ready")

        def step(self, action: Any, timeout_s: Any = None, **kw: Any) -> Obs:
            self._state.step_count += 1
            return Obs(message=action.message, reward=0.0, done=action.message == "bye")

        @property
        def state(self) -> State:
            return self._state

    app = create_app(Lenient, Msg, Obs, env_name="lenient", max_concurrent_envs=1)
    app.state.limits = ServerLimits()
    return app


def test_client_integrity_against_a_lenient_openenv_server(running_server, tmp_path: Path) -> None:
    """A step after done is refused by the client (the server would take it); memory and disk agree; asking
    for tokens from a server that cannot attach them is an error, not silence."""
    url = running_server(_plain_openenv_app())
    journal = tmp_path / "j.jsonl"
    with EnvClient(url, writer=journal) as env:
        env.reset(episode_id="e1")
        assert env.step({"message": "bye"}).done
        with pytest.raises(EpisodeDoneError, match="has ended"):
            env.step({"message": "again"})
        assert env.state()["step_count"] == 1  # the refused step never reached the server
        in_memory = env.trajectory
        assert in_memory is not None and in_memory.status == "done" and len(in_memory.steps) == 1
        with pytest.raises(TokenizerUnavailableError, match="attached none"):
            env.reset(return_tokens=True)
        with pytest.raises(EpisodeDoneError):  # no episode started by the refused reset
            env.step({"message": "x"})
    assert read_trajectories(journal, open_episodes=True) == [in_memory]


def test_step_after_done_refused_on_our_server_too(running_server) -> None:
    url = running_server("echo")
    with EnvClient(url) as env:
        env.reset()
        env.step({"message": "bye"})
        with pytest.raises(EpisodeDoneError):
            env.step({"message": "more"})
        env.end_episode("abandoned")  # a no-op once ended: the status stays
        assert env.trajectory is not None and env.trajectory.status == "done"
        env.reset()
        env.end_episode("truncated")
        with pytest.raises(EpisodeNotStartedError, match="truncated"):
            env.step({"message": "more"})


def test_from_provider_on_both_faces(tmp_path: Path) -> None:
    """Both faces start a provider's server and stop it on close (the async face stops it off the event loop)."""
    from openenv_echo import LocalProcessProvider

    provider = LocalProcessProvider("echo")
    with EnvClient.from_provider(provider, writer=tmp_path / "a.jsonl") as env:
        assert env.reset().segments and env.step({"message": "bye"}).done
    assert not provider.started

    async def main() -> str:
        provider = LocalProcessProvider("echo")
        async with AsyncEnvClient.from_provider(provider) as env:
            await env.reset()
            text = (await env.step({"message": "hey"})).text
        assert not provider.started
        return text

    assert asyncio.run(main()) == "[echo] hey\n"
    assert [t.status for t in read_trajectories(tmp_path / "a.jsonl")] == ["done"]


def test_a_journal_that_fails_ends_the_episode_in_memory_too(running_server, tmp_path: Path) -> None:
    url = running_server("echo")
    writer = TrajectoryWriter(tmp_path / "j.jsonl")
    with EnvClient(url, writer=writer) as env:
        env.reset()
        env.step({"message": "one"})
        writer.close()  # e.g. the disk went away
        with pytest.raises(ValueError, match="closed"):
            env.step({"message": "two"})
        assert env.trajectory is not None
        assert env.trajectory.status == "abandoned" and len(env.trajectory.steps) == 1
        with pytest.raises(EpisodeNotStartedError):
            env.step({"message": "three"})
    got = read_trajectories(tmp_path / "j.jsonl", open_episodes=True)
    assert [len(t.steps) for t in got] == [1]  # on disk: the step memory has, never another


def test_sampler_metadata_is_recorded_with_the_step_never_sent(running_server, tmp_path: Path) -> None:
    url = running_server("echo")
    with EnvClient(url, writer=tmp_path / "j.jsonl") as env:
        env.reset()
        env.step({"message": "hi"}, action_token_ids=[1, 2], action_logprobs=[-0.5, -1.5], sampling_temperature=0.7)
        with pytest.raises(ValueError, match="same length"):  # refused before anything is sent
            env.step({"message": "x"}, action_token_ids=[1], action_logprobs=[-0.1, -0.2])
        assert env.state()["step_count"] == 1
        env.step({"message": "bye"})
        traj = env.trajectory
    assert traj is not None and traj.steps[0].action_logprobs == [-0.5, -1.5]
    assert traj.steps[0].sampling_temperature == 0.7 and traj.steps[0].action == {"message": "hi"}
    assert read_trajectories(tmp_path / "j.jsonl") == [traj]
