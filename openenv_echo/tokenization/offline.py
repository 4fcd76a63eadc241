"""Offline assembly: role masks for a whole conversation rendered at once, with no sampler ids.

For data that has role-tagged text but no sampled ids (SFT-style corpora, trajectories recorded without
``action_token_ids``), the conversation is rendered with the chat template in one go (``rendered.render_parts``:
who wrote each character) and tokenized as the tokenizer tokenizes the rendering, except that bodies are literal
(``rendered.encode_parts``). The special-token text that closes an assistant message (``<|im_end|>``) is
``action``: the model emits it. If the template rewrote content (dropped past ``<think>`` blocks, ``trim``),
characters are aligned with ``difflib`` and ``stats["content_rewritten"]`` is set.

**Straddle policy.** A token's role is that of the UTF-8 bytes it stands for (the byte pieces of an unknown span
divide its bytes; RFC 0003 §7.3, ``role_boundaries.token_roles``). A token whose bytes carry more than one role (BPE merged
across a role boundary, e.g. a body's trailing newline with the template's newline) gets role ``context`` – the
conservative choice, as ``context`` is never a loss target – and is counted once in ``stats["straddled"]``.
Characters not covered by any token's offsets (trimmed whitespace) count for both neighbouring tokens. A control
token (``<|im_end|>``…) only ever comes from the template: ``context``, except the assistant end-of-turn
described above.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..roles import Role
from ..tokenizer_identity import tokenizer_identity
from ..trajectory import Trajectory
from ..wire import Segment
from .fragment_encoding import fragment_codec
from .rendered import TaggedMessage, encode_parts, render_parts
from .template import assistant_eot_text
from .tito import action_text as _action_text
from .tokenized import TokenizedTrajectory, sequence_observation_count

STRADDLE_ROLE = Role.CONTEXT
"""Role given to a token whose characters belong to more than one role (see the module docstring)."""


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
    for step in traj.steps:
        if step.action_text is None and step.action_token_ids is not None and tokenizer is not None:
            codec = fragment_codec(tokenizer)
            ids = list(step.action_token_ids)
            while ids and ids[-1] in codec.special_ids:
                ids.pop()
            text = codec.decode(ids)
        else:
            text = _action_text(step, action_text_fallback)
        out.append(TaggedMessage("assistant", [Segment(role=Role.ACTION, text=text)]))
        out.append(TaggedMessage(observation_role, list(step.observation.segments)))
    return out


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
    eot = assistant_eot_text(tokenizer, chat_template=chat_template, template_kwargs=template_kwargs)
    parts = render_parts(
        tokenizer,
        messages,
        add_generation_prompt=add_generation_prompt,
        chat_template=chat_template,
        template_kwargs=template_kwargs,
        eot=eot,
    )
    if parts.rewritten:
        warnings.warn(
            "the chat template rewrote message content; character roles were aligned with difflib "
            "(stats['content_rewritten']=1)",
            stacklevel=2,
        )
    codec = fragment_codec(tokenizer)
    ids, role_ids, straddled = encode_parts(codec, parts, document_start=True)
    stats = {"straddled": straddled, "content_rewritten": int(parts.rewritten)}
    prefix, suffix = codec.prefix_ids, codec.suffix_ids
    if add_special_tokens and prefix and ids[: len(prefix)].tolist() != prefix:
        ids = np.concatenate([np.asarray(prefix, dtype=np.int64), ids])
        role_ids = np.concatenate([np.full(len(prefix), Role.CONTEXT.code, dtype=np.int8), role_ids])
    if add_special_tokens and suffix and ids[len(ids) - len(suffix) :].tolist() != suffix:
        ids = np.concatenate([ids, np.asarray(suffix, dtype=np.int64)])
        role_ids = np.concatenate([role_ids, np.full(len(suffix), Role.CONTEXT.code, dtype=np.int8)])
    obs_count = sequence_observation_count(role_ids)  # |O|: bodies after the first action (roles.observation_count)
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
