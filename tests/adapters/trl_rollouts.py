"""A real OpenEnv-style TRL ``rollout_func`` for the adapter tests.

Episodes run against the project's echo environment (in-process here; over HTTP in the integration test) and are
tokenized token-in-token-out by ``TitoBuilder`` with the offline tokenizer and its chat template, so the roles
that reach the trainer are the ones the protocol carries. Actions are scripted from a seeded RNG (a random tiny
model never emits sensible commands); both runs of a comparison therefore see exactly the same rollouts.
"""

from __future__ import annotations

import random
from typing import Any

from openenv_echo.adapters.trl import rollout_output, split_at_first_action
from openenv_echo.envs.echo.environment import EchoEnvironment
from openenv_echo.envs.echo.models import EchoAction
from openenv_echo.tokenization import TitoBuilder

ACTIONS = ["ls -la", "cat notes.txt", "hello world", "grep foo bar.txt", "echo hi there", "pwd"]


class EchoRollouts:
    """Callable ``rollout_func(prompts, trainer) -> dict`` with the env's rewards under ``env_reward``."""

    def __init__(self, tokenizer: Any, seed: int = 0, turns: int = 2, with_roles: bool = True) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.turns = turns
        self.with_roles = with_roles
        self.calls = 0
        self.history: list[dict[str, Any]] = []

    def episode(self, prompt: list[dict[str, str]], rng: random.Random) -> tuple[list[int], list[int], float]:
        env = EchoEnvironment()
        builder = TitoBuilder(self.tokenizer, observation_role="tool")
        builder.start(prompt, env.reset(seed=0))
        reward = 0.0
        for _ in range(self.turns):
            msg = rng.choice(ACTIONS)
            builder.add_action(text=msg)
            obs = env.step(EchoAction(message=msg))
            reward += float(obs.reward or 0.0)
            builder.add_observation(obs)
        builder.add_action(text="bye")
        tt = builder.finish()
        return tt.input_ids.tolist(), tt.role_ids.tolist(), reward

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        pids, cids, croles, rewards = [], [], [], []
        for i, prompt in enumerate(prompts):
            rng = random.Random(self.seed * 1_000_003 + self.calls * 1009 + i)
            ids, roles, reward = self.episode(prompt, rng)
            p, c, r = split_at_first_action(ids, roles)
            pids.append(p)
            cids.append(c)
            croles.append(r)
            rewards.append(reward)
        self.calls += 1
        out = rollout_output(pids, cids, croles, env_reward=rewards)
        if not self.with_roles:
            out.pop("echo_role_ids")
        self.history.append({"prompt_ids": pids, "completion_ids": cids, "roles": croles})
        return out


def env_reward(completions: list[Any], env_reward: list[float], **_: Any) -> list[float]:
    """Reward function: the environment's own reward, passed through rollout_func's extra field."""
    return list(env_reward)
