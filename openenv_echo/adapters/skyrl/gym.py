"""Any openenv-echo (or OpenEnv) server as a ``skyrl-gym`` text env whose observation messages keep their roles.

``skyrl_gym.envs.base_text_env.BaseTextEnv`` is SkyRL's interface for multi-turn text envs: ``init(prompt)``
returns the first chat messages, ``step(action_text)`` returns ``{"observations": [messages], "reward", "done",
"metadata"}``. SkyRL's generator chat-templates the observation messages and trains none of their tokens, so the
message ``content`` is the observation's text and every message also carries ``segments``: ``[{"role":
"env_output" | "warning" | "context", "text": ...}, ...]``, the role of every character as the server emitted it.
``openenv_echo.tokenization.TitoBuilder.add_observation`` takes such a message as is and yields per-token roles.

Register once, then make it like any skyrl-gym env (SkyRL's generator passes ``env_config`` and the dataset row's
``extras``)::

    register_env()
    env = skyrl_gym.make(ENV_ID, env_config={"base_url": url, "action_field": "command"},
                         extras={"reset_options": {"seed": 3}, "max_turns": 4})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

from ...client import EnvClient, StepResult
from ...tokenization import TitoBuilder
from ..rollouts import Rollout, Sampler, _eos_ids, _Episode, _finish

ENV_ID = "openenv_echo"
"""The skyrl-gym id ``register_env`` registers."""


def observation_message(result: StepResult, role: str = "tool") -> dict[str, Any]:
    """A reset/step reply as one chat message: ``content`` = its text, ``segments`` = its role-tagged parts."""
    segments = [{"role": s.role.value, "text": s.text} for s in result.segments]
    return {"role": role, "content": "".join(s["text"] for s in segments), "segments": segments}


class OpenEnvTextEnv(BaseTextEnv):  # type: ignore[misc]
    """One episode against a live server per env object.

    ``env_config``: ``base_url`` (required), ``action_field`` (the action's text field, e.g. ``command`` for the
    terminal env, ``message`` for echo; required), ``observation_role`` (chat role of observations, default
    ``tool``), ``client_kwargs``; a mapping or SkyRL's ``environment.skyrl_gym.openenv_echo`` config
    (``openenv_echo.adapters.skyrl.config.OpenEnvEchoEnvConfig``). ``extras``: ``reset_options`` (the episode's
    world, e.g. ``{"seed": 3}``) and ``max_turns`` (SkyRL's generator sets it; default 1). The episode ends when the server says done or after
    ``max_turns`` steps.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        is_config = dataclasses.is_dataclass(env_config) and not isinstance(env_config, type)
        cfg = dataclasses.asdict(env_config) if is_config else dict(env_config or {})
        ext = dict(extras or {})
        for key in ("base_url", "action_field"):
            if not cfg.get(key):
                raise ValueError(f"env_config needs {key!r}")
        self.action_field = str(cfg["action_field"])
        self.observation_role = str(cfg.get("observation_role", "tool"))
        self.reset_options = dict(ext.get("reset_options") or {})
        self.max_turns = int(ext.get("max_turns", 1))
        self.client = EnvClient(str(cfg["base_url"]), **dict(cfg.get("client_kwargs") or {}))
        self.total_reward = 0.0

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset the episode (the prompt goes to the server as the policy's initial messages); returns the prompt
        plus the reset observation's message (when it has content)."""
        messages = [dict(m) for m in prompt]
        result = self.client.reset(**self.reset_options, messages=messages)
        out = list(messages)
        if result.segments:
            out.append(observation_message(result, self.observation_role))
        return out, {"reset_options": self.reset_options, "done": result.done}

    def step(self, action: str) -> dict[str, Any]:
        """Send the sampled text as ``{action_field: text}``; the reply comes back as one role-tagged message."""
        self.turns += 1
        result = self.client.step({self.action_field: action.strip()}, action_text=action)
        reward = float(result.reward or 0.0)
        self.total_reward += reward
        done = bool(result.done) or self.turns >= self.max_turns
        return {
            "observations": [observation_message(result, self.observation_role)],
            "reward": reward,
            "done": done,
            "metadata": {"server_done": bool(result.done), "turns": self.turns},
            "postprocessed_action": None,
        }

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "total_reward": self.total_reward}

    def close(self) -> None:
        self.client.close()


def register_env(env_id: str = ENV_ID) -> str:
    """Register ``OpenEnvTextEnv`` with skyrl-gym under ``env_id`` (idempotent); returns the id."""
    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point=f"{__name__}:OpenEnvTextEnv")
    return env_id


def run_episodes(
    env_config: Mapping[str, Any],
    extras: Sequence[Mapping[str, Any]],
    prompt: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    sampler: Sampler,
    *,
    max_new_tokens: int,
    max_completion_length: int,
    env_id: str = ENV_ID,
) -> list[Rollout]:
    """SkyRL's multi-turn agent loop over skyrl-gym envs, one episode per ``extras`` entry, token in token out.

    What ``SkyRLGymGenerator`` does (``skyrl_gym.make`` → ``init`` → sample → ``step`` until done), with batched
    sampling by ``sampler`` instead of its inference engines, and the project's ``TitoBuilder`` for the tokens: the
    sampled ids are kept verbatim and every observation message's ``segments`` give its tokens their roles.
    Episodes end on ``done`` (the server's, or ``max_turns`` from ``extras``) or at ``max_completion_length``.
    """
    role = str(env_config.get("observation_role", "tool"))
    episodes: list[tuple[Any, _Episode]] = []
    try:
        for ext in extras:
            env = skyrl_gym.make(env_id, env_config=dict(env_config), extras=dict(ext))
            builder = TitoBuilder(tokenizer, observation_role=role)
            ep = _Episode(options=dict(ext.get("reset_options") or {}), client=cast(Any, None), builder=builder)
            episodes.append((env, ep))
            messages, info = env.init([dict(m) for m in prompt])
            reset = messages[len(prompt)] if len(messages) > len(prompt) else None
            ep.prompt_len = len(builder.start(list(prompt), reset))
            ep.reset_text = "" if reset is None else str(reset["content"])
            ep.conversation = [dict(m) for m in messages]
            ep.end = "done" if info.get("done") else ""
        eos = _eos_ids(tokenizer, episodes[0][1].builder if episodes else None)
        while True:
            active = [(env, ep) for env, ep in episodes if not ep.end and ep.used < max_completion_length]
            for _, ep in episodes:
                if not ep.end and ep.used >= max_completion_length:
                    ep.end = "length"
            if not active:
                break
            budget = min(max_new_tokens, max_completion_length - min(ep.used for _, ep in active))
            samples = sampler([ep.builder.ids for _, ep in active], budget)
            for (env, ep), (ids, lps) in zip(active, samples):
                ids = ids[: max_completion_length - ep.used]
                start = len(ep.builder)
                ep.builder.add_action(ids=ids)
                ep.logprobs.update({start + j: float(x) for j, x in enumerate(lps[: len(ids)])})
                text = tokenizer.decode(ids, skip_special_tokens=True)
                out = env.step(text)
                obs = out["observations"][0]
                ep.builder.add_observation(obs)
                ep.conversation += [{"role": "assistant", "content": text}, obs]
                ep.reward += float(out["reward"])
                ep.turns += 1
                if out["done"]:
                    ep.end = "done" if out["metadata"].get("server_done") else "max_turns"
    finally:
        for env, _ in episodes:
            env.close()
    return [_finish(ep, eos, max_completion_length) for _, ep in episodes]


__all__ = ["ENV_ID", "OpenEnvTextEnv", "observation_message", "register_env", "run_episodes"]
