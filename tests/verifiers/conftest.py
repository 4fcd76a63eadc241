"""The verifiers (prime-rl) tier: verifiers' real classes against live servers on loopback.

verifiers 0.4 cannot be installed beside the main environment's ``openenv`` (it pins mcp 2.0.0; openenv's fastmcp
needs mcp < 2), so this tier runs in ``.venv-verifiers`` (``make test-verifiers``). Without verifiers only
``test_tier.py`` is collected, and it reports the skip and why."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

if importlib.util.find_spec("verifiers") is None:
    collect_ignore_glob = ["test_env.py", "test_roles.py", "test_recipe.py"]


@pytest.fixture(scope="session")
def renderer_tokenizer() -> tuple[str, Any]:
    """``(directory, tokenizer)``: the offline qwen3 tokenizer with Qwen3's tool-call tokens, as renderers loads it."""
    from renderers.base import load_tokenizer

    from openenv_echo.adapters.verifiers import offline_renderer_tokenizer

    path = offline_renderer_tokenizer()
    return path, load_tokenizer(path)


@pytest.fixture(scope="module")
def engine(renderer_tokenizer: tuple[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(base_url, model)``: a tiny random Qwen2 behind the generate stand-in (``/v1`` base url)."""
    from openenv_echo.server import BackgroundServer
    from openenv_echo.testing.generate_server import generate_app
    from openenv_echo.testing.recipes import tiny_causal_lm

    _, tok = renderer_tokenizer
    model = tiny_causal_lm(tok, seed=0)
    server = BackgroundServer(generate_app(model, tok, model_name="tiny", default_max_tokens=10))
    url = server.start()
    yield url + "/v1", model
    server.stop()


@pytest.fixture(scope="module")
def terminal_url() -> Iterator[str]:
    from openenv_echo.providers import LocalProcessProvider

    with LocalProcessProvider("terminal", max_sessions=16, idle_timeout_s=None, log_level="warning") as env:
        yield env.base_url


def run_episodes(
    base_url: str,
    engine_url: str,
    tokenizer_dir: str,
    *,
    resets: list[dict[str, Any]],
    repeats: int = 1,
    plain_text_role: Any = "env_output",
    **echo: Any,
) -> list[Any]:
    """``repeats`` episodes of each reset, concurrently, through verifiers' own env machinery; their traces
    (``echo``: the ``WorldWeightsConfig`` fields)."""
    import verifiers.v1 as vf
    from renderers.configs import Qwen3RendererConfig
    from verifiers.v1.runtimes import SubprocessConfig

    from openenv_echo.adapters.prime_rl import WorldWeightsConfig
    from openenv_echo.adapters.verifiers import EchoEnvConfig, EchoTasksetConfig
    from openenv_echo.testing.recipes import SYSTEM_PROMPT

    cfg = EchoEnvConfig(
        taskset=EchoTasksetConfig(
            id="openenv-echo-verifiers",
            base_url=base_url,
            resets=resets,
            instructions=SYSTEM_PROMPT,
            plain_text_role=plain_text_role,
        ),
        agent=vf.AgentConfig(runtime=SubprocessConfig(), max_turns=4),
        echo=WorldWeightsConfig(**echo),
    )
    env = vf.load_environment(cfg)
    client = vf.TrainClientConfig(
        base_url=engine_url, renderer=Qwen3RendererConfig(enable_thinking=False), renderer_model_name=tokenizer_dir
    )
    ctx = vf.ModelContext(model="tiny", client=client, sampling=vf.SamplingConfig(max_tokens=10, temperature=1.0))

    async def main() -> list[Any]:
        async with env.serving():
            tasks = [t for t in env.taskset for _ in range(repeats)]
            episodes = await asyncio.gather(*(env.run_episode(t, ctx) for t in tasks))
        for ep in episodes:
            assert ep.ok, ep.errors
        return [tr for ep in episodes for tr in ep.traces]

    return asyncio.run(main())
