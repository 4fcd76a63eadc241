"""Literal text runs to token ids and role codes: which token holds each role boundary inside a run.

A run is text between two added tokens of a rendering (``rendered.encode_parts``); its characters carry role
codes and it is encoded literally in one batched call. Role boundaries inside a run are found from per-id byte
lengths where the tokenizer's pipeline allows it (``fragment.token_byte_lengths``), else from the encoding's
offsets; both give the same ids, roles and straddle count (``tests/tokenize``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..roles import Role
from .fragment import FragmentCodec

EOT_CODE = 4
"""Character code of the template's end-of-turn text right after action content: ``action`` (the model emits
it), but told apart from body characters so it is recognized as the template's token."""

_CTX = Role.CONTEXT.code


def _run_roles(ids: list[int], enc: Any, croles: bytearray, s: int, e: int, changes: list[int]) -> tuple[bytes, int]:
    """Role codes of the tokens of the run ``[s, e)`` from its characters' roles (``changes``: positions where
    the role changes inside it): a token inside one role's characters takes it, a token across a role boundary
    is ``context`` (straddle). Uses the encoding's char-to-token map at the few boundaries; ``enc`` may instead
    be the run's offsets (re-spelled runs)."""
    n_t = len(ids)
    if not changes:
        code = croles[s] if e > s else _CTX
        return bytes((Role.ACTION.code if code == EOT_CODE else code,)) * n_t, 0
    if not isinstance(enc, list) and all(
        enc.char_to_token(p - s) is not None and enc.char_to_token(p - s - 1) is not None for p in changes
    ):
        tok_bounds = [0]
        straddles: set[int] = set()
        for p in changes:
            tp, tq = enc.char_to_token(p - s), enc.char_to_token(p - s - 1)
            if tp == tq:
                straddles.add(tp)
            tok_bounds.append(tp)
        tok_bounds.append(n_t)
        return _bounded_roles(croles, [s, *changes, e], tok_bounds, straddles, n_t)
    # re-spelled runs, or characters no token covers (a normalizer dropped them): use the offsets
    roles, st = token_roles(e - s, croles[s:e], enc if isinstance(enc, list) else enc.offsets)
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
    against the run's own length. Otherwise (a re-spelled run, an unknown token, a multi-byte character next to
    a boundary, other pipelines) the run is encoded again with offsets (``_run_roles``). Both give a token that
    covers characters of two roles ``context`` (straddle)."""
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
        for j, (r_ids, r_enc) in zip(slow, runs):
            s, e = batch[j]
            out[s] = (r_ids, *_run_roles(r_ids, r_enc, croles, s, e, inners[j]))
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
        if not ascii_run and not all(text[p - 1].isascii() and text[p].isascii() for p in inner):
            failed.append(tag)  # a multi-byte character at a boundary: offsets decide, as for any other
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
    """Each run literally (no added token): ``(ids, encoding)``, or ``(ids, offsets)`` for a re-spelled run; a
    document's first run in document mode."""
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
            out.append((ids, e))
    return out


def token_roles(n: int, croles: bytearray, offsets: Sequence[tuple[int, int]] | np.ndarray) -> tuple[np.ndarray, int]:
    """One role per token from per-character roles and token offsets (vectorized). Characters not covered by
    any token (trimmed whitespace) count for both neighbours; a token whose characters carry more than one role
    is ``context`` (straddle policy); end-of-turn characters are ``action``."""
    t = len(offsets)
    if t == 0:
        return np.zeros(0, dtype=np.int8), 0
    cr = np.frombuffer(bytes(croles), dtype=np.int8)
    off = np.asarray(offsets, dtype=np.int64).reshape(t, 2)
    s, e = off[:, 0], off[:, 1]
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
