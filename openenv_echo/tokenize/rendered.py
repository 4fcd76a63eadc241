"""A chat template's rendering of role-tagged messages, with who wrote each character, encoded to ids and roles.

``render_parts`` renders the conversation once with placeholders as message contents and once with the real
contents. Text between placeholders is the template's (``SCAFFOLD``); each placeholder is replaced by its
message's segments (``BODY``, or ``ACTION_BODY`` for the policy's text); an *opaque* message (pre-encoded ids,
e.g. an observation body in token-in-token-out assembly) stays a placeholder and becomes an ids part. If the
template rewrote a body (dropped ``<think>``, ``trim``), characters are aligned with ``difflib``.

Placeholders use a marker that occurs in no message field and not in the template source (a run of private-use
characters one longer than any such run in the input), so no valid input can collide with it.

``encode_parts`` tokenizes the result the way the tokenizer tokenizes a rendered document, except that bodies
are literal: the text is cut at the added tokens the template (and, in action text, the model) wrote, each run
between them is encoded in one batched call with offsets (bodies and neighbouring scaffold text merge as in a
full render), and each token takes the role of the characters it covers. A token covering characters of more
than one role (BPE merged across a role boundary) gets ``context`` and is counted in ``stats["straddled"]``.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import json
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..roles import Role
from ..wire import Segment
from .fragment import FragmentCodec
from .template import _template_text, render, unused_marker

SCAFFOLD = 0
BODY = 1
ACTION_BODY = 2

EOT_CODE = 4
"""Character code of the template's end-of-turn text right after action content: ``action`` (the model emits
it), but told apart from body characters so it is recognized as the template's token."""

_CTX = Role.CONTEXT.code
_LOCK = threading.Lock()
_PH_MEMO: dict[tuple[Any, ...], tuple[weakref.ref[Any], str]] = {}
"""Placeholder renders by conversation shape (roles, extra keys, template): datasets repeat a few shapes."""
_PH_MEMO_MAX = 512


@dataclass
class TaggedMessage:
    """A chat message whose content is role-tagged segments, or (``ids`` set) pre-encoded ids with one role
    code each; ``extra`` keys go to the template as they are."""

    role: str
    segments: list[Segment]
    extra: dict[str, Any] = field(default_factory=dict)
    ids: list[int] | None = None
    id_roles: bytes | None = None

    @property
    def content(self) -> str:
        return "".join(s.text for s in self.segments)

    @property
    def is_action(self) -> bool:
        segs = self.segments
        return bool(segs) and all(s.role is Role.ACTION for s in segs)

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


@dataclass
class Parts:
    """A rendering cut into text (with a role code and a kind per character) and opaque id parts."""

    text: str
    roles: bytearray
    kinds: bytearray
    opaque: list[tuple[int, list[int], bytes]]  # (char position in text, ids, role codes)
    rewritten: bool


def render_parts(
    tokenizer: Any,
    messages: Sequence[TaggedMessage],
    *,
    add_generation_prompt: bool,
    chat_template: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    eot: str = "",
) -> Parts:
    """Render ``messages`` and attribute every character (see the module docstring). ``eot``: the template's
    end-of-turn text after assistant content (``action`` when it follows action text)."""
    inputs = [json.dumps(m.extra, ensure_ascii=False, default=str) if m.extra else "" for m in messages]
    inputs += [s.text for m in messages for s in m.segments]
    inputs.append(_template_text(tokenizer, chat_template))
    mark = unused_marker(inputs)
    end = "\ue001"
    kw: dict[str, Any] = {"chat_template": chat_template, "template_kwargs": template_kwargs}
    ph = [f"{mark}{i}{end}" for i in range(len(messages))]
    extras = inputs[: len(messages)]
    key: tuple[Any, ...] = (id(tokenizer), inputs[-1], json.dumps(kw, sort_keys=True, default=str))
    key += (add_generation_prompt, mark, *zip((m.role for m in messages), extras))
    with _LOCK:
        hit = _PH_MEMO.get(key)
    if hit is not None and hit[0]() is tokenizer:
        ph_text = hit[1]
    else:
        ph_text = render(
            tokenizer,
            [{**m.extra, "role": m.role, "content": ph[i]} for i, m in enumerate(messages)],
            add_generation_prompt=add_generation_prompt,
            **kw,
        )
        with _LOCK, contextlib.suppress(TypeError):  # TypeError: not weak-referenceable, not memoized
            if len(_PH_MEMO) >= _PH_MEMO_MAX:
                _PH_MEMO.clear()
            _PH_MEMO[key] = (weakref.ref(tokenizer), ph_text)
    found = list(re.finditer(re.escape(mark) + r"(\d+)" + end, ph_text))
    order = [int(f.group(1)) for f in found]
    if order != sorted(set(order)) or any(i >= len(messages) for i in order):
        raise ValueError(f"the chat template repeats or reorders message contents ({order}); cannot attribute them")
    pieces: list[str] = []
    roles = bytearray()
    kinds = bytearray()
    pos = 0
    after_action = False
    spans: list[tuple[int, int]] = []  # alternating scaffold and body spans in the substituted text
    n = 0
    for f in found:
        _scaffold(pieces, roles, kinds, ph_text[pos : f.start()], eot if after_action else "")
        spans.append((n, len(roles)))
        n = len(roles)
        m = messages[int(f.group(1))]
        if m.ids is not None:
            _append(pieces, roles, kinds, f.group(0), _CTX, SCAFFOLD)  # stays a placeholder in both renders
        else:
            kind = ACTION_BODY if m.is_action else BODY
            for seg in m.segments:
                _append(pieces, roles, kinds, seg.text, seg.role.code, kind)
        spans.append((n, len(roles)))
        n = len(roles)
        after_action = (m.ids is None and m.is_action) or (m.ids is not None and m.role == "assistant")
        pos = f.end()
    _scaffold(pieces, roles, kinds, ph_text[pos:], eot if after_action else "")
    spans.append((n, len(roles)))
    subst = "".join(pieces)
    real = render(
        tokenizer,
        [
            {**m.extra, "role": m.role, "content": ph[i] if m.ids is not None else m.content}
            for i, m in enumerate(messages)
        ],
        add_generation_prompt=add_generation_prompt,
        **kw,
    )
    rewritten = real != subst
    anchored = _anchored(real, subst, roles, kinds, spans) if rewritten else None
    if anchored is not None:
        roles, kinds = anchored
    elif rewritten:
        aligned_roles = bytearray(bytes((_CTX,)) * len(real))
        aligned_kinds = bytearray(bytes((SCAFFOLD,)) * len(real))
        sm = difflib.SequenceMatcher(None, subst, real, autojunk=False)
        for a, b, size in sm.get_matching_blocks():
            aligned_roles[b : b + size] = roles[a : a + size]
            aligned_kinds[b : b + size] = kinds[a : a + size]
        roles, kinds = aligned_roles, aligned_kinds
    opaque_msgs = {i for i, m in enumerate(messages) if m.ids is not None}
    if not opaque_msgs:
        return Parts(real, roles, kinds, [], rewritten)
    # cut opaque placeholders out of the text: they become id parts at their position
    out_text: list[str] = []
    out_roles = bytearray()
    out_kinds = bytearray()
    opaque: list[tuple[int, list[int], bytes]] = []
    pos = 0
    n = 0
    for f in re.finditer(re.escape(mark) + r"(\d+)" + end, real):
        i = int(f.group(1))
        if i not in opaque_msgs:
            continue
        out_text.append(real[pos : f.start()])
        out_roles += roles[pos : f.start()]
        out_kinds += kinds[pos : f.start()]
        n += f.start() - pos
        m = messages[i]
        assert m.ids is not None and m.id_roles is not None
        opaque.append((n, m.ids, m.id_roles))
        pos = f.end()
    out_text.append(real[pos:])
    out_roles += roles[pos:]
    out_kinds += kinds[pos:]
    if len(opaque) != len(opaque_msgs):
        raise ValueError("the chat template does not render every pre-encoded message exactly once")
    return Parts("".join(out_text), out_roles, out_kinds, opaque, rewritten)


def _anchored(
    real: str, subst: str, roles: bytearray, kinds: bytearray, spans: list[tuple[int, int]]
) -> tuple[bytearray, bytearray] | None:
    """Attribute ``real`` when the template kept its own text and only cut bodies down (``trim``, dropped
    reasoning): each scaffold piece is found in order and the text between two is a piece of that body. None
    when that does not explain the rendering (then a character diff is used)."""
    out_roles = bytearray(len(real))  # zeros: context / scaffold
    out_kinds = bytearray(len(real))
    pos = 0
    for k in range(0, len(spans), 2):
        s0, s1 = spans[k]
        if not real.startswith(subst[s0:s1], pos):
            return None
        out_roles[pos : pos + s1 - s0] = roles[s0:s1]
        pos += s1 - s0
        if k + 1 == len(spans):
            return (out_roles, out_kinds) if pos == len(real) else None
        b0, b1 = spans[k + 1]
        content = subst[b0:b1]
        nxt = subst[spans[k + 2][0] : spans[k + 2][1]]
        if k + 2 == len(spans) - 1:  # the last scaffold piece ends the text
            j = len(real) - len(nxt) if real.endswith(nxt) and len(real) - len(nxt) >= pos else -1
            if j >= 0 and real[pos:j] not in content:
                j = -1
        else:
            j = real.find(nxt, pos)
            while j != -1 and real[pos:j] not in content:
                j = real.find(nxt, j + 1)
        if j == -1:
            return None
        region = real[pos:j]
        off = len(content) - len(region) if content.endswith(region) else content.find(region)
        out_roles[pos:j] = roles[b0 + off : b0 + off + len(region)]
        out_kinds[pos:j] = kinds[b0 + off : b0 + off + len(region)]
        pos = j
    return None


def _append(pieces: list[str], roles: bytearray, kinds: bytearray, text: str, code: int, kind: int) -> None:
    pieces.append(text)
    roles.extend(bytes((code,)) * len(text))
    kinds.extend(bytes((kind,)) * len(text))


def _scaffold(pieces: list[str], roles: bytearray, kinds: bytearray, text: str, eot: str) -> None:
    n_act = len(eot) if eot and text.startswith(eot) else 0
    pieces.append(text)
    roles.extend(bytes((EOT_CODE,)) * n_act)
    roles.extend(bytes((_CTX,)) * (len(text) - n_act))
    kinds.extend(bytes((SCAFFOLD,)) * len(text))


def encode_parts(codec: FragmentCodec, parts: Parts, *, document_start: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """``(ids, role codes, straddled)`` for ``parts`` (module docstring). ``document_start``: the text starts
    a document (its first piece gets the tokenizer's start-of-document handling, e.g. a ``▁`` prefix)."""
    text, croles, kinds = parts.text, parts.roles, parts.kinds
    n = len(text)
    # cut points: kind changes; inside scaffold / action text, the added tokens there
    kind_arr = np.frombuffer(bytes(kinds), dtype=np.int8)
    bounds = np.flatnonzero(kind_arr[1:] != kind_arr[:-1]) + 1 if n else np.zeros(0, dtype=np.int64)
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), n]
    added: list[tuple[int, int, int]] = []  # (start, end, id) in text
    for s, e in zip(starts, ends):
        k = kinds[s] if s < n else SCAFFOLD
        if k == BODY or e <= s:
            continue
        for a, b, tid in codec.added_spans(text[s:e], special_only=k == ACTION_BODY):
            added.append((s + a, s + b, tid))
    cuts = sorted({p for p, _, _ in parts.opaque})
    items: list[tuple[int, int, int]] = []  # (start, end, id): id -1 = a literal text run
    pos = 0
    for a, b, tid in added:
        _runs(items, pos, a, cuts)
        items.append((a, b, tid))
        pos = b
    _runs(items, pos, n, cuts)
    cr = np.frombuffer(bytes(croles), dtype=np.int8)
    changes = (np.flatnonzero(cr[1:] != cr[:-1]) + 1).tolist()  # role boundaries (character positions)
    kind_changes = bounds.tolist()
    # a run of template text with one role (a role name between header tokens) repeats every turn: memoized;
    # every other run goes to the tokenizer in one batch
    plain: dict[int, list[int]] = {}
    batch: list[tuple[int, int]] = []
    for s, e, tid in items:
        if tid >= 0:
            continue
        one_piece = not _within(kind_changes, s, e) and not _within(changes, s, e)
        if kinds[s] == SCAFFOLD and one_piece and not (s == 0 and document_start):
            plain[s] = codec.scaffold_run(text[s:e])
        else:
            batch.append((s, e))
    encs = dict(
        zip(
            (s for s, _ in batch),
            _encode_runs(codec, [text[s:e] for s, e in batch], [s == 0 and document_start for s, _ in batch]),
        )
    )
    ids_out: list[int] = []
    roles_out = bytearray()
    tok_at: list[int] = []  # token index where each item starts (to splice opaque parts)
    straddled = 0
    for s, e, tid in items:
        tok_at.append(len(ids_out))
        if tid >= 0:  # an added token the template (or the model, in action text) wrote: its characters' role
            ids_out.append(tid)
            code = int(cr[s]) if s < n else _CTX
            roles_out.append(Role.ACTION.code if code == EOT_CODE else code)
            continue
        if s in plain:
            r_ids = plain[s]
            code = croles[s]
            ids_out.extend(r_ids)
            roles_out += bytes((Role.ACTION.code if code == EOT_CODE else code,)) * len(r_ids)
            continue
        r_ids, r_enc = encs[s]
        inner = changes[bisect.bisect_right(changes, s) : bisect.bisect_left(changes, e)]
        r_roles, r_straddled = _run_roles(r_ids, r_enc, croles, s, e, inner)
        ids_out.extend(r_ids)
        roles_out += r_roles
        straddled += r_straddled
    ids = np.fromiter(ids_out, dtype=np.int64, count=len(ids_out))
    role_ids = np.frombuffer(bytes(roles_out), dtype=np.int8).copy()
    if parts.opaque:  # splice the opaque parts in at their character positions (always item boundaries)
        item_start = [s for s, _, _ in items]
        chunks_i: list[np.ndarray] = []
        chunks_r: list[np.ndarray] = []
        prev = 0
        for cpos, o_ids, o_roles in parts.opaque:
            j = bisect.bisect_left(item_start, cpos)
            cut = tok_at[j] if j < len(tok_at) else len(ids)
            chunks_i += [ids[prev:cut], np.asarray(o_ids, dtype=np.int64)]
            chunks_r += [role_ids[prev:cut], np.frombuffer(bytes(o_roles), dtype=np.int8)]
            prev = cut
        chunks_i.append(ids[prev:])
        chunks_r.append(role_ids[prev:])
        ids = np.concatenate(chunks_i)
        role_ids = np.concatenate(chunks_r).astype(np.int8)
    return ids, role_ids, straddled


def _within(points: list[int], s: int, e: int) -> bool:
    """Whether a sorted list of positions has one strictly inside ``(s, e)``."""
    return bisect.bisect_left(points, e) - bisect.bisect_right(points, s) > 0


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
        bounds = [s, *changes, e]
        tok_bounds = [0]
        straddles: set[int] = set()
        for p in changes:
            tp, tq = enc.char_to_token(p - s), enc.char_to_token(p - s - 1)
            if tp == tq:
                straddles.add(tp)
            tok_bounds.append(tp)
        tok_bounds.append(n_t)
        out = bytearray()
        for i in range(len(bounds) - 1):
            code = croles[bounds[i]]
            out += bytes((Role.ACTION.code if code == EOT_CODE else code,)) * max(0, tok_bounds[i + 1] - len(out))
        for t in straddles:
            out[t] = _CTX
        return bytes(out[:n_t]), len(straddles)
    # re-spelled runs, or characters no token covers (a normalizer dropped them): use the offsets
    roles, st = token_roles(e - s, croles[s:e], enc if isinstance(enc, list) else enc.offsets)
    return roles.tobytes(), st


def _runs(out: list[tuple[int, int, int]], a: int, b: int, cuts: list[int]) -> None:
    """Literal text runs in [a, b), also cut at opaque-part positions."""
    pos = a
    for c in cuts:
        if a < c < b:
            out.append((pos, c, -1))
            pos = c
    if b > pos:
        out.append((pos, b, -1))


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
