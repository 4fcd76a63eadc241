"""Step-wise assembly: one training sequence per assistant turn, for templates that rewrite history.

A template that drops earlier ``<think>`` blocks (Qwen3-style) or ``trim``s bodies renders turn k's history
differently from how it rendered it while turn k-1 was sampled, so no single sequence is what the sampler saw
at every turn (``TemplateMode`` says when). Step-wise assembly, as SkyRL and prime-rl do it, trains one sequence
per assistant turn k, each exactly as the template renders it at that step::

    prompt_k  = render(history before turn k, add_generation_prompt=True)   # what the sampler saw
    seq_k     = prompt_k + action_k (sampled ids, verbatim) + the template's text after it up to and
                including observation k (its close, the observation's scaffolding and body)

Roles: ``action_k`` is ``action``; observation k's body keeps its segments' roles; everything else, including
all earlier turns, is ``context`` (the reset observation's body keeps its roles in the first sequence). So every
action and every observation body is a target in exactly one sequence. The cost is the trade-off: K turns give K
sequences whose lengths sum to O(K²) tokens, against one O(K) sequence in token-in-token-out mode.

Bodies are literal (``rendered.encode_parts``); observation bodies are encoded from their segments as the
template renders them (server token ids are used in token-in-token-out mode only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..roles import Role
from ..tokenizer_identity import tokenizer_identity
from ..trajectory import ChatMessage, Trajectory
from ..wire import Segment
from .fragment_encoding import fragment_codec
from .rendered import Parts, TaggedMessage, encode_parts, render_parts
from .template import assistant_eot_text
from .tito import _check_segments, action_text, chat_messages, observation_parts
from .tokenized import TokenizedTrajectory, sequence_observation_count

_CTX = Role.CONTEXT.code
_ACT = Role.ACTION.code


class StepwiseBuilder:
    """Live step-wise assembly (module docstring). Like ``TitoBuilder``, but ``start`` and ``add_observation``
    return the **whole** next prompt (the template re-renders history each turn) and ``finish`` returns one
    ``TokenizedTrajectory`` per assistant turn."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        observation_role: str = "tool",
        chat_template: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        add_special_tokens: bool = True,
        name: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.codec = fragment_codec(tokenizer)
        self.identity = tokenizer_identity(tokenizer, name)
        self.observation_role = observation_role
        self.add_special_tokens = add_special_tokens
        self._kw: dict[str, Any] = {"chat_template": chat_template, "template_kwargs": dict(template_kwargs or {})}
        self._eot = assistant_eot_text(tokenizer, **self._kw)
        self._eot_ids = self.codec.encode_scaffold(self._eot)
        self._history: list[TaggedMessage] = []
        self._prompt: tuple[np.ndarray, np.ndarray, int] | None = None
        self._action: tuple[list[int], list[float] | None] | None = None
        self._action_text: str = ""
        self._sequences: list[TokenizedTrajectory] = []
        self._temperature: float | None = None
        self._state = "new"

    def _need(self, state: str, call: str) -> None:
        if self._state != state:
            order = "start() -> (add_action() -> add_observation())* -> finish()"
            raise RuntimeError(f"{call} is not allowed now (state {self._state!r}); call order: {order}")

    def _encode(self, messages: list[TaggedMessage], *, gen: bool) -> tuple[np.ndarray, np.ndarray, int]:
        """``(ids, role codes, straddled)`` of the rendering of ``messages``."""
        parts = render_parts(self.tokenizer, messages, add_generation_prompt=gen, eot=self._eot, **self._kw)
        ids, roles, straddled = encode_parts(self.codec, parts, document_start=True)
        prefix = self.codec.prefix_ids
        if self.add_special_tokens and prefix and ids[: len(prefix)].tolist() != prefix:
            ids = np.concatenate([np.asarray(prefix, dtype=np.int64), ids])
            roles = np.concatenate([np.zeros(len(prefix), dtype=np.int8), roles])
        return ids, roles, straddled

    def start(self, messages: Sequence[ChatMessage | Mapping[str, Any]] = (), reset: Any = None) -> list[int]:
        """The first prompt: ``messages`` and the reset observation rendered with the generation prompt."""
        self._need("new", "start()")
        for m in chat_messages(messages):
            extra = {k: v for k, v in m.items() if k not in ("role", "content")}
            self._history.append(TaggedMessage(m["role"], [Segment(role=Role.CONTEXT, text=m["content"])], extra))
        if reset is not None:
            segs = self._segments(reset)
            if segs:
                self._history.append(TaggedMessage(self.observation_role, segs))
        if not self._history:
            raise ValueError("step-wise assembly needs at least one message or a reset observation to render")
        self._prompt = self._encode(self._history, gen=True)
        self._state = "awaiting_action"
        return [int(i) for i in self._prompt[0]]

    def _segments(self, obs: Any) -> list[Segment]:
        segments, tokens = observation_parts(obs)
        if segments is None:
            if tokens is None:
                return []
            raise ValueError("step-wise assembly renders observation text: this observation has only token ids")
        segs = [s for s in segments if s.text]
        _check_segments(segs)
        return segs

    def add_action(
        self,
        ids: Sequence[int] | None = None,
        *,
        text: str | None = None,
        logprobs: Sequence[float] | None = None,
        temperature: float | None = None,
    ) -> list[int]:
        """The sampled ids (verbatim, ``action``) or, without them, ``text`` encoded plus the end-of-turn."""
        self._need("awaiting_action", "add_action()")
        if ids is None:
            if text is None:
                raise ValueError("add_action needs the sampled ids or the action text")
            ids = self.codec.encode_action(text) + self._eot_ids
            self._action_text = text
        else:
            ids = [int(i) for i in ids]
            bad = [i for i in ids if not 0 <= i < self.codec.vocab_size]
            if bad:
                raise ValueError(f"action id {bad[0]} is outside the tokenizer's vocabulary ({self.codec.vocab_size})")
            trimmed = list(ids)
            while trimmed and trimmed[-1] in self.codec.special_ids:
                trimmed.pop()
            self._action_text = text if text is not None else self.codec.decode(trimmed)
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError("logprobs need the sampled ids, one per id")
        if temperature is not None:
            if self._temperature is not None and self._temperature != temperature:
                raise ValueError(
                    f"actions of one episode were sampled at two temperatures ({self._temperature}, {temperature})"
                )
            self._temperature = float(temperature)
        self._action = (list(ids), None if logprobs is None else [float(v) for v in logprobs])
        self._state = "awaiting_observation"
        return list(ids)

    def _close_sequence(self, obs_segments: list[Segment] | None) -> None:
        """Sequence k: prompt_k + action_k + the template's text after action_k (through observation k)."""
        assert self._prompt is not None and self._action is not None
        p_ids, p_roles, straddled = self._prompt
        turn = len(self._sequences)
        if turn > 0:
            p_roles = np.zeros_like(p_roles)  # earlier turns were trained in their own sequences
            straddled = 0
        a_ids, a_logp = self._action
        opaque = TaggedMessage("assistant", [], ids=a_ids, id_roles=bytes([_ACT]) * len(a_ids))
        msgs = [*self._history, opaque]
        if obs_segments is not None:
            msgs.append(TaggedMessage(self.observation_role, obs_segments))
        parts = render_parts(self.tokenizer, msgs, add_generation_prompt=False, eot=self._eot, **self._kw)
        cpos = parts.opaque[-1][0]
        tail = Parts(parts.text[cpos:], parts.roles[cpos:], parts.kinds[cpos:], [], parts.rewritten)
        t_ids, t_roles, t_straddled = encode_parts(self.codec, tail, document_start=False)
        straddled += t_straddled
        # the template's end-of-turn after the action: skip what the model already emitted; if it was cut off,
        # the template's end-of-turn is context (the model did not emit it)
        k = 0
        while k < len(t_ids) and t_roles[k] == _ACT:
            k += 1
        eot = t_ids[:k].tolist()
        if eot and a_ids[-len(eot) :] == eot:
            t_ids, t_roles = t_ids[k:], t_roles[k:]
        else:
            t_roles = t_roles.copy()
            t_roles[:k] = _CTX
        ids = np.concatenate([p_ids, np.asarray(a_ids, dtype=np.int64), t_ids])
        roles = np.concatenate([p_roles, np.full(len(a_ids), _ACT, dtype=np.int8), t_roles]).astype(np.int8)
        suffix = self.codec.suffix_ids
        if self.add_special_tokens and suffix and ids[len(ids) - len(suffix) :].tolist() != suffix:
            ids = np.concatenate([ids, np.asarray(suffix, dtype=np.int64)])
            roles = np.concatenate([roles, np.zeros(len(suffix), dtype=np.int8)])
        logp = None
        if a_logp is not None:
            logp = np.full(len(ids), np.nan, dtype=np.float32)
            logp[len(p_ids) : len(p_ids) + len(a_ids)] = a_logp
        self._sequences.append(
            TokenizedTrajectory(
                input_ids=ids,
                role_ids=roles,
                obs_count=sequence_observation_count(roles),
                method="stepwise",
                tokenizer=self.identity,
                stats={"straddled": straddled, "content_rewritten": int(parts.rewritten)},
                sampler_logprobs=logp,
                sampling_temperature=self._temperature,
                turn=turn,
            )
        )

    def add_observation(self, obs: Any) -> list[int]:
        """Close turn k's sequence with observation k; returns the next prompt (whole, re-rendered)."""
        self._need("awaiting_observation", "add_observation()")
        segs = self._segments(obs)
        self._close_sequence(segs)
        self._history.append(TaggedMessage("assistant", [Segment(role=Role.ACTION, text=self._action_text)]))
        self._history.append(TaggedMessage(self.observation_role, segs))
        self._prompt = self._encode(self._history, gen=True)
        self._action = None
        self._state = "awaiting_action"
        return [int(i) for i in self._prompt[0]]

    def finish(self, *, episode_id: str | None = None, reward: float | None = None) -> list[TokenizedTrajectory]:
        """One sequence per assistant turn (an episode that ends on an action gets its last turn closed)."""
        if self._state == "new":
            raise RuntimeError("finish() before start()")
        if self._state == "finished":
            raise RuntimeError("finish() was already called; use a new StepwiseBuilder per rollout")
        if self._state == "awaiting_observation":
            self._close_sequence(None)
        self._state = "finished"
        for s in self._sequences:
            s.episode_id, s.reward = episode_id, reward
        return list(self._sequences)


def tokenize_stepwise(
    traj: Trajectory,
    tokenizer: Any,
    *,
    observation_role: str = "tool",
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    add_special_tokens: bool = True,
    action_text_fallback: str = "json",
) -> list[TokenizedTrajectory]:
    """Step-wise assembly of a recorded trajectory: one sequence per step (sampled ids verbatim where present)."""
    if not isinstance(traj, Trajectory):
        raise TypeError(f"expected a Trajectory, got {type(traj).__name__}")
    b = StepwiseBuilder(
        tokenizer,
        observation_role=observation_role,
        chat_template=chat_template,
        template_kwargs=template_kwargs,
        add_special_tokens=add_special_tokens,
    )
    b.start(traj.messages, reset=traj.reset)
    for step in traj.steps:
        if step.action_token_ids is not None:
            b.add_action(
                step.action_token_ids,
                text=step.action_text,
                logprobs=step.action_logprobs,
                temperature=step.sampling_temperature,
            )
        else:
            b.add_action(text=action_text(step, action_text_fallback))
        b.add_observation(step.observation)
    return b.finish(episode_id=traj.episode_id, reward=traj.total_reward if traj.steps else None)
