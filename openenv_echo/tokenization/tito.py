"""Token-in-token-out (TITO) assembly: the exact ids a policy was sampled on, with a role per token.

Live rollout::

    b = TitoBuilder(tokenizer)                       # probes the chat template once (prefix-stability check)
    prompt = b.start(messages, reset=reset_obs)      # rendered once with the template; all context
    while not done:
        action_ids = sampler(prompt)                 # the sampler's ids, incl. the end-of-turn token it emitted
        b.add_action(action_ids)                     # appended verbatim: action
        obs = env.step(...)
        prompt += b.add_observation(obs)             # scaffold (context) + body (env_output/warning) + gen prompt
    tt = b.finish()                                  # TokenizedTrajectory

Each call costs time proportional to what it appends (the conversation is never re-rendered), so a whole
rollout is linear in its length. ``tokenize_trajectory`` does the same for a recorded ``Trajectory``, using
``action_token_ids`` where present and encoding all bodies in one batched call.

Bodies are encoded per segment with ``FragmentCodec.encode_body`` (mid-sequence, literal: added-token strings
are plain text) so every token has exactly one role; observation ``tokens`` sent by the server are used verbatim
when their tokenizer fingerprint equals this tokenizer's.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..roles import Role
from ..tokenizer_identity import tokenizer_identity
from ..trajectory import ChatMessage, ObservationRecord, Trajectory
from ..wire import ObservationTokens, Segment
from .fragment_encoding import backend_of, fragment_codec
from .rendered import Parts, TaggedMessage, encode_parts, render_parts
from .template import TemplateNotPrefixStable, probe_template
from .tokenized import TokenizedTrajectory, sequence_observation_count

_CTX = Role.CONTEXT.code
_ACT = Role.ACTION.code
_CTX_B = bytes((_CTX,))
_ROLE_B = {r: bytes((r.code,)) for r in Role}

ObsParts = tuple[list[Segment] | None, ObservationTokens | None]
_Prepared = tuple[ObsParts, list[list[int]] | None]
"""An observation already read (``observation_parts``) and its bodies already encoded (None: not yet)."""


def chat_messages(messages: Sequence[ChatMessage | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Plain dicts for the template; each needs a string ``role`` and ``content``."""
    out = []
    for i, m in enumerate(messages):
        d = m.model_dump() if isinstance(m, ChatMessage) else dict(m)
        if not isinstance(d.get("role"), str) or not isinstance(d.get("content"), str):
            raise ValueError(f"messages[{i}] needs string 'role' and 'content', got {d!r}")
        out.append(d)
    return out


def observation_parts(obs: Any) -> tuple[list[Segment] | None, ObservationTokens | None]:
    """(segments, tokens) of an ``ObservationRecord``/``Observation``/``StepResult``, a list of ``Segment``s,
    an ``ObservationTokens``, or a dict with ``segments``/``tokens`` keys."""
    if type(obs) is ObservationRecord:  # the common case, first
        return (None if obs.segments is None else list(obs.segments)), obs.tokens
    if isinstance(obs, ObservationTokens):
        return None, obs
    if isinstance(obs, Mapping):
        segs = obs.get("segments")
        toks = obs.get("tokens")
        segments = None if segs is None else [s if isinstance(s, Segment) else Segment.model_validate(s) for s in segs]
        tokens = (
            None
            if toks is None
            else (toks if isinstance(toks, ObservationTokens) else ObservationTokens.model_validate(toks))
        )
        if segments is None and tokens is None:
            raise ValueError("observation dict has neither 'segments' nor 'tokens'")
        return segments, tokens
    if hasattr(obs, "segments"):
        segs = obs.segments
        return (None if segs is None else list(segs)), getattr(obs, "tokens", None)
    if isinstance(obs, Sequence) and not isinstance(obs, (str, bytes)):
        segs = list(obs)
        for i, s in enumerate(segs):
            if not isinstance(s, Segment):
                raise TypeError(f"observation[{i}] is {type(s).__name__}, expected Segment")
        return segs, None
    raise TypeError(f"cannot read an observation from {type(obs).__name__}")


def _extra(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k not in ("role", "content")}


def _check_segments(segments: Sequence[Segment]) -> None:
    for s in segments:
        if s.role is Role.ACTION:
            raise ValueError("an observation segment has role 'action': only the policy writes actions")


class TitoBuilder:
    """Incremental token-in-token-out assembly for one rollout (see the module docstring).

    ``observation_role`` is the chat role observations are rendered as; ``add_special_tokens`` adds what the
    tokenizer's post-processor adds (e.g. a BOS), unless the template already wrote it.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        observation_role: str = "tool",
        chat_template: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        add_special_tokens: bool = True,
        check_thinking: bool = True,
        name: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.scaffold = probe_template(
            tokenizer,
            observation_role,
            chat_template=chat_template,
            template_kwargs=template_kwargs,
            check_thinking=check_thinking,
        )
        self.codec = fragment_codec(tokenizer)
        self.backend = backend_of(tokenizer)
        self.identity = tokenizer_identity(tokenizer, name)
        self.vocab_size = int(self.backend.get_vocab_size(with_added_tokens=True))
        self.add_special_tokens = add_special_tokens
        self._chat_template = chat_template
        self._template_kwargs = dict(template_kwargs or {})
        self._ids: list[int] = []
        self._roles = bytearray()
        self._state = "new"
        self._gen_start: int | None = None
        self._logprobs: list[tuple[int, list[float]]] = []  # (position, the sampler's logprobs of an action)
        self.temperature: float | None = None
        self._pending_close: list[int] = []
        self.stats: dict[str, int] = {
            "server_tokens_used": 0,
            "server_tokens_rejected": 0,
            "unterminated_actions": 0,
            "actions_from_text": 0,
        }

    # -- state -------------------------------------------------------------------------------------------
    @property
    def ids(self) -> list[int]:
        """A copy of all ids so far (the next prompt, while awaiting an action)."""
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def _need(self, state: str, call: str) -> None:
        if self._state != state:
            order = "start() -> (add_action() -> add_observation())* -> finish()"
            raise RuntimeError(f"{call} is not allowed now (state {self._state!r}); call order: {order}")

    def _extend(self, ids: Sequence[int], code: int) -> None:
        self._ids.extend(ids)
        self._roles.extend(bytes((code,)) * len(ids))

    # -- API -------------------------------------------------------------------------------------------------
    def start(
        self,
        messages: Sequence[ChatMessage | Mapping[str, Any]] = (),
        reset: Any = None,
        *,
        _prepared: _Prepared | None = None,
    ) -> list[int]:
        """Render the initial messages (and the reset observation, if it has content) once; returns the
        prompt ids, ending with the generation prompt. All ``context`` except the reset body."""
        self._need("new", "start()")
        msgs = chat_messages(messages)
        tagged = [TaggedMessage(m["role"], [Segment(role=Role.CONTEXT, text=m["content"])], _extra(m)) for m in msgs]
        if reset is not None:
            obs_parts, encoded = _prepared if _prepared is not None else (observation_parts(reset), None)
            body_ids, body_roles = self._body(obs_parts, encoded)
            segments = obs_parts[0]
            if body_ids or segments:
                tagged.append(
                    TaggedMessage(self.scaffold.observation_role, [], ids=body_ids, id_roles=bytes(body_roles))
                )
        gp = self.scaffold.generation_prompt
        if tagged:
            parts = render_parts(
                self.tokenizer,
                tagged,
                add_generation_prompt=True,
                chat_template=self._chat_template,
                template_kwargs=self._template_kwargs,
            )
            if parts.rewritten:
                raise TemplateNotPrefixStable(
                    f"the {self.scaffold.template_name} rewrites the initial messages' content (e.g. trims it); "
                    "token-in-token-out needs it verbatim: use mode='stepwise' or tokenize_offline"
                )
        else:  # nothing to render (transformers refuses empty conversations): just the generation prompt
            parts = Parts(gp, bytearray(len(gp)), bytearray(len(gp)), [], False)
        split_gp = (
            bool(gp) and parts.text.endswith(gp) and all(p <= len(parts.text) - len(gp) for p, _, _ in parts.opaque)
        )
        if split_gp:
            k = len(parts.text) - len(gp)
            parts = Parts(parts.text[:k], parts.roles[:k], parts.kinds[:k], parts.opaque, False)
        ids, roles, _ = encode_parts(self.codec, parts, document_start=True)
        prefix = self.codec.prefix_ids
        if self.add_special_tokens and prefix and ids[: len(prefix)].tolist() != prefix:
            self._extend(prefix, _CTX)
        self._ids.extend(ids.tolist())
        self._roles.extend(roles.astype(np.uint8).tobytes())
        self._gen_start = len(self._ids) if split_gp else None
        if split_gp:
            self._extend(self.scaffold.generation_prompt_ids, _CTX)
        self._state = "awaiting_action"
        return list(self._ids)

    def add_action(
        self,
        ids: Sequence[int] | None = None,
        *,
        text: str | None = None,
        logprobs: Sequence[float] | None = None,
        temperature: float | None = None,
    ) -> list[int]:
        """Append the sampled action ids verbatim (``action``), including the end-of-turn token the model
        emitted. Without ids, ``text`` is encoded and the template's end-of-turn token appended (as action:
        the model should learn to stop). ``logprobs`` (one per sampled id) and ``temperature`` are the
        sampler's; they are carried to ``TokenizedTrajectory.sampler_logprobs``. Returns the appended ids."""
        self._need("awaiting_action", "add_action()")
        if logprobs is not None:
            if ids is None or len(logprobs) != len(ids):
                raise ValueError("logprobs need the sampled ids, one per id")
            self._logprobs.append((len(self._ids), [float(v) for v in logprobs]))
        if temperature is not None:
            if self.temperature is not None and self.temperature != temperature:
                raise ValueError(
                    f"actions of one sequence were sampled at two temperatures ({self.temperature}, {temperature})"
                )
            self.temperature = float(temperature)
        if ids is None:
            if text is None:
                raise ValueError("add_action needs the sampled ids or the action text")
            if not isinstance(text, str):
                raise TypeError(f"action text must be str, got {type(text).__name__}")
            ids = self.codec.encode_action(text) + list(self.scaffold.eot_ids)
            self.stats["actions_from_text"] += 1
        else:
            ids = self._validate_ids(ids)
        self._extend(ids, _ACT)
        self._gen_start = None
        self._pending_close, terminated = self.scaffold.close_after(ids)
        if not terminated:
            self.stats["unterminated_actions"] += 1
        self._state = "awaiting_observation"
        return list(ids)

    def _validate_ids(self, ids: Sequence[int]) -> list[int]:
        if isinstance(ids, (str, bytes)):
            raise TypeError("action ids must be a sequence of ints, not a string")
        out = list(ids)
        # common case in C: plain ints (not bools) inside the vocabulary
        if all(type(i) is int for i in out) and (not out or (min(out) >= 0 and max(out) < self.vocab_size)):
            return out
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"action ids must be ints, got {type(i).__name__}")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"action id {i} is outside the tokenizer's vocabulary (size {self.vocab_size})")
            out.append(int(i))
        return out

    def add_observation(self, obs: Any, *, _prepared: _Prepared | None = None) -> list[int]:
        """Close the assistant turn and add the observation: scaffolding (context) around the segment bodies
        (their own roles), then the generation prompt. Returns the ids appended (prompt delta)."""
        self._need("awaiting_observation", "add_observation()")
        obs_parts, encoded = _prepared if _prepared is not None else (observation_parts(obs), None)
        body_ids, body_roles = self._body(obs_parts, encoded)
        ids, roles, sc = self._ids, self._roles, self.scaffold
        start = len(ids)
        ids += self._pending_close
        ids += sc.obs_open_ids
        ids += body_ids
        ids += sc.obs_close_ids
        self._gen_start = len(ids)
        ids += sc.generation_prompt_ids
        roles += _CTX_B * (len(self._pending_close) + len(sc.obs_open_ids))
        roles += body_roles
        roles += _CTX_B * (len(sc.obs_close_ids) + len(sc.generation_prompt_ids))
        self._pending_close = []
        self._state = "awaiting_action"
        return self._ids[start:]

    def finish(
        self,
        *,
        final_generation_prompt: bool = False,
        episode_id: str | None = None,
        reward: float | None = None,
    ) -> TokenizedTrajectory:
        """The assembled sequence. A trailing generation prompt (after the last observation) is dropped unless
        ``final_generation_prompt``; an episode that ends on an action gets its turn closed (context)."""
        if self._state == "new":
            raise RuntimeError("finish() before start()")
        if self._state == "finished":
            raise RuntimeError("finish() was already called; use a new TitoBuilder per rollout")
        if self._state == "awaiting_observation":
            self._extend(self._pending_close, _CTX)
        elif not final_generation_prompt and self._gen_start is not None:
            del self._ids[self._gen_start :]
            del self._roles[self._gen_start :]
        suffix = self.codec.suffix_ids
        if self.add_special_tokens and suffix and self._ids[-len(suffix) :] != suffix:
            self._extend(suffix, _CTX)
        self._state = "finished"
        role_ids = np.frombuffer(bytes(self._roles), dtype=np.int8).copy()
        logp = None
        if self._logprobs:
            logp = np.full(len(self._ids), np.nan, dtype=np.float32)
            for pos, values in self._logprobs:
                logp[pos : pos + len(values)] = values
        return TokenizedTrajectory(
            input_ids=np.fromiter(self._ids, dtype=np.int64, count=len(self._ids)),
            role_ids=role_ids,
            obs_count=sequence_observation_count(self._roles),  # |O| of the whole, untruncated sequence
            method="tito",
            tokenizer=self.identity,
            episode_id=episode_id,
            reward=reward,
            stats=dict(self.stats),
            sampler_logprobs=logp,
            sampling_temperature=self.temperature,
        )

    # -- bodies ----------------------------------------------------------------------------------------------
    def usable_tokens(self, obs: Any) -> bool:
        """True when ``obs`` carries server tokens made by this exact tokenizer (fingerprint match)."""
        _, tokens = observation_parts(obs)
        return tokens is not None and tokens.tokenizer.fingerprint == self.identity.fingerprint

    def _body(self, parts: ObsParts, encoded: list[list[int]] | None) -> tuple[list[int], bytearray]:
        """Ids and role codes of an observation's bodies (``encoded``: its segments' ids, if already encoded)."""
        segments, tokens = parts
        if tokens is not None:
            if tokens.tokenizer.fingerprint == self.identity.fingerprint:
                if Role.ACTION in tokens.roles:
                    raise ValueError("observation tokens have role 'action': only the policy writes actions")
                self.stats["server_tokens_used"] += 1
                return list(tokens.ids), bytearray(r.code for r in tokens.roles)
            if segments is None:
                raise ValueError(
                    f"observation tokens were made by tokenizer {tokens.tokenizer.name!r} (fingerprint "
                    f"{tokens.tokenizer.fingerprint[:12]}…), not this one ({self.identity.fingerprint[:12]}…), "
                    "and the observation has no segments to encode instead"
                )
            if self.stats["server_tokens_rejected"] == 0:
                warnings.warn(
                    f"ignoring server tokens from a different tokenizer ({tokens.tokenizer.name!r}); "
                    "re-encoding the segments",
                    stacklevel=3,
                )
            self.stats["server_tokens_rejected"] += 1
        segs = [s for s in (segments or []) if s.text]
        _check_segments(segs)
        enc = encoded if encoded is not None else self.codec.encode_bodies([s.text for s in segs])
        if len(enc) != len(segs):
            raise AssertionError("pre-encoded bodies do not match the segments")
        ids: list[int] = []
        roles = bytearray()
        for seg, seg_ids in zip(segs, enc):
            ids += seg_ids
            roles += _ROLE_B[seg.role] * len(seg_ids)
        return ids, roles


def action_text(step: Any, fallback: str = "json") -> str:
    """The policy's text for a recorded step: ``action_text``, else (``fallback="json"``) the action as JSON."""
    if step.action_text is not None:
        return str(step.action_text)
    if fallback == "json":
        return json.dumps(step.action, ensure_ascii=False)
    raise ValueError("a step has neither action_token_ids nor action_text (set action_text_fallback='json')")


def tokenize_trajectory(
    traj: Trajectory,
    tokenizer: Any,
    *,
    observation_role: str = "tool",
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    add_special_tokens: bool = True,
    final_generation_prompt: bool = False,
    action_text_fallback: str = "json",
) -> TokenizedTrajectory:
    """TITO assembly of a recorded trajectory: ``action_token_ids`` verbatim where present (else the action
    text encoded + end-of-turn), server ``tokens`` verbatim on a fingerprint match, all other bodies encoded
    in one batched call. Raises ``TemplateNotPrefixStable`` for templates TITO cannot follow."""
    if not isinstance(traj, Trajectory):
        raise TypeError(f"expected a Trajectory, got {type(traj).__name__}")
    if action_text_fallback not in ("json", "error"):
        raise ValueError("action_text_fallback must be 'json' or 'error'")
    b = TitoBuilder(
        tokenizer,
        observation_role=observation_role,
        chat_template=chat_template,
        template_kwargs=template_kwargs,
        add_special_tokens=add_special_tokens,
    )
    # Read every observation once and collect every text to encode, in order, for one batched call each.
    texts: list[str] = []
    act_texts: list[str] = []
    fingerprint = b.identity.fingerprint

    def read(obs: Any) -> tuple[ObsParts, tuple[int, int] | None]:
        parts = observation_parts(obs)
        segments, tokens = parts
        if tokens is not None and tokens.tokenizer.fingerprint == fingerprint:
            return parts, None  # server tokens are used verbatim
        segs = [s.text for s in segments or () if s.text]
        texts.extend(segs)
        return parts, (len(texts) - len(segs), len(texts))

    reset = read(traj.reset) if traj.reset is not None else None
    obs = [read(step.observation) for step in traj.steps]
    act: list[int | None] = []  # per step: index of its action text, None when it has sampled ids
    for st in traj.steps:
        if st.action_token_ids is None:
            act_texts.append(action_text(st, action_text_fallback))
        act.append(None if st.action_token_ids is not None else len(act_texts) - 1)
    encoded = b.codec.encode_bodies(texts)
    encoded_actions = b.codec.encode_actions(act_texts)

    def prepared(read_obs: tuple[ObsParts, tuple[int, int] | None]) -> _Prepared:
        parts, span = read_obs
        return parts, None if span is None else encoded[span[0] : span[1]]

    if reset is not None:
        b.start(traj.messages, reset=traj.reset, _prepared=prepared(reset))
    else:
        b.start(traj.messages)
    eot = list(b.scaffold.eot_ids)
    for step, a, o in zip(traj.steps, act, obs):
        if a is None:
            b.add_action(step.action_token_ids, logprobs=step.action_logprobs, temperature=step.sampling_temperature)
        else:
            b.add_action(encoded_actions[a] + eot)
            b.stats["actions_from_text"] += 1
        b.add_observation(step.observation, _prepared=prepared(o))
    return b.finish(
        final_generation_prompt=final_generation_prompt,
        episode_id=traj.episode_id,
        reward=traj.total_reward if traj.steps else None,
    )
