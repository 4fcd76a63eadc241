"""Concurrent env rollouts for trainers: one world per GRPO group, batched sampling, completion-length limits.

Trainer-agnostic (torch + the client + token-in-token-out assembly); the TRL, torchrl, Tinker and SkyRL recipes
all run their episodes through ``run_rollouts``:

* **One world per group.** Each episode is reset with its own ``reset_options`` (e.g. ``{"seed": 7, "incident":
  "disk_full"}``); a GRPO group is ``group_size`` consecutive episodes with *identical* options, so every
  completion of a group starts in the same world and the group-relative advantage compares like with like.
  ``group_reset_options`` builds such a list and ``check_groups`` refuses one that is not.
* **Concurrent.** All episodes of a call run at once, one ``AsyncEnvClient`` session each; per turn the active
  episodes' prompts are sampled in one batch (``sampler``), then all env steps are sent concurrently.
* **Length limits.** ``max_completion_length`` bounds everything after the prompt (actions, observations and
  their scaffolding): each turn samples at most the remaining budget, and an observation that overruns it is cut.
* **The end-of-completion rule** (``end_completion``): a completion ends on an end-of-turn token exactly when
  the episode ended cleanly, so a trainer's truncation check (``completion_ids[-1] in eos``) is true only for
  completions cut by a length limit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..client import AsyncEnvClient, EnvClientError, StepResult
from ..roles import Role, observation_count
from ..tokenization import TitoBuilder

ResetOptions = Mapping[str, Any]
Messages = Sequence[Mapping[str, Any]]


class Sampler(Protocol):
    """Samples one action per prompt: returns ``(token_ids, logprobs)`` per prompt, at most ``max_new_tokens`` each,
    the ids verbatim (including the end-of-turn id if the model emitted it)."""

    def __call__(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> list[tuple[list[int], list[float]]]: ...


@dataclass
class Rollout:
    """One finished episode, split where the model starts writing (TRL's prompt/completion split)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    role_ids: list[int]
    """One role code per completion token (``openenv_echo.roles.Role``)."""
    logprobs: list[float]
    """The sampler's log-prob on action tokens, 0.0 on every other completion token."""
    reward: float
    reset_options: dict[str, Any]
    reset_text: str
    """Text of the reset observation: the world the episode started in."""
    truncated: bool
    """True when a length limit cut the completion (it then does not end on an end-of-turn token)."""
    obs_count: int
    """Observation tokens (env_output + warning) in the completion before any cut."""
    turns: int
    end: str
    """Why the episode stopped: ``done``, ``max_turns``, ``length`` or ``error: <message>``."""
    conversation: list[dict[str, Any]] = field(default_factory=list)
    """The episode as chat messages (prompt, observations as ``observation_role`` messages, decoded actions as
    ``assistant``); observation messages also carry ``segments``: ``[(role, text), ...]`` of their body."""


@dataclass
class _Episode:
    options: dict[str, Any]
    client: AsyncEnvClient
    builder: TitoBuilder
    prompt_len: int = 0
    reset_text: str = ""
    reward: float = 0.0
    turns: int = 0
    end: str = ""
    logprobs: dict[int, float] = field(default_factory=dict)
    conversation: list[dict[str, Any]] = field(default_factory=list)

    @property
    def used(self) -> int:
        return len(self.builder) - self.prompt_len


def reset_options_of(value: Any) -> dict[str, Any]:
    """A reset-options cell as a dict: a mapping, a JSON object string, or None (no options)."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if not isinstance(value, Mapping):
        raise TypeError(f"reset options must be a mapping or a JSON object string, got {type(value).__name__}")
    return {str(k): v for k, v in value.items() if v is not None}


def group_reset_options(options: Sequence[Any], group_size: int) -> list[dict[str, Any]]:
    """Repeat each world's options ``group_size`` times: the per-episode list for ``len(options)`` groups."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    return [reset_options_of(o) for o in options for _ in range(group_size)]


def check_groups(options: Sequence[Any], group_size: int) -> None:
    """Refuse a per-episode options list whose groups (``group_size`` consecutive episodes) mix worlds."""
    if group_size < 1 or len(options) % group_size:
        raise ValueError(f"{len(options)} episodes do not split into groups of {group_size}")
    parsed = [reset_options_of(o) for o in options]
    for g in range(0, len(parsed), group_size):
        block = parsed[g : g + group_size]
        if any(o != block[0] for o in block):
            raise ValueError(
                f"GRPO group {g // group_size} mixes worlds: reset options {block}; every completion of a group must "
                "run the same world (give each dataset row its reset options; the trainer repeats the row per group)"
            )


def end_completion(
    ids: Sequence[int], roles: Sequence[int], eos_ids: Sequence[int]
) -> tuple[list[int], list[int], bool]:
    """Apply the end-of-completion rule; returns ``(ids, roles, terminated)``.

    Trailing scaffolding is dropped. A completion whose last content is an action ends on that action's last
    sampled token (an end-of-turn id if the model stopped by itself, else it counts as cut). A completion whose
    last content is an observation keeps the observation turn's closing end-of-turn token (``context``), so an
    episode that ended on an observation counts as terminated, not truncated.
    """
    eos = set(eos_ids)
    k = len(roles) - 1
    while k >= 0 and roles[k] == Role.CONTEXT.code:
        k -= 1
    if k < 0:
        return [], [], False
    end = k + 1
    if roles[k] != Role.ACTION.code:
        nxt = next((j for j in range(k + 1, len(ids)) if ids[j] in eos), None)
        if nxt is not None:
            end = nxt + 1
    return list(ids[:end]), list(roles[:end]), ids[end - 1] in eos


class HFSampler:
    """Batched sampling with a Hugging Face causal LM: left-padded prompts, one ``generate`` call per turn; returns
    each row's ids up to and including its first end-of-turn id, with their log-probs at ``temperature``."""

    def __init__(self, model: Any, tokenizer: Any, *, temperature: float = 1.0, eos_ids: Sequence[int] = ()) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        eos = list(eos_ids) or [tokenizer.eos_token_id]
        self.eos_ids = [int(e) for e in eos if e is not None]
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])

    @torch.no_grad()
    def __call__(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[tuple[list[int], list[float]]]:
        if not prompts:
            return []
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p) :] = 1
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=True,
                temperature=self.temperature,
                top_k=0,
                top_p=1.0,
                eos_token_id=self.eos_ids,
                pad_token_id=self.pad_id,
                return_dict_in_generate=True,
                output_logits=True,
            )
        finally:
            self.model.train(was_training)
        new = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu() / self.temperature
        lps = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        result = []
        for row, lp in zip(new.tolist(), lps.tolist()):
            n = len(row)
            for j, t in enumerate(row):
                if t in self.eos_ids:
                    n = j + 1
                    break
            result.append((row[:n], lp[:n]))
        return result


async def _step(ep: _Episode, action: dict[str, Any], text: str, ids: list[int]) -> StepResult | str:
    try:
        return await ep.client.step(action, action_text=text, action_token_ids=ids)
    except EnvClientError as e:  # a refused or failed step ends this episode only
        return f"error: {type(e).__name__}: {e}"


async def run_rollouts_async(
    base_url: str,
    tokenizer: Any,
    sampler: Sampler,
    reset_options: Sequence[Any],
    messages: Sequence[Messages],
    *,
    to_action: Callable[[str], dict[str, Any]],
    max_turns: int,
    max_completion_length: int,
    max_new_tokens: int,
    eos_ids: Sequence[int] | None = None,
    observation_role: str = "tool",
    client_kwargs: Mapping[str, Any] | None = None,
) -> list[Rollout]:
    """Run one episode per entry of ``reset_options``/``messages``, all at once; results in input order.

    ``to_action`` maps the decoded action text to the env's action dict (e.g. ``lambda t: {"command": t}``).
    ``sampler`` runs in a worker thread, one call at a time, so a slow sampling phase never starves the sessions'
    keepalive.
    """
    if len(reset_options) != len(messages):
        raise ValueError(f"{len(reset_options)} reset options but {len(messages)} prompts")
    if max_turns < 1 or max_completion_length < 1 or max_new_tokens < 1:
        raise ValueError("max_turns, max_completion_length and max_new_tokens must be >= 1")
    episodes = [
        _Episode(
            options=reset_options_of(o),
            client=AsyncEnvClient(base_url, **dict(client_kwargs or {})),
            builder=TitoBuilder(tokenizer, observation_role=observation_role),
        )
        for o in reset_options
    ]
    eos = list(eos_ids) if eos_ids is not None else _eos_ids(tokenizer, episodes[0].builder if episodes else None)
    try:
        resets = await asyncio.gather(
            *(ep.client.reset(**ep.options, messages=[dict(x) for x in m]) for ep, m in zip(episodes, messages))
        )
        for ep, m, r in zip(episodes, messages, resets):
            ep.prompt_len = len(ep.builder.start(list(m), r))
            ep.reset_text = r.text
            ep.conversation = [dict(x) for x in m]
            if r.segments:
                ep.conversation.append(_obs_message(r, observation_role))
            if r.done:
                ep.end = "done"
        for _ in range(max_turns):
            active = [ep for ep in episodes if not ep.end and ep.used < max_completion_length]
            for ep in episodes:
                if not ep.end and ep.used >= max_completion_length:
                    ep.end = "length"
            if not active:
                break
            budget = min(max_new_tokens, max_completion_length - min(ep.used for ep in active))
            # off the event loop: it keeps answering the servers' keepalive pings while the sampler works (a
            # server closes a connection whose pong is 40 s late: every episode would lose its session)
            samples = await asyncio.to_thread(sampler, [ep.builder.ids for ep in active], budget)
            steps = []
            for ep, (ids, lps) in zip(active, samples):
                ids = ids[: max_completion_length - ep.used]
                start = len(ep.builder)
                ep.builder.add_action(ids=ids)
                ep.logprobs.update({start + j: float(x) for j, x in enumerate(lps[: len(ids)])})
                text = tokenizer.decode(ids, skip_special_tokens=True)
                steps.append(_step(ep, to_action(text), text, ids))
                ep.conversation.append({"role": "assistant", "content": text})
                ep.turns += 1
            for ep, res in zip(active, await asyncio.gather(*steps)):
                if isinstance(res, str):
                    ep.end = res
                    continue
                ep.builder.add_observation(res)
                ep.conversation.append(_obs_message(res, observation_role))
                ep.reward += float(res.reward or 0.0)
                if res.done:
                    ep.end = "done"
        for ep in episodes:
            ep.end = ep.end or ("length" if ep.used >= max_completion_length else "max_turns")
    finally:
        await asyncio.gather(*(ep.client.close() for ep in episodes), return_exceptions=True)
    return [_finish(ep, eos, max_completion_length) for ep in episodes]


def run_rollouts(*args: Any, **kwargs: Any) -> list[Rollout]:
    """Synchronous front of ``run_rollouts_async`` (runs its own event loop; call from plain code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_rollouts_async(*args, **kwargs))
    raise RuntimeError("run_rollouts was called inside a running event loop; await run_rollouts_async instead")


def _obs_message(result: StepResult, role: str) -> dict[str, Any]:
    segs = [(s.role.value, s.text) for s in result.segments]
    return {"role": role, "content": "".join(t for _, t in segs), "segments": segs}


def _eos_ids(tokenizer: Any, builder: TitoBuilder | None) -> list[int]:
    eos = set(builder.scaffold.eot_ids) if builder is not None else set()
    if tokenizer.eos_token_id is not None:
        eos.add(int(tokenizer.eos_token_id))
    return sorted(eos)


def _finish(ep: _Episode, eos: Sequence[int], limit: int) -> Rollout:
    tt = ep.builder.finish()
    ids, roles = tt.input_ids.tolist(), tt.role_ids.tolist()
    p = ep.prompt_len
    comp, comp_roles, terminated = end_completion(ids[p:], roles[p:], eos)
    obs_count = int(observation_count(torch.tensor(comp_roles, dtype=torch.long)))  # |O| before the length cut
    cut = len(comp) > limit
    if cut:
        comp, comp_roles, terminated = comp[:limit], comp_roles[:limit], False
        if comp and comp[-1] in set(eos):  # a cut never looks like a clean end
            comp, comp_roles = comp[:-1], comp_roles[:-1]
    lps = [ep.logprobs.get(p + j, 0.0) if r == Role.ACTION.code else 0.0 for j, r in enumerate(comp_roles)]
    return Rollout(
        prompt_ids=ids[:p],
        completion_ids=comp,
        role_ids=comp_roles,
        logprobs=lps,
        reward=ep.reward,
        reset_options=ep.options,
        reset_text=ep.reset_text,
        truncated=not terminated,
        obs_count=obs_count,
        turns=ep.turns,
        end="length" if cut else ep.end,
        conversation=ep.conversation,
    )


__all__ = [
    "HFSampler",
    "Rollout",
    "Sampler",
    "check_groups",
    "end_completion",
    "group_reset_options",
    "reset_options_of",
    "run_rollouts",
    "run_rollouts_async",
]
