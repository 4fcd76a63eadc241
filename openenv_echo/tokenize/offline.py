"""Offline assembly: role masks for a whole conversation rendered at once, with no sampler ids.

For data that has role-tagged text but no sampled ids (SFT-style corpora, trajectories recorded without
``action_token_ids``), the conversation is rendered with the chat template in one go and tokenized with
offsets; each token takes the role of the characters it covers.

Character roles come from rendering the conversation with unique placeholders as message contents: the text
between placeholders is template scaffolding (``context``), and each placeholder is replaced by its message's
segments (each with its role). The special-token text that closes an assistant message (``<|im_end|>``) is
``action``: the model emits it. If the real rendering differs from the substituted one (the template rewrote
content, e.g. dropped past ``<think>`` blocks), characters are aligned with ``difflib`` and
``stats["content_rewritten"]`` is set.

**Straddle policy.** A token whose characters carry more than one role (BPE merged across a role boundary,
e.g. a body's trailing ``\\n`` with the template's ``\\n``) gets role ``context`` – the conservative choice, as
``context`` is never a loss target – and is counted in ``stats["straddled"]``. Characters not covered by any
token's offsets (trimmed whitespace) count for both neighbouring tokens. A special token (``<|im_end|>``…)
is always ``context``, except the assistant end-of-turn described above; one that appears inside content
(a body containing the literal text) is counted in ``stats["special_in_content"]``.
"""

from __future__ import annotations

import difflib
import re
import secrets
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..roles import Role, observation_count
from ..tokenizer_identity import tokenizer_identity
from ..trajectory import Trajectory
from ..wire import Segment
from .fragment import backend_of, fragment_codec
from .template import assistant_eot_text, render
from .tito import action_text as _action_text
from .tokenized import TokenizedTrajectory

STRADDLE_ROLE = Role.CONTEXT
"""Role given to a token whose characters belong to more than one role (see the module docstring)."""

EOT_CODE = 4
"""Internal character code of the assistant end-of-turn text: ``action``, but distinguishable from action
content (a special token inside content is context; the end-of-turn special token is action)."""


@dataclass
class TaggedMessage:
    """A chat message whose content is role-tagged segments; ``extra`` keys go to the template as they are."""

    role: str
    segments: list[Segment]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def content(self) -> str:
        return "".join(s.text for s in self.segments)

    @classmethod
    def coerce(cls, m: TaggedMessage | Mapping[str, Any]) -> TaggedMessage:
        """From a ``TaggedMessage`` or a dict with ``role`` and ``segments`` (or plain ``content`` = context)."""
        if isinstance(m, TaggedMessage):
            return m
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f"a message needs a string 'role', got {m!r}")
        d = dict(m)
        role = d.pop("role")
        if "segments" in d:
            segs = [s if isinstance(s, Segment) else Segment.model_validate(s) for s in d.pop("segments")]
            d.pop("content", None)
        elif isinstance(d.get("content"), str):
            segs = [Segment(role=Role.CONTEXT, text=d.pop("content"))]
        else:
            raise ValueError(f"message {m!r} needs 'segments' or a string 'content'")
        return cls(role, segs, d)


def conversation_from_trajectory(
    traj: Trajectory,
    *,
    tokenizer: Any = None,
    observation_role: str = "tool",
    action_text_fallback: str = "json",
) -> list[TaggedMessage]:
    """The trajectory as tagged messages: initial messages (context), the reset observation (if it has
    segments), then per step an assistant message (action) and an observation message (its segments).

    Action text: ``action_text``; else the sampled ids decoded (needs ``tokenizer``; a trailing end-of-turn
    special token is dropped, the template writes it); else the action as JSON (``action_text_fallback``).
    """
    out: list[TaggedMessage] = []
    for m in traj.messages:
        extra = m.model_dump()
        extra.pop("role")
        extra.pop("content")
        out.append(TaggedMessage(m.role, [Segment(role=Role.CONTEXT, text=m.content)], extra))
    if traj.reset is not None and traj.reset.segments:
        out.append(TaggedMessage(observation_role, list(traj.reset.segments)))
    codec = fragment_codec(tokenizer) if tokenizer is not None else None
    for step in traj.steps:
        if step.action_text is None and step.action_token_ids is not None and codec is not None:
            ids = list(step.action_token_ids)
            while ids and ids[-1] in codec.special_ids:
                ids.pop()
            text = codec.decode(ids)
        else:
            text = _action_text(step, action_text_fallback)
        out.append(TaggedMessage("assistant", [Segment(role=Role.ACTION, text=text)]))
        out.append(TaggedMessage(observation_role, list(step.observation.segments)))
    return out


def char_roles(
    tokenizer: Any,
    messages: Sequence[TaggedMessage],
    *,
    add_generation_prompt: bool = False,
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> tuple[str, bytearray, bool]:
    """The rendered text, one role code per character, and whether the template rewrote content."""
    nonce = secrets.token_hex(4)
    mark = f"\ue000{nonce}"
    for m in messages:
        if mark in m.content:
            raise ValueError("message content contains the placeholder marker; retry")
    kw = {"chat_template": chat_template, "template_kwargs": template_kwargs}
    ph_msgs = [{**m.extra, "role": m.role, "content": f"{mark}{i}\ue001"} for i, m in enumerate(messages)]
    ph_text = render(tokenizer, ph_msgs, add_generation_prompt=add_generation_prompt, **kw)
    eot = assistant_eot_text(tokenizer, **kw)
    pieces: list[str] = []
    roles = bytearray()
    pos = 0
    after_action = False
    ctx = Role.CONTEXT.code
    for match in re.finditer(re.escape(mark) + r"(\d+)\ue001", ph_text):
        scaffold = ph_text[pos : match.start()]
        _append_scaffold(pieces, roles, scaffold, eot if after_action else "")
        m = messages[int(match.group(1))]
        for seg in m.segments:
            pieces.append(seg.text)
            roles.extend(bytes((seg.role.code,)) * len(seg.text))
        after_action = bool(m.segments) and m.segments[-1].role is Role.ACTION
        pos = match.end()
    _append_scaffold(pieces, roles, ph_text[pos:], eot if after_action else "")
    subst = "".join(pieces)
    real = render(
        tokenizer,
        [{**m.extra, "role": m.role, "content": m.content} for m in messages],
        add_generation_prompt=add_generation_prompt,
        **kw,
    )
    if real == subst:
        return real, roles, False
    aligned = bytearray(bytes((ctx,)) * len(real))
    sm = difflib.SequenceMatcher(None, subst, real, autojunk=False)
    for a, b, size in sm.get_matching_blocks():
        aligned[b : b + size] = roles[a : a + size]
    return real, aligned, True


def _append_scaffold(pieces: list[str], roles: bytearray, text: str, eot: str) -> None:
    n_act = len(eot) if eot and text.startswith(eot) else 0
    pieces.append(text)
    roles.extend(bytes((EOT_CODE,)) * n_act)
    roles.extend(bytes((Role.CONTEXT.code,)) * (len(text) - n_act))


def tokenize_offline(
    conversation: Trajectory | Sequence[TaggedMessage | Mapping[str, Any]],
    tokenizer: Any,
    *,
    observation_role: str = "tool",
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    add_generation_prompt: bool = False,
    add_special_tokens: bool = True,
    action_text_fallback: str = "json",
) -> TokenizedTrajectory:
    """Offline assembly (see the module docstring) of a ``Trajectory`` or a list of tagged messages."""
    episode_id = reward = None
    if isinstance(conversation, Trajectory):
        episode_id = conversation.episode_id
        reward = conversation.total_reward if conversation.steps else None
        messages = conversation_from_trajectory(
            conversation,
            tokenizer=tokenizer,
            observation_role=observation_role,
            action_text_fallback=action_text_fallback,
        )
    else:
        messages = [TaggedMessage.coerce(m) for m in conversation]
    if not messages:
        raise ValueError("nothing to tokenize: the conversation has no messages")
    text, croles, rewritten = char_roles(
        tokenizer,
        messages,
        add_generation_prompt=add_generation_prompt,
        chat_template=chat_template,
        template_kwargs=template_kwargs,
    )
    if rewritten:
        warnings.warn(
            "the chat template rewrote message content; character roles were aligned with difflib "
            "(stats['content_rewritten']=1)",
            stacklevel=2,
        )
    backend = backend_of(tokenizer)
    codec = fragment_codec(tokenizer)
    enc = backend.encode(text, add_special_tokens=False)
    ids = np.asarray(enc.ids, dtype=np.int64)
    role_ids, stats = token_roles(text, croles, enc.offsets, ids, codec.special_ids)
    stats["content_rewritten"] = int(rewritten)
    prefix, suffix = codec.prefix_ids, codec.suffix_ids
    if add_special_tokens and prefix and ids[: len(prefix)].tolist() != prefix:
        ids = np.concatenate([np.asarray(prefix, dtype=np.int64), ids])
        role_ids = np.concatenate([np.full(len(prefix), Role.CONTEXT.code, dtype=np.int8), role_ids])
    if add_special_tokens and suffix and ids[len(ids) - len(suffix) :].tolist() != suffix:
        ids = np.concatenate([ids, np.asarray(suffix, dtype=np.int64)])
        role_ids = np.concatenate([role_ids, np.full(len(suffix), Role.CONTEXT.code, dtype=np.int8)])
    obs_count = int(observation_count(role_ids))  # |O|: bodies after the first action (roles.observation_count)
    return TokenizedTrajectory(
        input_ids=ids,
        role_ids=role_ids,
        obs_count=obs_count,
        method="offline",
        tokenizer=tokenizer_identity(tokenizer),
        episode_id=episode_id,
        reward=reward,
        stats=stats,
    )


def token_roles(
    text: str,
    croles: bytearray,
    offsets: Sequence[tuple[int, int]],
    ids: np.ndarray,
    special_ids: frozenset[int],
) -> tuple[np.ndarray, dict[str, int]]:
    """One role per token from per-character roles and token offsets (vectorized; policy in module doc)."""
    n = len(offsets)
    ctx = Role.CONTEXT.code
    if n == 0:
        return np.zeros(0, dtype=np.int8), {"straddled": 0, "special_in_content": 0}
    cr = np.frombuffer(bytes(croles), dtype=np.int8)
    off = np.asarray(offsets, dtype=np.int64).reshape(n, 2)
    s, e = off[:, 0], off[:, 1]
    prev_e = np.concatenate([[0], e[:-1]])
    next_s = np.concatenate([s[1:], [len(text)]])
    a = np.minimum(s, prev_e)  # uncovered characters count for both neighbours
    b = np.maximum(e, next_s)
    b = np.maximum(a, np.minimum(b, len(text)))
    nonempty = b > a
    if len(cr):
        change = np.zeros(len(cr), dtype=np.int64)
        change[1:] = cr[1:] != cr[:-1]
        cum = np.cumsum(change)
        last = np.clip(b - 1, 0, len(cr) - 1)
        first = np.clip(a, 0, len(cr) - 1)
        uniform = nonempty & (cum[last] - cum[first] == 0)
        role = np.where(uniform, cr[first], ctx).astype(np.int8)
    else:
        uniform = np.zeros(n, dtype=bool)
        role = np.full(n, ctx, dtype=np.int8)
    straddled = nonempty & ~uniform
    is_special = np.isin(ids, np.fromiter(special_ids, dtype=np.int64, count=len(special_ids)))
    # a special token keeps a role only as the assistant end-of-turn (action); anywhere else it is context
    special_content = is_special & (role != ctx) & (role != EOT_CODE)
    role = np.where(is_special & (role != EOT_CODE), ctx, role)
    role = np.where(role == EOT_CODE, Role.ACTION.code, role).astype(np.int8)
    stats = {"straddled": int(straddled.sum()), "special_in_content": int(special_content.sum())}
    return role, stats
