"""Encoding text *fragments* that sit in the middle of a token sequence, faithfully and fast.

Token-in-token-out assembly concatenates ids of pieces encoded one at a time (scaffolding, observation bodies).
A tokenizer's ordinary ``encode`` assumes the text starts a document, which is wrong for a piece in the middle:

* SentencePiece-style tokenizers add a dummy-prefix ``▁`` (``Metaspace`` with ``prepend_scheme`` first/always,
  a ``Prepend`` normalizer), so ``encode("a") + encode("b")`` decodes to ``"a b"``;
  byte-level tokenizers with ``add_prefix_space=True`` do the same;
* post-processors add BOS/EOS.

``FragmentCodec`` clones the tokenizer's pipeline with exactly those start-of-document behaviours switched off
(the same tokenization a piece gets after a special token inside a rendered chat), and decodes without the
decoder's leading-space strip, so concatenating fragment encodings decodes to the concatenated text.

Two encoders: ``encode_scaffold`` recognizes special tokens (template text such as ``<|im_start|>tool\\n``);
``encode_content`` treats special-token strings as plain text, so an observation or action that *contains*
``<|im_end|>`` can never forge a turn boundary or put a special token into a body mask.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any

_LOCK = threading.Lock()
_CACHE: dict[int, tuple[weakref.ref, FragmentCodec]] = {}


def backend_of(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind an HF fast tokenizer (or the object itself if it is one)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    if hasattr(tokenizer, "encode_batch") and hasattr(tokenizer, "to_str"):
        return tokenizer
    raise TypeError(
        f"{type(tokenizer).__name__} has no `backend_tokenizer`: openenv_echo.tokenize needs an HF *fast* "
        "tokenizer (transformers TokenizersBackend / PreTrainedTokenizerFast) or a tokenizers.Tokenizer"
    )


def _midsequence(node: Any) -> Any:
    """Rewrite a serialized pipeline component so it behaves as it does in the middle of a document."""
    if isinstance(node, list):
        return [_midsequence(n) for n in node if not _drop(n)]
    if not isinstance(node, dict):
        return node
    out = {k: _midsequence(v) for k, v in node.items()}
    kind = out.get("type")
    if kind == "Metaspace":
        out["prepend_scheme"] = "never"
        if "add_prefix_space" in out:
            out["add_prefix_space"] = False
    elif kind == "ByteLevel" and "add_prefix_space" in out:
        out["add_prefix_space"] = False
    return out


def _drop(node: Any) -> bool:
    """Components that only exist to add a start-of-document prefix or strip it again on decode."""
    if not isinstance(node, dict):
        return False
    if node.get("type") == "Prepend":
        return True
    return node.get("type") == "Strip" and int(node.get("start", 0)) > 0 and "content" in node


class FragmentCodec:
    """Mid-sequence encoder/decoder for one tokenizer (see the module docstring). Thread-safe, cached."""

    def __init__(self, tokenizer: Any) -> None:
        from tokenizers import Tokenizer

        backend = backend_of(tokenizer)
        data = json.loads(backend.to_str())
        for key in ("normalizer", "pre_tokenizer", "decoder"):
            node = data.get(key)
            if node is None:
                continue
            if _drop(node):
                data[key] = None
            else:
                data[key] = _midsequence(node)
        data["post_processor"] = None
        data["truncation"] = None
        data["padding"] = None
        spec = json.dumps(data)
        self.scaffold = Tokenizer.from_str(spec)
        self.content = Tokenizer.from_str(spec)
        self.content.encode_special_tokens = True
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in backend.get_added_tokens_decoder().items() if t.special
        )
        self.prefix_ids, self.suffix_ids = special_affixes(backend)

    def encode_scaffold(self, text: str) -> list[int]:
        """Template text: special-token strings become special tokens."""
        return self.scaffold.encode(text, add_special_tokens=False).ids if text else []

    def encode_content(self, text: str) -> list[int]:
        """Body text (observation segments, action text): special-token strings stay plain text."""
        return self.content.encode(text, add_special_tokens=False).ids if text else []

    def encode_contents(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode_content`` for many texts in one call into the Rust tokenizer."""
        if not texts:
            return []
        encs = self.content.encode_batch_fast(list(texts), add_special_tokens=False)
        return [e.ids for e in encs]

    def decode(self, ids: Sequence[int]) -> str:
        """Decode a fragment: special tokens kept, no start-of-document space strip."""
        return self.scaffold.decode(list(ids), skip_special_tokens=False)


def special_affixes(backend: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer's post-processor puts before and after a single sequence (BOS / EOS)."""
    plain = backend.encode("a", add_special_tokens=False).ids
    full = backend.encode("a", add_special_tokens=True).ids
    n = len(plain)
    for start in range(len(full) - n + 1):
        if full[start : start + n] == plain:
            return full[:start], full[start + n :]
    return [], []  # a post-processor that rewrites the ids themselves: add nothing


def fragment_codec(tokenizer: Any) -> FragmentCodec:
    """The cached ``FragmentCodec`` of ``tokenizer`` (one per live tokenizer object)."""
    key = id(tokenizer)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0]() is tokenizer:
            return hit[1]
    codec = FragmentCodec(tokenizer)
    try:
        ref = weakref.ref(tokenizer)
    except TypeError:  # not weak-referenceable: do not cache (ids could be reused)
        return codec
    with _LOCK:
        _CACHE[key] = (ref, codec)
        for k in [k for k, (r, _) in _CACHE.items() if r() is None]:
            del _CACHE[k]
    return codec
