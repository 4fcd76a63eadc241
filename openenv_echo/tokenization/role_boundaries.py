"""Literal text runs to token ids and role codes: which token holds each role boundary inside a run.

A run is text between two added tokens of a rendering (``rendered.encode_parts``); its characters carry role
codes and it is encoded literally in one batched call. One rule gives every token its role (RFC 0003 §7.3): a
token stands for UTF-8 bytes of the run, a byte has the role of the character it belongs to, and a token whose
bytes carry more than one role is ``context`` (straddle, counted once per token). Which bytes a token stands
for is found from per-id byte lengths where the tokenizer's pipeline allows it (``fragment_encoding.piece_byte_lengths``),
else from the encoding's offsets (``token_roles``); both give the same ids, roles and straddle count
(``tests/tokenize``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..roles import Role
from .fragment_encoding import FragmentCodec

EOT_CODE = 4
"""Character code of the template's end-of-turn text right after action content: ``action`` (the model emits
it), but told apart from body characters so it is recognized as the template's token."""

_CTX = Role.CONTEXT.code


def _run_roles(
    ids: list[int], offsets: Any, croles: bytearray, text: str, s: int, e: int, changes: list[int], piece: Any
) -> tuple[bytes, int]:
    """Role codes of the tokens of the run ``text[s:e]`` from their offsets (``changes``: positions where the
    character role changes inside it), by the byte rule of ``token_roles``."""
    if not changes:
        code = croles[s] if e > s else _CTX
        return bytes((Role.ACTION.code if code == EOT_CODE else code,)) * len(ids), 0
    roles, st = token_roles(e - s, croles[s:e], offsets, text=text[s:e], ids=ids, piece_bytes=piece)
    return roles.tobytes(), st


def _bounded_roles(
    croles: bytearray, bounds: list[int], tok_bounds: list[int], straddles: set[int], n_t: int
) -> tuple[bytes, int]:
    """Role codes of a run's ``n_t`` tokens: tokens from ``tok_bounds[i]`` take the role of the characters from
    ``bounds[i]``; each token in ``straddles`` (it holds a role boundary) is ``context``."""
    out = bytearray()
    for i in range(len(bounds) - 1):
        code = croles[bounds[i]]
        out += bytes((Role.ACTION.code if code == EOT_CODE else code,)) * max(0, tok_bounds[i + 1] - len(out))
    for t in straddles:
        out[t] = _CTX
    return bytes(out[:n_t]), len(straddles)


def encode_runs(
    codec: FragmentCodec,
    text: str,
    croles: bytearray,
    batch: list[tuple[int, int]],
    changes: list[int],
    document_start: bool,
) -> dict[int, tuple[list[int], bytes, int]]:
    """``{start: (ids, role codes, straddled)}`` of the literal runs ``batch`` of ``text`` (``changes``: the
    positions where the character role changes).

    Runs are encoded without offsets in one call (a document's first run in document mode). A run with role
    boundaries inside must know which token holds each boundary: on a pipeline whose ids each stand for a fixed
    number of bytes of the text (``codec.token_bytes``), the running sum of those lengths says so, checked
    against the run's own length. Otherwise (a re-spelled run, an unknown token, other pipelines) the run is
    encoded again with offsets (``token_roles``). Both apply the byte rule of ``token_roles``: a token whose
    bytes carry two roles is ``context`` (straddle)."""
    out: dict[int, tuple[list[int], bytes, int]] = {}
    if not batch:
        return out
    lo, hi = bisect.bisect_right, bisect.bisect_left
    inners = [changes[lo(changes, s) : hi(changes, e)] for s, e in batch]
    texts = [text[s:e] for s, e in batch]
    doc = 0 if document_start and batch[0][0] == 0 else -1
    encoded = [x.ids for x in codec.body.encode_batch_fast(texts[doc + 1 :], add_special_tokens=False)]
    if doc == 0:
        encoded.insert(0, codec.body_document.encode_batch_fast(texts[:1], add_special_tokens=False)[0].ids)
    guard, table, space = codec._guard_body, codec.token_bytes, codec.space_symbol
    slow: list[int] = []
    located: list[int] = []
    for j, ((s, _e), ids, inner) in enumerate(zip(batch, encoded, inners)):
        if guard and not guard.isdisjoint(ids):
            slow.append(j)
        elif not inner:
            code = croles[s]
            out[s] = (ids, bytes((Role.ACTION.code if code == EOT_CODE else code,)) * len(ids), 0)
        elif table is not None and not (space and space in texts[j]):
            located.append(j)
        else:
            slow.append(j)
    if located and table is not None:
        slow += _locate(
            out,
            text,
            croles,
            table,
            [batch[j] for j in located],
            [encoded[j] for j in located],
            [inners[j] for j in located],
            located,
        )
    if slow:
        slow.sort()
        runs = _encode_runs(codec, [texts[j] for j in slow], [j == doc for j in slow])
        for j, (r_ids, r_offsets) in zip(slow, runs):
            s, e = batch[j]
            out[s] = (r_ids, *_run_roles(r_ids, r_offsets, croles, text, s, e, inners[j], codec.piece_bytes))
    return out


def _locate(
    out: dict[int, tuple[list[int], bytes, int]],
    text: str,
    croles: bytearray,
    table: np.ndarray,
    runs: list[tuple[int, int]],
    encoded: list[list[int]],
    inners: list[list[int]],
    tags: list[int],
) -> list[int]:
    """Role boundaries of ``runs`` from per-id byte lengths (see ``encode_runs``), all runs' lengths in one
    numpy pass; fills ``out`` and returns the ``tags`` of the runs it cannot place."""
    flat: list[int] = []
    first: list[int] = []
    for ids in encoded:
        first.append(len(flat))
        flat += ids
    lens = table[np.fromiter(flat, dtype=np.int64, count=len(flat))]
    unknown = lens < 0
    cum = np.cumsum(np.where(unknown, 0, lens)).tolist()  # byte offset where each token ends
    bad = np.cumsum(unknown).tolist() if unknown.any() else None
    failed: list[int] = []
    for (s, e), t0, ids, inner, tag in zip(runs, first, encoded, inners, tags):
        n_t = len(ids)
        t1 = t0 + n_t
        base = cum[t0 - 1] if t0 else 0
        run = text[s:e]
        ascii_run = run.isascii()
        size = e - s if ascii_run else len(run.encode("utf-8"))
        if not n_t or cum[t1 - 1] - base != size or (bad is not None and bad[t1 - 1] != (bad[t0 - 1] if t0 else 0)):
            failed.append(tag)
            continue
        tok_bounds = [0]
        straddles: set[int] = set()
        for p in inner:
            target = base + (p - s if ascii_run else len(run[: p - s].encode("utf-8")))
            idx = bisect.bisect_left(cum, target, t0, t1)  # the token holding the boundary's last byte
            if cum[idx] == target:
                tok_bounds.append(idx + 1 - t0)
            else:
                straddles.add(idx - t0)
                tok_bounds.append(idx - t0)
        tok_bounds.append(n_t)
        out[s] = (ids, *_bounded_roles(croles, [s, *inner, e], tok_bounds, straddles, n_t))
    return failed


def _encode_runs(codec: FragmentCodec, texts: list[str], first: list[bool]) -> list[tuple[list[int], Any]]:
    """Each run literally (no added token): ``(ids, offsets)``; a document's first run in document mode."""
    out: list[tuple[list[int], Any]] = []
    if not texts:
        return out
    guard = codec._guard_body
    encs = codec.body.encode_batch(texts, add_special_tokens=False)
    doc = [i for i, f in enumerate(first) if f]
    if doc:
        encs[doc[0]] = codec.body_document.encode(texts[doc[0]], add_special_tokens=False)
    for i, e in enumerate(encs):
        ids = e.ids
        if guard and not guard.isdisjoint(ids):
            out.append(codec.respell(codec.body, texts[i], guard, first=codec.body_document if first[i] else None))
        else:
            out.append((ids, e.offsets))
    return out


def _char_bytes(text: str) -> np.ndarray:
    """UTF-8 length of each character of ``text``."""
    cp = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    return 1 + (cp >= 0x80).astype(np.int64) + (cp >= 0x800) + (cp >= 0x10000)


def token_roles(
    n: int,
    croles: bytearray,
    offsets: Sequence[tuple[int, int]] | np.ndarray,
    *,
    text: str | None = None,
    ids: Sequence[int] | None = None,
    piece_bytes: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """One role per token from per-character roles and token offsets (vectorized): the rule of RFC 0003 §7.3.

    A token stands for the UTF-8 bytes of the characters its offsets cover, except that consecutive tokens with
    the same offsets (the byte pieces of one unknown span, the pieces of one character) divide that span's bytes
    in order, each taking as many as it spells (``piece_bytes``: a byte piece one), when those add up to the
    span's byte length (needs ``text`` and ``ids``; otherwise each stands for the whole span). A byte has the
    role of its character. Characters no token covers (trimmed whitespace) count for both neighbours. A token
    whose bytes carry more than one role is ``context`` (straddle policy) and counted; end-of-turn characters
    are ``action``."""
    t = len(offsets)
    if t == 0:
        return np.zeros(0, dtype=np.int8), 0
    cr = np.frombuffer(bytes(croles), dtype=np.int8)
    off = np.asarray(offsets, dtype=np.int64).reshape(t, 2)
    s, e = off[:, 0], off[:, 1]
    if t > 1 and text is not None and ids is not None and piece_bytes is not None and len(text) == n:
        same = np.zeros(t, dtype=bool)
        same[1:] = (s[1:] == s[:-1]) & (e[1:] == e[:-1])
        if same.any():
            s, e, cr, n = _split_shared(s, e, cr, text, ids, piece_bytes, same)
    prev_e = np.concatenate([[0], e[:-1]])
    next_s = np.concatenate([s[1:], [n]])
    a = np.minimum(s, prev_e)
    b = np.maximum(e, next_s)
    b = np.maximum(a, np.minimum(b, n))
    nonempty = b > a
    if len(cr):
        change = np.zeros(len(cr), dtype=np.int64)
        change[1:] = cr[1:] != cr[:-1]
        cum = np.cumsum(change)
        last = np.clip(b - 1, 0, len(cr) - 1)
        first = np.clip(a, 0, len(cr) - 1)
        uniform = nonempty & (cum[last] - cum[first] == 0)
        role = np.where(uniform, cr[first], _CTX).astype(np.int8)
    else:
        uniform = np.zeros(t, dtype=bool)
        role = np.full(t, _CTX, dtype=np.int8)
    straddled = int((nonempty & ~uniform).sum())
    role = np.where(role == EOT_CODE, Role.ACTION.code, role).astype(np.int8)
    return role, straddled


def _split_shared(
    s: np.ndarray,
    e: np.ndarray,
    cr: np.ndarray,
    text: str,
    ids: Sequence[int],
    piece_bytes: np.ndarray,
    same: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``token_roles`` in bytes: token spans as byte offsets (tokens sharing offsets divide their span's bytes
    when their lengths add up to it), per-byte roles, and the byte length."""
    widths = _char_bytes(text)
    cb = np.concatenate([[0], np.cumsum(widths)])
    bs, be = cb[s], cb[e]
    id_arr = np.asarray(ids, dtype=np.int64)
    lens = np.where(
        (id_arr >= 0) & (id_arr < len(piece_bytes)), piece_bytes[np.clip(id_arr, 0, len(piece_bytes) - 1)], -1
    )
    lens = lens.astype(np.int64)
    gid = np.cumsum(~same) - 1  # group of tokens sharing offsets
    gstart = np.flatnonzero(~same)
    pos = np.where(lens > 0, lens, 0)
    gsum = np.bincount(gid, weights=pos).astype(np.int64)
    gbad = np.bincount(gid, weights=(lens <= 0)).astype(np.int64)
    gsize = np.bincount(gid)
    ok = ((gsize > 1) & (gbad == 0) & (gsum == (be - bs)[gstart]))[gid]
    before = np.cumsum(pos) - pos
    start = bs + before - before[gstart][gid]
    bs = np.where(ok, start, bs)
    be = np.where(ok, start + pos, be)
    return bs, be, np.repeat(cr, widths), int(cb[-1])
