"""Our envs as skyrl-gym text envs on a live server: made through ``skyrl_gym.make``, observation messages that keep
their role segments, and SkyRL's agent loop (``run_episodes``) turning them into per-token roles."""

from __future__ import annotations

from typing import Any

import pytest
import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

from openenv_echo.adapters.rollouts import HFSampler
from openenv_echo.adapters.skyrl.gym import ENV_ID, OpenEnvTextEnv, register_env, run_episodes
from openenv_echo.roles import Role
from openenv_echo.testing.recipes import tiny_causal_lm
from openenv_echo.tokenization import TitoBuilder

SYSTEM = [{"role": "system", "content": "Talk to the echo server."}]


def _make(url: str, **extras: Any) -> OpenEnvTextEnv:
    register_env()
    env = skyrl_gym.make(ENV_ID, env_config={"base_url": url, "action_field": "message"}, extras=extras)
    assert isinstance(env, OpenEnvTextEnv) and isinstance(env, BaseTextEnv)
    return env


def test_observations_keep_their_role_segments(running_server: Any, qwen_tokenizer: Any) -> None:
    url = running_server("echo")
    env = _make(url, max_turns=2)
    try:
        messages, info = env.init([dict(m) for m in SYSTEM])
        assert messages[: len(SYSTEM)] == SYSTEM and info["done"] is False
        builder = TitoBuilder(qwen_tokenizer, observation_role="tool")
        builder.start(SYSTEM, messages[1] if len(messages) > 1 else None)
        out = env.step("hello world")
        assert set(out) >= {"observations", "reward", "done", "metadata"} and out["done"] is False
        (obs,) = out["observations"]
        assert obs["role"] == "tool" and obs["content"] == "".join(s["text"] for s in obs["segments"])
        assert {s["role"] for s in obs["segments"]} >= {"env_output"}
        assert "hello world" in "".join(s["text"] for s in obs["segments"] if s["role"] == "env_output")
        builder.add_action(text="hello world")
        builder.add_observation(obs)  # the message as skyrl-gym returns it is a valid observation for the builder
        roles = builder.finish().role_ids.tolist()
        assert Role.ENV_OUTPUT.code in roles and Role.ACTION.code in roles
        assert env.step("again")["done"] is True  # max_turns reached
        assert env.get_metrics()["turns"] == 2
    finally:
        env.close()


def test_bad_config_is_refused(running_server: Any) -> None:
    register_env()
    with pytest.raises(ValueError, match="base_url"):
        skyrl_gym.make(ENV_ID, env_config={"action_field": "message"}, extras={})
    with pytest.raises(ValueError, match="action_field"):
        skyrl_gym.make(ENV_ID, env_config={"base_url": running_server("echo")}, extras={})
    assert register_env() == ENV_ID  # idempotent


def test_skyrls_agent_loop_yields_aligned_roles(running_server: Any, qwen_tokenizer: Any) -> None:
    url = running_server("echo")
    model = tiny_causal_lm(qwen_tokenizer, seed=0)
    rollouts = run_episodes(
        {"base_url": url, "action_field": "message"},
        [{"max_turns": 2}] * 3,
        SYSTEM,
        qwen_tokenizer,
        HFSampler(model, qwen_tokenizer),
        max_new_tokens=6,
        max_completion_length=256,
    )
    assert len(rollouts) == 3
    for r in rollouts:
        assert len(r.role_ids) == len(r.completion_ids) == len(r.logprobs) and r.turns == 2
        assert r.role_ids[0] == Role.ACTION.code and Role.ENV_OUTPUT.code in r.role_ids
        assert all((lp != 0.0) == (role == Role.ACTION.code) for lp, role in zip(r.logprobs, r.role_ids))
