"""Compare two assemblies of one conversation (typically TITO vs offline full render): where and why.

The two can legitimately differ. TITO encodes each piece (scaffold, body, action) on its own, exactly as the
sampler saw it; a full render lets BPE merge across piece boundaries, turns special-token *text* inside
content into special tokens, and follows any rewriting the template does. ``compare_assemblies`` aligns the
id sequences and reports every differing span with the decoded text on both sides, the roles, and a reason.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from ..roles import Role
from .fragment_encoding import fragment_codec
from .tokenized import TokenizedTrajectory

SEGMENTATION = "segmentation"
TEXT = "text"
ROLE = "role"


@dataclass
class Difference:
    """One differing span: ``a_*`` from the first assembly, ``b_*`` from the second (token index ranges)."""

    kind: str  # segmentation | text | role
    a_span: tuple[int, int]
    b_span: tuple[int, int]
    a_text: str
    b_text: str
    a_roles: list[str]
    b_roles: list[str]
    reason: str

    def __str__(self) -> str:
        return (
            f"[{self.kind}] a[{self.a_span[0]}:{self.a_span[1]}] {self.a_text!r} {self.a_roles} vs "
            f"b[{self.b_span[0]}:{self.b_span[1]}] {self.b_text!r} {self.b_roles}: {self.reason}"
        )


@dataclass
class AssemblyComparison:
    a_method: str
    b_method: str
    identical_ids: bool
    identical_roles: bool
    differences: list[Difference] = field(default_factory=list)

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.differences:
            out[d.kind] = out.get(d.kind, 0) + 1
        return out

    def report(self) -> str:
        head = (
            f"{self.a_method} vs {self.b_method}: ids {'identical' if self.identical_ids else 'differ'}, "
            f"roles {'identical' if self.identical_roles else 'differ'}; {len(self.differences)} differences "
            f"{self.kinds()}"
        )
        return "\n".join([head, *(f"  {d}" for d in self.differences)])


def _role_names(tt: TokenizedTrajectory, lo: int, hi: int) -> list[str]:
    return [Role.from_code(int(c)).value for c in tt.role_ids[lo:hi]]


def _reason(a_text: str, b_text: str, codec: Any, a_ids: list[int], b_ids: list[int]) -> tuple[str, str]:
    a_special = sum(i in codec.special_ids for i in a_ids)
    b_special = sum(i in codec.special_ids for i in b_ids)
    if a_special != b_special:
        return TEXT, (
            "special-token text inside content: encoded as plain text on one side (content is literal) and as "
            "a special token on the other (full render)"
        )
    if a_text == b_text:
        return SEGMENTATION, (
            "same text, different tokens: one side encoded the pieces separately, the other let BPE merge "
            "across a piece boundary (the merged token straddles roles and takes the straddle role)"
        )
    return TEXT, "different text: the template rewrote content, or a start-of-sequence token differs"


def compare_assemblies(a: TokenizedTrajectory, b: TokenizedTrajectory, tokenizer: Any) -> AssemblyComparison:
    """Align ``a`` and ``b`` token by token and explain each difference (see the module docstring)."""
    codec = fragment_codec(tokenizer)
    ai, bi = a.input_ids.tolist(), b.input_ids.tolist()
    out = AssemblyComparison(a.method, b.method, ai == bi, False)
    sm = difflib.SequenceMatcher(None, ai, bi, autojunk=False)
    for op, a0, a1, b0, b1 in sm.get_opcodes():
        if op == "equal":
            ar, br = a.role_ids[a0:a1], b.role_ids[b0:b1]
            diff = (ar != br).nonzero()[0]
            # group consecutive differing positions into runs
            start = None
            for k, idx in enumerate(diff):
                if start is None:
                    start = idx
                if k + 1 == len(diff) or diff[k + 1] != idx + 1:
                    lo, hi = a0 + start, a0 + idx + 1
                    blo, bhi = b0 + start, b0 + idx + 1
                    ids = ai[lo:hi]
                    special = any(i in codec.special_ids for i in ids)
                    reason = (
                        "same token, different role: a special token inside content is context in a full render"
                        if special
                        else "same token, different role: the other side's character span straddles a role boundary "
                        "or the role policy differs"
                    )
                    out.differences.append(
                        Difference(
                            ROLE,
                            (lo, hi),
                            (blo, bhi),
                            codec.decode(ids),
                            codec.decode(bi[blo:bhi]),
                            _role_names(a, lo, hi),
                            _role_names(b, blo, bhi),
                            reason,
                        )
                    )
                    start = None
            continue
        at, bt = codec.decode(ai[a0:a1]), codec.decode(bi[b0:b1])
        kind, reason = _reason(at, bt, codec, ai[a0:a1], bi[b0:b1])
        out.differences.append(
            Difference(
                kind,
                (a0, a1),
                (b0, b1),
                at,
                bt,
                _role_names(a, a0, a1),
                _role_names(b, b0, b1),
                reason,
            )
        )
    out.identical_roles = out.identical_ids and not out.differences
    return out
