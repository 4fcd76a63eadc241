"""SkyRL's own generator, carrying per-token roles: ``EchoGymGenerator(SkyRLGymGenerator)``.

SkyRL's ``SkyRLGymGenerator`` chat-templates each observation message (``get_obs_ids_from_obs``) and appends the ids
to the response verbatim (token in, token out); its ``GeneratorOutput`` has no per-token role field, and the
``segments`` that ``openenv_echo.adapters.skyrl.gym.OpenEnvTextEnv`` puts on every observation message are
dropped. The subclass keeps SkyRL's agent loop and adds one list to its output, ``ROLE_KEY``: for every
response token its role code, aligned with ``response_ids``:

* the tokens SkyRL trains (``loss_masks`` = 1) are ``action``;
* the tokens of each observation get the role of the characters they cover, from the message's ``segments``
  (a token covering template text, or characters of two roles, is ``context``);
* everything else (template tokens, an EOS SkyRL appended) is ``context``.

Per-token world weights for the loss then come from
``openenv_echo.adapters.skyrl.loss.world_weights`` on these roles. Only SkyRL's default multi-turn path is
supported (``use_conversation_multi_turn=True``, no custom chat template, not step-wise): the others re-tokenize
the history, so the observation ids are not the response's.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator, TrajectoryOutput

from ...roles import Role
from . import ROLE_KEY

_OBSERVATIONS: ContextVar[list[tuple[list[int], list[int]]] | None] = ContextVar("echo_observations", default=None)


def observation_token_roles(tokenizer: Any, ids: Sequence[int], messages: Sequence[dict[str, Any]]) -> list[int]:
    """Role codes of ``ids``, a chat-templated rendering of ``messages`` (the observation messages of one turn):
    each message's ``content`` is found in the decoded text in order, its characters take their ``segments``'
    roles, and a token takes the role of the characters it covers when they all share one (else ``context``).
    A message without segments, or whose content the template rewrote, leaves its tokens ``context``."""
    ctx = Role.CONTEXT.code
    text = tokenizer.decode(list(ids))
    ends, last = [], 0
    for k in range(1, len(ids) + 1):  # a token's span: where the decoded prefix ends
        last = min(max(last, len(tokenizer.decode(list(ids[:k])))), len(text))
        ends.append(last)
    chars = [ctx] * len(text)
    cursor = 0
    for m in messages:
        segments, content = m.get("segments") or [], m.get("content")
        if not segments or not isinstance(content, str) or not content:
            continue
        at = text.find(content, cursor)
        if at < 0:
            continue
        for seg in segments:
            code = Role(seg["role"]).code
            chars[at : at + len(seg["text"])] = [code] * len(seg["text"])
            at += len(seg["text"])
        cursor = at
    roles, start = [], 0
    for end in ends:
        span = set(chars[start:end])
        roles.append(span.pop() if len(span) == 1 else ctx)
        start = end
    return roles


def response_roles(
    response_ids: Sequence[int], loss_mask: Sequence[int], observations: Sequence[tuple[list[int], list[int]]]
) -> list[int]:
    """Role codes of a SkyRL response: ``action`` where ``loss_mask`` is 1, each observation's roles where its ids
    sit (found in order, after the previous one; the last one may be cut), ``context`` elsewhere."""
    roles = [Role.ACTION.code if m else Role.CONTEXT.code for m in loss_mask]
    n, cursor = len(response_ids), 0
    for ids, obs_roles in observations:
        if not ids:
            continue
        at = next(
            (j for j in range(cursor, n) if list(response_ids[j : j + len(ids)]) == ids[: n - j] and not loss_mask[j]),
            None,
        )
        if at is None:
            continue
        k = min(len(ids), n - at)
        roles[at : at + k] = obs_roles[:k]
        cursor = at + k
    return roles


class EchoGymGenerator(SkyRLGymGenerator):  # type: ignore[misc]
    """``SkyRLGymGenerator`` whose output also holds ``ROLE_KEY`` (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.use_conversation_multi_turn or self.custom_chat_template is not None:
            raise ValueError("EchoGymGenerator needs use_conversation_multi_turn=True and no custom chat template")
        if self.generator_cfg.step_wise_trajectories or self.batched:
            raise ValueError("EchoGymGenerator supports SkyRL's per-trajectory agent loop only (not step-wise/batched)")
        self._echo_roles: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}

    def get_obs_ids_from_obs(self, new_obs: list[dict[str, Any]], is_done: bool) -> list[int]:
        ids: list[int] = list(super().get_obs_ids_from_obs(new_obs, is_done))
        turns = _OBSERVATIONS.get()
        if turns is not None:
            turns.append((ids, observation_token_roles(self.tokenizer, ids, new_obs)))
        return ids

    async def agent_loop(self, *args: Any, **kwargs: Any) -> Any:
        turns: list[tuple[list[int], list[int]]] = []
        token = _OBSERVATIONS.set(turns)  # this trajectory's task only: agent loops run concurrently
        try:
            out = await super().agent_loop(*args, **kwargs)
        finally:
            _OBSERVATIONS.reset(token)
        if isinstance(out, TrajectoryOutput):
            key = (tuple(out.prompt_ids), tuple(out.response_ids))
            self._echo_roles[key] = response_roles(out.response_ids, out.loss_mask, turns)
        return out

    async def generate(self, input_batch: Any, disable_tqdm: bool = False) -> Any:
        out = await super().generate(input_batch, disable_tqdm=disable_tqdm)
        keys = [(tuple(p), tuple(r)) for p, r in zip(out["prompt_token_ids"], out["response_ids"])]
        out[ROLE_KEY] = [list(self._echo_roles[k]) for k in keys]
        for k in keys:
            self._echo_roles.pop(k, None)
        return out


__all__ = ["ROLE_KEY", "EchoGymGenerator", "observation_token_roles", "response_roles"]
