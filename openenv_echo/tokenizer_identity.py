"""Tokenizer identity: a name plus the sha256 fingerprint of the exact tokenizer that made a list of token ids.

Token ids are only meaningful for the tokenizer that made them, so ids travel with a ``TokenizerIdentity``; a
consumer reuses ids only on an exact fingerprint match. Works with any HF tokenizer (fast or slow) without
importing transformers, and never changes the tokenizer object.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import weakref
from typing import Any

from .wire import TokenizerIdentity

_LOCK = threading.Lock()
_CACHE: dict[int, tuple[weakref.ref[Any], int, str]] = {}


def _size(tokenizer: Any) -> int:
    backend = getattr(tokenizer, "backend_tokenizer", None) or tokenizer
    if hasattr(backend, "get_vocab_size"):
        return int(backend.get_vocab_size(with_added_tokens=True))
    return len(tokenizer)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of the tokenizer's serialization without padding/truncation settings (fast tokenizers), or of its
    sorted vocab (others).

    Cached per live tokenizer object (recomputed when tokens are added): computing it serializes the whole
    vocabulary. Nothing is stored on the tokenizer.
    """
    key, size = id(tokenizer), _size(tokenizer)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0]() is tokenizer and hit[1] == size:
            return hit[2]
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
        ref = weakref.ref(tokenizer)
    except TypeError:  # not weak-referenceable: recompute next time
        return digest
    with _LOCK:
        _CACHE[key] = (ref, size, digest)
        for k in [k for k, (r, _, _) in _CACHE.items() if r() is None]:
            del _CACHE[k]
    return digest


def tokenizer_identity(tokenizer: Any, name: str | None = None) -> TokenizerIdentity:
    """``TokenizerIdentity(name, fingerprint)``; the name defaults to the tokenizer's ``name_or_path``."""
    name = name or getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    return _identity(str(name), tokenizer_fingerprint(tokenizer))


@functools.lru_cache(maxsize=256)
def _identity(name: str, fingerprint: str) -> TokenizerIdentity:
    return TokenizerIdentity(name=name, fingerprint=fingerprint)
