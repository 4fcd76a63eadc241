"""Encoding text *fragments* that sit in the middle of a token sequence: faithfully, literally, and fast.

Token-in-token-out assembly concatenates ids of pieces encoded one at a time (scaffolding, bodies). A
tokenizer's ordinary ``encode`` assumes the text starts a document, which is wrong for a piece in the middle:

* SentencePiece-style tokenizers add a dummy-prefix ``▁`` (``Metaspace`` with ``prepend_scheme`` first/always,
  a ``Prepend`` normalizer), so ``encode("a") + encode("b")`` decodes to ``"a b"``;
  byte-level tokenizers with ``add_prefix_space=True`` do the same;
* post-processors add BOS/EOS.

``FragmentCodec`` clones the tokenizer's pipeline (from its serialization, so it never reads or changes the
caller's tokenizer object, its padding, truncation or ``split_special_tokens`` settings) with exactly those
start-of-document behaviours switched off, and decodes without the decoder's leading-space strip, so
concatenating fragment encodings decodes to the concatenated text.

Three encoders, by who wrote the text:

* ``encode_scaffold`` – the chat template's own text: special and added tokens are recognized (``<|im_start|>``);
* ``encode_body`` – anything an environment, a user or a system prompt wrote (observation segments, message
  contents): **literal**. No added token of the tokenizer (special or not) is ever produced, so a body that
  prints ``<|im_end|>`` or ``</tool_response>`` cannot forge a turn boundary;
* ``encode_action`` – the policy's own text when no sampled ids exist: special tokens are literal, the model's
  non-special added tokens (``<think>``, ``<tool_call>``…) are its vocabulary and stay recognized.

Literal encodings are checked: a vocabulary that can still produce a control id from plain text (a Unigram
model holding ``</s>`` as a piece, BPE merges that spell a special token) has such tokens re-encoded one
character at a time.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

_LOCK = threading.Lock()
_CACHE: dict[int, tuple[weakref.ref[Any], int, FragmentCodec]] = {}
_SPLIT_MEMO_MAX = 4096


def backend_of(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind an HF fast tokenizer (or the object itself if it is one)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    if hasattr(tokenizer, "encode_batch") and hasattr(tokenizer, "to_str"):
        return tokenizer
    raise TypeError(
        f"{type(tokenizer).__name__} has no `backend_tokenizer`: openenv_echo.tokenization needs an HF *fast* "
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


def _tokenizer(data: dict[str, Any], *, literal: str | None) -> Any:
    """A ``tokenizers.Tokenizer`` from serialized ``data``; ``literal`` = None (all added tokens recognized),
    ``"special"`` (special tokens are plain text) or ``"all"`` (every added token is plain text)."""
    from tokenizers import Tokenizer

    d = dict(data)
    if literal == "all":
        d["added_tokens"] = [{**t, "special": True} for t in d.get("added_tokens") or []]
    tok = Tokenizer.from_str(json.dumps(d))
    if literal is not None:
        tok.encode_special_tokens = True
    return tok


_SPLITTERS = {"Split", "Digits", "Punctuation", "UnicodeScripts"}
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _pre_kind(node: Any) -> str | None:
    """How a serialized pre-tokenizer rewrites text, if it rewrites it one character at a time and drops
    nothing: ``"bytes"`` (ByteLevel: one symbol per UTF-8 byte), ``"metaspace:<c>"`` (spaces become ``c``),
    ``"plain"`` (only splits); None for anything else."""
    if node is None:
        return "plain"
    kind = node.get("type") if isinstance(node, dict) else None
    if kind == "Sequence":
        kinds = {_pre_kind(n) for n in node.get("pretokenizers") or []} - {"plain"}
        return None if None in kinds or len(kinds) > 1 else (kinds.pop() if kinds else "plain")
    if kind == "ByteLevel":
        return "bytes"
    if kind == "Metaspace" and len(str(node.get("replacement", ""))) == 1:
        return f"metaspace:{node['replacement']}"
    if kind in _SPLITTERS and str(node.get("behavior", "")).lower() != "removed":
        return "plain"
    return None


def piece_byte_lengths(
    data: dict[str, Any], size: int, not_fixed: Sequence[int]
) -> tuple[np.ndarray, str, bool] | None:
    """For a mid-sequence pipeline ``data`` with a BPE or Unigram vocabulary: an int32 array of how many UTF-8
    bytes of text each id spells (a byte-fallback piece ``<0xNN>`` one byte, a ByteLevel token one per symbol;
    -1: not fixed, e.g. the unknown token and ``not_fixed`` ids), the character the pre-tokenizer writes for a
    space ("" if none), and whether the table is *exact*: the pipeline rewrites text one character at a time and
    drops nothing (no normalizer; ByteLevel, Metaspace or plain splits; no subword affixes), so a run's ids add
    up to its own byte length. None for other models. ``role_boundaries`` places role boundaries with it (RFC 0003 §7.3)."""
    pre = _pre_kind(data.get("pre_tokenizer"))
    model = data.get("model") or {}
    vocab = model.get("vocab")
    if model.get("type") == "BPE" and isinstance(vocab, dict):
        pieces: Any = vocab.items()
    elif model.get("type") == "Unigram" and isinstance(vocab, list):
        pieces = ((v[0], i) for i, v in enumerate(vocab))
    else:
        return None
    affixes = bool(model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"))
    exact = data.get("normalizer") is None and pre is not None and not affixes
    pre = pre or "plain"
    space = pre.split(":", 1)[1] if pre.startswith("metaspace:") else ""
    byte_fallback = bool(model.get("byte_fallback"))
    out = np.full(size, -1, dtype=np.int32)
    for piece, i in pieces:
        if not 0 <= i < size:
            continue
        if byte_fallback and _BYTE_TOKEN.fullmatch(piece):
            n = 1
        elif pre == "bytes":
            n = len(piece)
        else:
            n = len((piece.replace(space, " ") if space else piece).encode("utf-8"))
        out[i] = n if n > 0 else -1
    out[[i for i in not_fixed if 0 <= i < size]] = -1
    return out, space, exact


def _model_can_spell(model: dict[str, Any], pieces: dict[int, str]) -> frozenset[int]:
    """Control ids the *model* itself can produce from plain text (guarded by re-encoding)."""
    kind = model.get("type")
    vocab = model.get("vocab")
    if kind == "BPE" and isinstance(vocab, dict):
        merged = set()
        for m in model.get("merges") or []:
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            merged.add(a + b)
        return frozenset(i for i, s in pieces.items() if vocab.get(s) == i and (s in merged or len(s) == 1))
    if kind == "Unigram" and isinstance(vocab, list):
        return frozenset(i for i, s in pieces.items() if i < len(vocab) and vocab[i][0] == s)
    if isinstance(vocab, dict):  # WordPiece / WordLevel: a word maps to its id
        return frozenset(i for i, s in pieces.items() if vocab.get(s) == i)
    return frozenset(pieces)


class FragmentCodec:
    """Mid-sequence encoders/decoder for one tokenizer (see the module docstring). Thread-safe, cached."""

    def __init__(self, tokenizer: Any) -> None:
        backend = backend_of(tokenizer)
        data = json.loads(backend.to_str())
        data["post_processor"] = None
        data["truncation"] = None
        data["padding"] = None
        mid = dict(data)
        for key in ("normalizer", "pre_tokenizer", "decoder"):
            node = mid.get(key)
            if node is not None:
                mid[key] = None if _drop(node) else _midsequence(node)
        decoder = backend.get_added_tokens_decoder()
        self.vocab_size = int(backend.get_vocab_size(with_added_tokens=True))
        self.special_ids: frozenset[int] = frozenset(i for i, t in decoder.items() if t.special)
        """Ids of special tokens (``special=True``): never produced from action text."""
        self.added_ids: frozenset[int] = frozenset(decoder)
        """Ids of all added tokens (special or not): never produced from body text (the unknown-text token
        ``unk_id`` excepted: it stands for text the vocabulary cannot hold)."""
        self.scaffold = _tokenizer(mid, literal=None)
        self.body = _tokenizer(mid, literal="all")
        self.body_document = _tokenizer(data, literal="all")  # a document's first piece (offline assembly)
        self.action = _tokenizer(mid, literal="special")
        model = data.get("model") or {}
        unk = model.get("unk_id") if model.get("type") == "Unigram" else None
        if unk is None and isinstance(model.get("unk_token"), str):
            unk = backend.token_to_id(model["unk_token"])
        self.unk_id: int | None = unk
        """The model's unknown-text token: what literal text the vocabulary cannot hold becomes (not a control)."""
        can_spell = _model_can_spell(model, {i: t.content for i, t in decoder.items()})
        self._guard_body = can_spell  # added ids the model can spell: re-encode when they show up
        self._guard_action = can_spell & self.special_ids
        lengths = piece_byte_lengths(mid, self.vocab_size, [*decoder, *([] if unk is None else [unk])])
        self.piece_bytes: np.ndarray | None = lengths[0] if lengths is not None else None
        """Bytes of text each id spells (``piece_byte_lengths``; -1 unknown), for any BPE or Unigram vocabulary:
        tokens that share one span of offsets (byte pieces of an unknown span) divide its bytes with it."""
        self.token_bytes: np.ndarray | None = lengths[0] if lengths is not None and lengths[2] else None
        """``piece_bytes`` where it is exact for whole runs (a character-wise pipeline), else None."""
        self.space_symbol = lengths[1] if lengths is not None else ""
        self.whole_bytes: np.ndarray | None = None
        """``token_bytes`` with each added token's own length: a whole rendering's ids add up to its byte length.
        None where one encoding of the whole text cannot stand for its runs' (``rendered.encode_whole``): no
        exact table, an added token that strips or matches words, a model that spells control ids."""
        plain_added = all(
            not (t.lstrip or t.rstrip or t.single_word) and (not t.normalized or data.get("normalizer") is None)
            for t in decoder.values()
        )
        self.same_start = all(mid.get(k) == data.get(k) for k in ("normalizer", "pre_tokenizer"))
        """Whether a document's start is encoded like the middle of one (no dummy prefix)."""
        if self.token_bytes is not None and plain_added and not can_spell:
            whole = self.token_bytes.copy()
            for i, t in decoder.items():
                if 0 <= i < len(whole):
                    whole[i] = len(t.content.encode("utf-8")) or -1
            if unk is not None and 0 <= unk < len(whole):
                whole[unk] = -1  # stands for whatever text the vocabulary could not hold
            self.whole_bytes = whole
        self.is_added = np.zeros(self.vocab_size, dtype=bool)
        self.is_added[[i for i in decoder if 0 <= i < self.vocab_size]] = True
        self.is_special = np.zeros(self.vocab_size, dtype=bool)
        self.is_special[[i for i in self.special_ids if 0 <= i < self.vocab_size]] = True
        self.prefix_ids, self.suffix_ids = special_affixes(_tokenizer(json.loads(backend.to_str()), literal=None))
        self._splits: dict[tuple[str, bool], tuple[tuple[int, int, int], ...]] = {}
        self._runs: dict[tuple[str, None], list[int]] = {}
        self.structures: dict[tuple[str, bytes], Any] = {}
        """Template text between bodies, cut at its added tokens (``rendered._structure``; exact for this codec)."""

    # -- encoders ------------------------------------------------------------------------------------------
    def encode_scaffold(self, text: str) -> list[int]:
        """Template text: special-token strings become special tokens."""
        return self.scaffold.encode(text, add_special_tokens=False).ids if text else []

    def encode_body(self, text: str) -> list[int]:
        """Body text (observation segments, message contents): literal, never an added-token id."""
        return self.encode_bodies([text])[0]

    def encode_bodies(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode_body`` for many texts in one call into the Rust tokenizer."""
        return self._literal(self.body, texts, self._guard_body)

    def encode_action(self, text: str) -> list[int]:
        """The policy's text without sampled ids: special tokens literal, non-special added tokens kept."""
        return self.encode_actions([text])[0]

    def encode_actions(self, texts: Sequence[str]) -> list[list[int]]:
        return self._literal(self.action, texts, self._guard_action)

    # kept for callers of the first API: content = body
    encode_content = encode_body
    encode_contents = encode_bodies

    def _literal(self, tok: Any, texts: Sequence[str], guard: frozenset[int]) -> list[list[int]]:
        if not texts:
            return []
        out = [e.ids for e in tok.encode_batch_fast(list(texts), add_special_tokens=False)]
        if guard:
            for k, ids in enumerate(out):
                if not guard.isdisjoint(ids):
                    out[k] = self.respell(tok, texts[k], guard)[0]
        return out

    def respell(
        self, tok: Any, text: str, guard: frozenset[int], *, first: Any = None
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """Encode ``text`` with ``tok`` (``first``: the encoder of the piece's start), re-encoding every token in
        ``guard`` one character at a time, with offsets. Raises if a single character still yields one."""
        enc = (first or tok).encode(text, add_special_tokens=False)
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for tid, (s, e) in zip(enc.ids, enc.offsets):
            if tid not in guard:
                ids.append(tid)
                offsets.append((s, e))
                continue
            for j in range(s, e):
                sub = tok.encode(text[j], add_special_tokens=False).ids
                if not guard.isdisjoint(sub) and sub != [self.unk_id]:
                    raise ValueError(
                        f"this tokenizer cannot encode {text[j]!r} as plain text (its only token is a control "
                        "token); such text cannot be a body"
                    )
                ids.extend(sub)
                offsets.extend([(j, j + 1)] * len(sub))
        return ids, offsets

    def added_spans(self, text: str, *, special_only: bool = False) -> tuple[tuple[int, int, int], ...]:
        """``(start, end, id)`` of the added tokens the template (or, ``special_only=False`` for actions: the
        model's non-special added tokens) writes in ``text``; memoized, template text repeats every turn."""
        key = (text, special_only)
        hit = self._splits.get(key)
        if hit is not None:
            return hit
        tok = self.action if special_only else self.scaffold
        wanted = self.added_ids - self.special_ids if special_only else self.added_ids
        enc = tok.encode(text, add_special_tokens=False)
        spans = tuple((s, e, i) for i, (s, e) in zip(enc.ids, enc.offsets) if i in wanted)
        if len(self._splits) >= _SPLIT_MEMO_MAX:
            self._splits.clear()
        self._splits[key] = spans
        return spans

    def scaffold_run(self, text: str) -> list[int]:
        """A run of template text between added tokens, encoded literally (memoized: it repeats every turn)."""
        key = (text, None)
        hit = self._runs.get(key)
        if hit is None:
            hit = self._literal(self.body, [text], self._guard_body)[0]
            if len(self._runs) >= _SPLIT_MEMO_MAX:
                self._runs.clear()
            self._runs[key] = hit
        return list(hit)

    def decode(self, ids: Sequence[int]) -> str:
        """Decode a fragment: special tokens kept, no start-of-document space strip."""
        return str(self.scaffold.decode(list(ids), skip_special_tokens=False))


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
    """The cached ``FragmentCodec`` of ``tokenizer`` (one per live tokenizer object; rebuilt when tokens are
    added to it). Nothing is stored on the tokenizer object itself."""
    key = id(tokenizer)
    size = int(backend_of(tokenizer).get_vocab_size(with_added_tokens=True))
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0]() is tokenizer and hit[1] == size:
            return hit[2]
    codec = FragmentCodec(tokenizer)
    try:
        ref = weakref.ref(tokenizer)
    except TypeError:  # not weak-referenceable: do not cache (ids could be reused)
        return codec
    with _LOCK:
        _CACHE[key] = (ref, size, codec)
        for k in [k for k, (r, _, _) in _CACHE.items() if r() is None]:
            del _CACHE[k]
    return codec
