"""Server-side token ids of an observation's segments (``ObservationTokens``), made as the client would make them."""

from __future__ import annotations

from typing import Any

from ..tokenizer_identity import tokenizer_identity
from ..wire import ObservationTokens, Segment
from .fragment_encoding import fragment_codec


def segment_tokens(tokenizer: Any, segments: list[Segment], name: str | None = None) -> ObservationTokens:
    """Each segment body encoded as a literal mid-sequence fragment (RFC 0003 §4): no special tokens, no
    start-of-document prefix, added-token strings kept as plain text, so every token has exactly one role and
    the ids equal what the client-side assembly produces for the same bodies."""
    texts = [seg.text for seg in segments if seg.text]
    encoded = iter(fragment_codec(tokenizer).encode_bodies(texts))
    ids: list[int] = []
    roles = []
    for seg in segments:
        if seg.text:
            seg_ids = next(encoded)
            ids.extend(seg_ids)
            roles.extend([seg.role] * len(seg_ids))
    return ObservationTokens(tokenizer=tokenizer_identity(tokenizer, name), ids=ids, roles=roles)
