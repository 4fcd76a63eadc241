"""A chat template's rendering of role-tagged messages, with who wrote each character, encoded to ids and roles.

``render_parts`` renders the conversation once with placeholders as message contents (memoized per conversation
shape) and once with the real contents (skipped for templates that provably write contents verbatim:
``verbatim.content_guards``). Text between placeholders is the template's (``SCAFFOLD``); each placeholder is
replaced by its message's segments (``BODY``, or ``ACTION_BODY`` for the policy's text); an *opaque* message
(pre-encoded ids, e.g. an observation body in token-in-token-out assembly) stays a placeholder and becomes an ids
part. If the template rewrote a body (dropped ``<think>``, ``trim``), characters are aligned with ``difflib``.

Placeholders use a marker that occurs in no message field and not in the template source (a run of private-use
characters one longer than any such run in the input), so no valid input can collide with it.

``encode_parts`` tokenizes the result the way the tokenizer tokenizes a rendered document, except that bodies
are literal: the text is cut at the added tokens the template (and, in action text, the model) wrote, each run
between them is encoded in one batched call (bodies and neighbouring scaffold text merge as in a full render),
or the whole text in one encoding where that provably gives the same ids (``encode_whole``), and each token takes
the role of the bytes it stands for (RFC 0003 §7.3: from per-id byte lengths, or from offsets,
``role_boundaries.encode_runs``). A token whose bytes carry more than one role (BPE merged across a role boundary) gets
``context`` and is counted in ``stats["straddled"]``.
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
from .fragment_encoding import FragmentCodec
from .role_boundaries import EOT_CODE, encode_runs
from .template import _kwargs_key, _template_text, render, unused_marker
from .verbatim import content_guards

__all__ = ["Parts", "TaggedMessage", "encode_parts", "render_parts"]

SCAFFOLD = 0
BODY = 1
ACTION_BODY = 2


_CTX = Role.CONTEXT.code
_LOCK = threading.Lock()
_Layout = tuple[list[int], list[str], list[str], dict[str, list[tuple[bytes, bytes, bytes]]]]
_PH_MEMO: dict[tuple[Any, ...], tuple[weakref.ref[Any], _Layout]] = {}
"""Placeholder renders by conversation shape (roles, extra keys, template), cut at the placeholders: datasets
repeat a few shapes."""
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
    key: tuple[Any, ...] = (id(tokenizer), inputs[-1], chat_template, _kwargs_key(template_kwargs))
    key += (add_generation_prompt, mark, *zip((m.role for m in messages), extras))
    with _LOCK:
        hit = _PH_MEMO.get(key)
    if hit is not None and hit[0]() is tokenizer:
        layout = hit[1]
    else:
        ph_text = render(
            tokenizer,
            [{**m.extra, "role": m.role, "content": ph[i]} for i, m in enumerate(messages)],
            add_generation_prompt=add_generation_prompt,
            **kw,
        )
        found = list(re.finditer(re.escape(mark) + r"(\d+)" + end, ph_text))
        order = [int(f.group(1)) for f in found]
        if order != sorted(set(order)) or any(i >= len(messages) for i in order):
            raise ValueError(f"the chat template repeats or reorders message contents ({order}); cannot attribute them")
        cuts = [0, *(x for f in found for x in (f.start(), f.end())), len(ph_text)]
        layout = (order, [ph_text[a:b] for a, b in zip(cuts[::2], cuts[1::2])], [f.group(0) for f in found], {})
        with _LOCK, contextlib.suppress(TypeError):  # TypeError: not weak-referenceable, not memoized
            if len(_PH_MEMO) >= _PH_MEMO_MAX:
                _PH_MEMO.clear()
            _PH_MEMO[key] = (weakref.ref(tokenizer), layout)
    order, between, holders, coded = layout  # message order, the template's text around them, placeholders
    codes = coded.get(eot)
    if codes is None:  # per piece of template text: its role codes (plain, and after action text) and kinds
        codes = coded[eot] = [_scaffold_codes(t, eot) for t in between]
    pieces: list[str] = []
    role_runs: list[bytes] = []  # per piece: its characters' role codes
    kind_runs: list[bytes] = []
    n = 0
    after_action = False
    spans: list[tuple[int, int]] = []  # alternating scaffold and body spans in the substituted text
    for i, scaffold_text, holder, (plain_codes, eot_codes, kind_codes) in zip(order, between, holders, codes):
        pieces.append(scaffold_text)
        role_runs.append(eot_codes if after_action else plain_codes)
        kind_runs.append(kind_codes)
        spans.append((n, n + len(scaffold_text)))
        n += len(scaffold_text)
        m = messages[i]
        start = n
        if m.ids is not None:  # stays a placeholder in both renders
            pieces.append(holder)
            role_runs.append(_CTX_B * len(holder))
            kind_runs.append(_KIND_B[SCAFFOLD] * len(holder))
            n += len(holder)
            after_action = m.role == "assistant"
        else:
            after_action = bool(m.segments)  # action text: every segment the policy's
            for seg in m.segments:
                body = seg.text
                pieces.append(body)
                role_runs.append(_ROLE_B[seg.role] * len(body))
                n += len(body)
                after_action = after_action and seg.role is Role.ACTION
            kind_runs.append(_KIND_B[ACTION_BODY if after_action else BODY] * (n - start))
        spans.append((start, n))
    plain_codes, eot_codes, kind_codes = codes[-1]
    pieces.append(between[-1])
    role_runs.append(eot_codes if after_action else plain_codes)
    kind_runs.append(kind_codes)
    spans.append((n, n + len(between[-1])))
    subst = "".join(pieces)
    roles = bytearray(b"".join(role_runs))
    kinds = bytearray(b"".join(kind_runs))
    guards = content_guards(inputs[-1])
    if guards:  # a guard in any content (or placeholder) renders; one found across two contents only costs time
        bodies = "".join([*inputs[len(messages) : -1], *holders])
        if any(g in bodies for g in guards):
            guards = None
    if guards is not None:
        real = subst  # the real render is the placeholder render with the contents in place (verbatim.py)
    else:
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


_CTX_B = bytes((_CTX,))
_ROLE_B = {r: bytes((r.code,)) for r in Role}
_KIND_B = {k: bytes((k,)) for k in (SCAFFOLD, BODY, ACTION_BODY)}


def _scaffold_codes(text: str, eot: str) -> tuple[bytes, bytes, bytes]:
    """Role codes of a piece of template text (plain, and after action text: its leading ``eot``, if any, is the
    model's end of turn) and its kind codes."""
    n_act = len(eot) if eot and text.startswith(eot) else 0
    plain = _CTX_B * len(text)
    return plain, bytes((EOT_CODE,)) * n_act + _CTX_B * (len(text) - n_act), _KIND_B[SCAFFOLD] * len(text)


def encode_parts(codec: FragmentCodec, parts: Parts, *, document_start: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """``(ids, role codes, straddled)`` for ``parts`` (module docstring). ``document_start``: the text starts
    a document (its first piece gets the tokenizer's start-of-document handling, e.g. a ``▁`` prefix).

    Most renderings are encoded whole, in one call (``encode_whole``), when that is provably the same as
    encoding their runs; the rest as follows.

    The text is cut at the added tokens written in template (and action) text and at opaque parts; what lies
    between is a literal run, encoded by ``role_boundaries.encode_runs``. A piece of template text between two bodies repeats
    every turn: its added tokens and the runs strictly between them (one role each) are looked up once per
    tokenizer (``_structure``), which is exact because an added token always ends a run."""
    text, croles, kinds = parts.text, parts.roles, parts.kinds
    whole = encode_whole(codec, parts, document_start)
    if whole is not None:
        return whole
    n = len(text)
    kind_arr = np.frombuffer(bytes(kinds), dtype=np.int8)
    cr = np.frombuffer(bytes(croles), dtype=np.int8)
    changes = (np.flatnonzero(cr[1:] != cr[:-1]) + 1).tolist()  # role boundaries (character positions)
    kind_changes = (np.flatnonzero(kind_arr[1:] != kind_arr[:-1]) + 1).tolist()
    opaque: dict[int, list[tuple[list[int], bytes]]] = {}
    for cpos, o_ids, o_roles in parts.opaque:
        opaque.setdefault(cpos, []).append((list(o_ids), bytes(o_roles)))
    bounds = sorted({*kind_changes, *(c for c in opaque if 0 < c < n)}) if opaque else kind_changes
    # plan: literal runs (start, end) and fixed pieces (ids, role codes), in order
    runs: list[tuple[int, int]] = []
    plan: list[tuple[int, int] | tuple[list[int], bytes]] = []
    run_s = -1  # start of the open literal run, -1: none

    def close(pos: int) -> None:
        nonlocal run_s
        if 0 <= run_s < pos:
            runs.append((run_s, pos))
            plan.append((run_s, pos))
        run_s = -1

    for s, e in zip([0, *bounds], [*bounds, n]):
        if s in opaque:
            close(s)
            plan.extend(opaque[s])
        if e <= s:
            continue
        kind = kinds[s]
        if kind == SCAFFOLD:
            shape = _structure(codec, text[s:e], bytes(croles[s:e]))
            if shape is not None:
                head, fixed, tail = shape
                if run_s < 0 and head:
                    run_s = s
                close(s + head)
                plan.append(fixed)
                if tail:
                    run_s = e - tail
                continue
        added = codec.added_spans(text[s:e], special_only=kind == ACTION_BODY) if kind != BODY else ()
        for a, b, tid in added:
            if run_s < 0 and a:
                run_s = s
            close(s + a)
            code = croles[s + a]
            plan.append(([tid], bytes((Role.ACTION.code if code == EOT_CODE else code,))))
            run_s = s + b
        if added:
            if run_s >= e:
                run_s = -1
        elif run_s < 0:
            run_s = s
    close(n)
    if n in opaque and n > 0:
        plan.extend(opaque[n])
    # a run of template text with one role (a role name between header tokens): memoized; the rest: one batch
    plain: dict[int, tuple[list[int], bytes, int]] = {}
    batch: list[tuple[int, int]] = []
    for s, e in runs:
        one_piece = kinds[s] == SCAFFOLD and not _within(kind_changes, s, e) and not _within(changes, s, e)
        if one_piece and not (s == 0 and document_start):
            r_ids = codec.scaffold_run(text[s:e])
            code = croles[s]
            plain[s] = (r_ids, bytes((Role.ACTION.code if code == EOT_CODE else code,)) * len(r_ids), 0)
            continue
        batch.append((s, e))
    encoded = encode_runs(codec, text, croles, batch, changes, document_start)
    encoded.update(plain)
    ids_out: list[int] = []
    roles_out = bytearray()
    straddled = 0
    for item in plan:
        if isinstance(item[0], int):
            r_ids, r_roles, r_straddled = encoded[item[0]]
            straddled += r_straddled
        else:
            r_ids, r_roles = item
        ids_out += r_ids
        roles_out += r_roles
    ids = np.fromiter(ids_out, dtype=np.int64, count=len(ids_out))
    role_ids = np.frombuffer(bytes(roles_out), dtype=np.int8).copy()
    return ids, role_ids, straddled


def encode_whole(codec: FragmentCodec, parts: Parts, document_start: bool) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``encode_parts`` in one call: the text between opaque parts each encoded whole, with the template's added
    tokens recognized; None when that is not provably the same as encoding each run literally.

    It is the same when the pipeline has an exact byte-length table (``codec.whole_bytes``: no added token that
    strips or matches words, no control id the model can spell), a document's start needs no dummy prefix (the
    pipeline has none, or the text starts with an added token: then no run is the first), every id has a
    fixed length and together they spell the text's bytes, and every added token found lies in text where it
    is recognized (template text; a non-special one in action text): then the added tokens are exactly those
    the runs are cut at, and what lies between them is each run, encoded as ``encode_runs`` encodes it. Roles
    follow from the byte lengths by the rule of ``role_boundaries.token_roles``."""
    text, table = parts.text, codec.whole_bytes
    if table is None or not text or (codec.space_symbol and codec.space_symbol in text):
        return None
    if parts.opaque:
        cuts = [c for c, _, _ in parts.opaque]
        bounds = [(a, b) for a, b in zip([0, *cuts], [*cuts, len(text)]) if b > a]
        raw: list[int] = []
        id_cuts = []  # where each piece's ids end
        for e in codec.scaffold.encode_batch_fast([text[a:b] for a, b in bounds], add_special_tokens=False):
            raw += e.ids
            id_cuts.append(len(raw))
        if len(id_cuts) != len(bounds) or len(set(id_cuts)) != len(id_cuts):
            return None  # a piece without ids (nothing to place its characters on)
    else:  # one piece, the common case
        bounds = [(0, len(text))]
        raw = codec.scaffold.encode_batch_fast([text], add_special_tokens=False)[0].ids
        id_cuts = [len(raw)]
    if not raw:
        return None
    ids = np.fromiter(raw, dtype=np.int64, count=len(raw))
    try:
        lens = table[ids]
    except IndexError:  # an id past the table
        return None
    if lens.min() <= 0 or (
        document_start and bounds[0][0] == 0 and not codec.same_start and not codec.is_added[ids[0]]
    ):
        return None
    ends = np.cumsum(lens)
    cr = np.frombuffer(parts.roles, dtype=np.int8)
    kd = np.frombuffer(parts.kinds, dtype=np.int8)
    r_at = np.flatnonzero(cr[1:] != cr[:-1]) + 1  # role boundaries (characters)
    k_at = np.flatnonzero(kd[1:] != kd[:-1]) + 1  # kind boundaries
    piece_ends = [b for _, b in bounds]
    if text.isascii():  # character positions are byte positions
        r_bytes, k_bytes, piece_bytes = r_at, k_at, piece_ends
    else:
        r_bytes, k_bytes = (np.array(_utf8_offsets(text, x.tolist()), dtype=np.int64) for x in (r_at, k_at))
        piece_bytes = _utf8_offsets(text, piece_ends)
    # each piece's ids spell exactly its bytes
    if len(bounds) == 1:
        if ends[-1] != piece_bytes[0]:
            return None
    elif not np.array_equal(ends[np.array(id_cuts) - 1], piece_bytes):
        return None
    added = np.flatnonzero(codec.is_added[ids])
    if len(added) and (len(k_bytes) or kd[0] != SCAFFOLD):  # each inside one piece of template (or action) text
        a_end = ends[added]
        first = np.searchsorted(k_bytes, a_end - lens[added], side="right")
        last = np.searchsorted(k_bytes, a_end - 1, side="right")
        k = np.concatenate([kd[:1], kd[k_at]])[first]
        ok = (first == last) & ((k == SCAFFOLD) | ((k == ACTION_BODY) & ~codec.is_special[ids[added]]))
        if not ok.all():
            return None
    # roles by the rule of role_boundaries.token_roles: the role of the token's bytes, context (counted) across a boundary
    codes = np.concatenate([cr[:1], cr[r_at]])
    codes[codes == EOT_CODE] = Role.ACTION.code
    straddled = 0
    if len(r_at):
        at = np.searchsorted(ends, r_bytes, side="left")  # the token holding each boundary's last byte
        # a role starts at the token after the one holding the previous role's last byte
        roles = np.repeat(codes, np.diff(at + 1, prepend=0, append=len(ids)))
        inside = at[ends[at] != r_bytes]  # a boundary inside a token: it straddles (sorted; once per token)
        if len(inside):
            inside = inside[np.concatenate([[True], inside[1:] != inside[:-1]])]
            roles[inside] = _CTX
            straddled = len(inside)
    else:
        roles = np.full(len(ids), codes[0], dtype=np.int8)
    if not parts.opaque:
        return ids, roles, straddled
    # the opaque parts' ids go where their text position is (the piece boundaries)
    out_ids: list[np.ndarray] = []
    out_roles: list[np.ndarray] = []
    prev = 0
    pos = dict(zip((b for _, b in bounds), id_cuts))
    for cpos, o_ids, o_roles in parts.opaque:
        t = pos.get(cpos, 0 if cpos == 0 else prev)
        out_ids += [ids[prev:t], np.asarray(o_ids, dtype=np.int64)]
        out_roles += [roles[prev:t], np.frombuffer(bytes(o_roles), dtype=np.int8)]
        prev = t
    out_ids.append(ids[prev:])
    out_roles.append(roles[prev:])
    return np.concatenate(out_ids), np.concatenate(out_roles).astype(np.int8), straddled


def _utf8_offsets(text: str, points: list[int]) -> list[int]:
    """The UTF-8 byte offset in ``text`` of each of the ascending character positions ``points``: only the
    text between them is encoded, with no array per character."""
    out: list[int] = []
    prev = size = 0
    for p in points:
        piece = text[prev:p]
        size += len(piece) if piece.isascii() else len(piece.encode("utf-8"))
        out.append(size)
        prev = p
    return out


_STRUCTURE_MAX = 4096


def _structure(codec: FragmentCodec, text: str, roles: bytes) -> tuple[int, tuple[list[int], bytes], int] | None:
    """Template text between two bodies, as ``(head, fixed, tail)``: the lengths of the text before its first
    and after its last added token (they join the neighbouring runs) and the ids and role codes of everything
    from the first to the last added token. None when it has no added token, or a run between two added tokens
    with more than one role. Memoized per tokenizer (``codec``) by text and roles: template text repeats."""
    key = (text, roles)
    memo = codec.structures
    hit = memo.get(key, _MISSING)
    if hit is not _MISSING:
        return hit  # type: ignore[no-any-return]
    spans = codec.added_spans(text)
    out: tuple[int, tuple[list[int], bytes], int] | None = None
    if spans:
        ids: list[int] = []
        codes = bytearray()
        prev = spans[0][0]
        for a, b, tid in spans:
            if a > prev:  # a run between two added tokens
                if roles[prev:a].count(roles[prev]) != a - prev:
                    break
                r_ids = codec.scaffold_run(text[prev:a])
                code = roles[prev]
                ids += r_ids
                codes += bytes((Role.ACTION.code if code == EOT_CODE else code,)) * len(r_ids)
            ids.append(tid)
            code = roles[a]
            codes.append(Role.ACTION.code if code == EOT_CODE else code)
            prev = b
        else:
            out = (spans[0][0], (ids, bytes(codes)), len(text) - spans[-1][1])
    if len(memo) >= _STRUCTURE_MAX:
        memo.clear()
    memo[key] = out
    return out


_MISSING = object()


def _within(points: list[int], s: int, e: int) -> bool:
    """Whether a sorted list of positions has one strictly inside ``(s, e)``."""
    return bisect.bisect_left(points, e) - bisect.bisect_right(points, s) > 0
