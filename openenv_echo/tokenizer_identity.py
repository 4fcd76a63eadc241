"""Tokenizer identity and server-side segment tokenization.

Token ids are only meaningful for the exact tokenizer that made them, so ids travel with a
``TokenizerIdentity`` whose fingerprint is the sha256 of the tokenizer's canonical serialization; a consumer
reuses ids only on an exact fingerprint match. Works with any HF tokenizer (fast or slow) without importing
transformers.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .wire import ObservationTokens, Segment, TokenizerIdentity


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of the tokenizer's serialization without padding/truncation settings (fast tokenizers), or of its
    sorted vocab (others).

    Cached on the tokenizer object: computing it serializes the whole vocabulary.
    """
    cached = getattr(tokenizer, "_openenv_echo_fingerprint", None)
    if cached is not None:
        return cached
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None and hasattr(tokenizer, "to_str"):  # a raw `tokenizers.Tokenizer`
        backend = tokenizer
    if backend is not None:
        data = json.loads(backend.to_str())
        data.pop("padding", None)  # runtime settings, not the mapping text -> ids
        data.pop("truncation", None)
        payload = json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8")
    else:
        payload = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode("utf-8")
    digest = hashlib.sha256(payload).hexdigest()
    try:
        tokenizer._openenv_echo_fingerprint = digest
    except AttributeError:  # objects that refuse new attributes just recompute
        pass
    return digest


def tokenizer_identity(tokenizer: Any, name: str | None = None) -> TokenizerIdentity:
    name = name or getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    return TokenizerIdentity(name=str(name), fingerprint=tokenizer_fingerprint(tokenizer))


def segment_tokens(tokenizer: Any, segments: list[Segment], name: str | None = None) -> ObservationTokens:
    """Each segment body encoded as a mid-sequence fragment (RFC 0003 §4): no special tokens, no start-of-document
    prefix space, special-token strings kept literal, so every token has exactly one role and the ids equal what
    the client-side assembly would produce for the same bodies."""
    from .tokenize.fragment import fragment_codec

    texts = [seg.text for seg in segments if seg.text]
    encoded = iter(fragment_codec(tokenizer).encode_contents(texts))
    ids: list[int] = []
    roles = []
    for seg in segments:
        if seg.text:
            seg_ids = next(encoded)
            ids.extend(seg_ids)
            roles.extend([seg.role] * len(seg_ids))
    return ObservationTokens(tokenizer=tokenizer_identity(tokenizer, name), ids=ids, roles=roles)
