"""Session lifecycle: idle reaping, step timeouts, production mode, server-side tokens."""

from __future__ import annotations

import contextlib
import os
import time

import httpx
import psutil
import pytest

from openenv_echo import EnvClient, Role, tokenizer_fingerprint
from openenv_echo.client import ConnectionLostError, EpisodeNotStartedError, SessionError, StepTimeoutError
from tests.server.faulty_envs import CrashEnvironment


def test_idle_session_is_reaped_and_slot_freed(running_server) -> None:
    url = running_server("echo", max_sessions=1, idle_timeout_s=0.3)
    with EnvClient(url) as env:
        env.reset()
        env.step({"message": "before"})
        time.sleep(1.2)
        with pytest.raises((SessionError, ConnectionLostError)):
            env.step({"message": "after"})
        with pytest.raises(ConnectionLostError):  # no silent reconnect into a fresh episode
            env.step({"message": "again"})
        assert [s.action["message"] for s in env.trajectory.steps] == ["before"]  # nothing recorded is lost
        assert env.reset().segments  # an explicit reset reconnects: the reaped slot was freed


def test_busy_session_is_not_reaped(running_server) -> None:
    url = running_server(CrashEnvironment, idle_timeout_s=0.2, step_timeout_s=10)
    with EnvClient(url) as env:
        env.reset()
        assert env.step({"mode": "sleep", "seconds": 0.8}).text == "sleep\n"


def test_step_timeout_abandons_episode_but_keeps_session(running_server) -> None:
    url = running_server(CrashEnvironment, step_timeout_s=0.3)
    with EnvClient(url) as env:
        env.reset()
        worker = int(env.step({"mode": "pid"}).text)
        assert worker != os.getpid()  # a BLOCKING env runs in a worker process of its own
        with pytest.raises(StepTimeoutError):
            env.step({"mode": "sleep", "seconds": 30})
        # the step was really stopped: its worker is gone (killed, not left running in a thread)
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(worker).wait(timeout=10)  # raises TimeoutExpired if it were left running
        with pytest.raises(EpisodeNotStartedError):
            env.step({"mode": "ok"})
        env.reset()
        assert env.step({"mode": "ok"}).text == "ok\n"


def test_production_mode_has_no_stateless_routes(running_server) -> None:
    url = running_server("echo", mode="production")
    paths = httpx.get(url + "/openapi.json", trust_env=False).json()["paths"]
    assert "/reset" not in paths and "/step" not in paths and "/state" not in paths
    assert httpx.post(url + "/reset", json={}, trust_env=False).status_code == 404
    with EnvClient(url) as env:  # the WebSocket still serves episodes
        env.reset()
        assert env.step({"message": "prod"}).text == "[echo] prod\n"


def test_schema_publishes_the_role_spec(running_server) -> None:
    url = running_server("echo")
    schema = httpx.get(url + "/schema", trust_env=False).json()
    obs = schema["observation"]
    assert obs["x-openenv-echo-role-spec"] == "1.1"
    assert {"segments", "text", "tokens", "role_spec", "done", "reward", "metadata"} <= set(obs["properties"])
    assert set(obs["$defs"]["Role"]["enum"]) == {r.value for r in Role}
    assert schema["action"]["properties"]["message"]["type"] == "string"


@pytest.fixture(scope="module")
def bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator(["[echo] hello world\n", "echo server says hello"] * 50, trainer=trainer)
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def test_server_side_tokens_on_request(running_server, bpe_tokenizer) -> None:
    url = running_server("echo", tokenizer=bpe_tokenizer)
    with EnvClient(url) as env:
        plain = env.reset()
        assert plain.tokens is None
        first = env.reset(return_tokens=True)
        r = env.step({"message": "hello world"})
        for result in (first, r):
            tokens = result.tokens
            assert tokens is not None and tokens.tokenizer.fingerprint == tokenizer_fingerprint(bpe_tokenizer)
            assert result.segments  # something to check below
            for seg in result.segments:  # each segment's body tokens, in order, with its role
                n = len(bpe_tokenizer.encode(seg.text, add_special_tokens=False))
                assert tokens.roles[:n] == [seg.role] * n
                assert bpe_tokenizer.decode(tokens.ids[:n]) == seg.text
                tokens = tokens.model_copy(update={"ids": tokens.ids[n:], "roles": tokens.roles[n:]})
            assert tokens.ids == []
        assert env.trajectory.steps[0].observation.tokens == r.tokens  # recorded verbatim


def test_a_session_cap_above_the_default_connection_cap_serves_every_session(running_server) -> None:
    """``max_sessions`` alone, above the default connection cap (256): the cap grows with it, so every session
    connects and steps; 300 sessions once got 429 at the transport past the 256th. A cap set below the sessions is
    refused when the limits are built, not found out by the 257th client."""
    import asyncio

    from openenv_echo import AsyncEnvClient
    from openenv_echo.server import ServerLimits

    n = 300
    url = running_server("echo", max_sessions=n)

    async def episodes() -> list[str]:
        clients = [AsyncEnvClient(url) for _ in range(n)]
        try:
            await asyncio.gather(*(c.reset() for c in clients))  # every session open at once
            steps = await asyncio.gather(*(c.step({"message": f"s{i}"}) for i, c in enumerate(clients)))
            return [s.text for s in steps]
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    texts = asyncio.run(episodes())
    assert texts == [f"[echo] s{i}\n" for i in range(n)]  # each session answered its own action
    assert ServerLimits(max_sessions=n).max_connections >= n and ServerLimits().max_connections == 256
    with pytest.raises(ValueError, match=r"max_connections \(100\) is below max_sessions \(300\)"):
        ServerLimits(max_sessions=n, max_connections=100)
