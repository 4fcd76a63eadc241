"""POSIX regular expressions (GNU grep BRE/ERE) translated to Python ``re``, with a complexity guard.

Python's backtracking engine can take exponential time on nested quantifiers (``(a+)+$``) and high-degree
polynomial time on runs of unbounded repeats (``.*.*.*z``). Since commands run in-process, patterns are analysed
before use: nested repeats, ambiguous alternation under a repeat, backreferences and more than three unbounded
repeats are refused, and the per-line cost of what remains is estimated (deterministically, from the line length
and the number of repeats) and charged to the shell's work budget, so no pattern can stall the server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

try:  # Python >= 3.11
    import re._constants as _c  # type: ignore[import-not-found]
    import re._parser as _p  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

MAX_PATTERN = 1024
_POSIX = {
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r" \t\n\r\f\v",
    "blank": r" \t",
    "punct": r"!-/:-@\[-`{-~",
    "xdigit": "0-9A-Fa-f",
    "print": r" -~",
    "graph": r"!-~",
    "cntrl": r"\x00-\x1f\x7f",
    "word": r"\w",
}
# Worst-case engine time of a line of length L is about L**(k+1) / D[k] microseconds for k unbounded repeats,
# measured on crafted inputs; repeats of groups/alternations ("slow") backtrack ~10-30x slower than repeats of
# single characters or classes ("fast").
_DIVISOR_FAST = {1: 300, 2: 1200, 3: 4000}
_DIVISOR_SLOW = {1: 25, 2: 60, 3: 250}
_SINGLE = {_c.LITERAL, _c.NOT_LITERAL, _c.IN, _c.ANY, _c.CATEGORY}


class BadRegex(Exception):
    """Invalid pattern; ``str(e)`` is GNU grep's wording (without the ``grep: `` prefix)."""


class TooComplex(Exception):
    """The pattern could backtrack catastrophically; refused by the harness."""


@dataclass
class Matcher:
    regex: re.Pattern[str]
    repeats: int  # unbounded repeats left after simplification
    required: tuple[str, ...]  # literal substrings every match must contain
    icase: bool
    chunks: tuple[str, ...] | None = None  # pattern is chunk1.*chunk2.*...: matched without the regex engine
    slow: bool = False  # some repeat is over a group or alternation

    def cost(self, line: str) -> int:
        """Work units to charge before matching ``line`` (about a microsecond of worst-case engine time each)."""
        n = len(line)
        base = 1 + n // 100
        if self.repeats == 0 or self.chunks is not None or self._prefiltered(line):
            return base
        return base + n ** (self.repeats + 1) // (_DIVISOR_SLOW if self.slow else _DIVISOR_FAST)[self.repeats]

    def _prefiltered(self, line: str) -> bool:
        """True when a required literal is missing: the line cannot match and the engine is never run."""
        if not self.required:
            return False
        hay = line.lower() if self.icase else line
        return any(r not in hay for r in self.required)

    def search(self, line: str) -> bool:
        if self.chunks is not None:  # literal chunks in order: linear time
            hay = line.lower() if self.icase else line
            pos = 0
            for c in self.chunks:
                pos = hay.find(c, pos)
                if pos < 0:
                    return False
                pos += len(c)
            return True
        if self._prefiltered(line):
            return False
        return self.regex.search(line) is not None


def _bracket(body: str) -> str:
    out = []
    i = 0
    if body.startswith("^"):
        out.append("^")
        i = 1
    if body[i : i + 1] == "]":
        out.append(r"\]")
        i += 1
    while i < len(body):
        ch = body[i]
        if ch == "[" and body[i + 1 : i + 2] in (":", ".", "="):
            end = body.find(body[i + 1] + "]", i + 2)
            name = body[i + 2 : end]
            if body[i + 1] == ":":
                if name not in _POSIX:
                    raise BadRegex("Invalid character class name")
                out.append(_POSIX[name])
            else:
                out.append(re.escape(name))
            i = end + 2
            continue
        out.append("\\" + ch if ch in "\\[&~|" else ch)
        i += 1
    return "[" + "".join(out) + "]"


def translate(pattern: str, mode: str) -> str:
    """GNU grep syntax (``G`` basic, ``E`` extended, ``F`` fixed, ``P`` perl) -> Python ``re`` syntax."""
    if mode == "F":
        return re.escape(pattern)
    if mode == "P":
        return pattern
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                if pattern[j] == "[" and j + 1 < n and pattern[j + 1] in ":.=":
                    k = pattern.find(pattern[j + 1] + "]", j + 2)
                    if k < 0:
                        raise BadRegex("Unmatched [, [^, [:, [., or [=")
                    j = k + 2
                    continue
                j += 1
            if j >= n:
                raise BadRegex("Unmatched [, [^, [:, [., or [=")
            out.append(_bracket(pattern[i + 1 : j]))
            i = j + 1
        elif c == "\\":
            if i + 1 >= n:
                raise BadRegex("Trailing backslash")
            d = pattern[i + 1]
            if mode == "G" and d in "(){}|+?":
                out.append(d)
            elif d in "<>":
                out.append(r"\b")
            elif d in "wWsSbB" or d in "0123456789":
                out.append("\\" + d)
            else:
                out.append(re.escape(d))
            i += 2
        elif mode == "G" and c in "(){}|+?":
            out.append("\\" + c)
            i += 1
        elif c == "*" and (not out or out[-1] in ("(", "|", "^")) and mode == "G":
            out.append(r"\*")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


_CATEGORIES = {
    _c.CATEGORY_DIGIT: str.isdigit,
    _c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdigit(),
    _c.CATEGORY_SPACE: str.isspace,
    _c.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    _c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    _c.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
}


def _matches_char(op: object, av: object, ch: str) -> bool | None:
    """Whether the single-character item ``(op, av)`` matches ``ch`` (None when unsure)."""
    if op == _c.LITERAL:
        return chr(av) in (ch, ch.swapcase())  # type: ignore[arg-type]
    if op == _c.NOT_LITERAL:
        return chr(av) not in (ch, ch.swapcase())  # type: ignore[arg-type]
    if op == _c.ANY:
        return True
    if op == _c.CATEGORY:
        fn = _CATEGORIES.get(av)  # type: ignore[call-overload]
        return None if fn is None else fn(ch)
    if op == _c.IN:
        negate, hit = False, False
        for iop, iav in av:  # type: ignore[attr-defined]
            if iop == _c.NEGATE:
                negate = True
            elif iop == _c.RANGE:
                lo, hi = iav
                hit = hit or any(lo <= ord(x) <= hi for x in (ch, ch.swapcase()))
            else:
                m = _matches_char(iop, iav, ch)
                if m is None:
                    return None
                hit = hit or m
        return hit != negate
    return None


def _anchored(body: object, nxt: tuple | None) -> bool:
    """A repeat of one character item followed by a literal it cannot match (``[0-9]+\\.``) splits one way only."""
    if nxt is None or nxt[0] != _c.LITERAL or len(body) != 1:  # type: ignore[arg-type]
        return False
    op, av = body[0]  # type: ignore[index]
    return _matches_char(op, av, chr(nxt[1])) is False


def _analyze(items: object, under_repeat: bool) -> int:
    """Count unbounded repeats; raise TooComplex on constructs that can backtrack catastrophically."""
    count = 0
    seq = list(items)  # type: ignore[call-overload]
    for i, (op, av) in enumerate(seq):
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) or op == getattr(_c, "POSSESSIVE_REPEAT", None):
            lo, hi, sub = av
            unbounded = hi is _c.MAXREPEAT or hi - lo > 20  # a fixed count like x{1000} cannot backtrack
            if unbounded and _anchored(sub, seq[i + 1] if i + 1 < len(seq) else None):
                unbounded = False
            if under_repeat and not lo == hi == 1:
                raise TooComplex  # any quantifier inside a repeated group: (a+)+, (a?){30}a{30}, (ab?)*
            count += unbounded + _analyze(sub, under_repeat or hi > 1)
        elif op == _c.SUBPATTERN:
            count += _analyze(av[-1], under_repeat)
        elif op == _c.BRANCH:
            alts = av[1]
            if under_repeat:
                firsts = []
                for alt in alts:
                    if not alt or alt[0][0] != _c.LITERAL:
                        raise TooComplex
                    firsts.append(alt[0][1])
                if len(set(firsts)) != len(firsts):
                    raise TooComplex
            count += max((_analyze(alt, under_repeat) for alt in alts), default=0)
        elif op in (_c.GROUPREF, _c.GROUPREF_EXISTS):
            raise TooComplex
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            if under_repeat:
                raise TooComplex
            count += _analyze(av[1], under_repeat)
        elif op == getattr(_c, "ATOMIC_GROUP", None):
            count += _analyze(av, under_repeat)
    return count


def _slow(items: object) -> bool:
    """Whether some repeat's body is more than one character item (a group, an alternation)."""
    for op, av in items:  # type: ignore[attr-defined]
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) or op == getattr(_c, "POSSESSIVE_REPEAT", None):
            body = av[2]
            if len(body) != 1 or body[0][0] not in _SINGLE:
                return True
        elif (
            (op == _c.SUBPATTERN and _slow(av[-1]))
            or (op == _c.BRANCH and any(_slow(a) for a in av[1]))
            or (op in (_c.ASSERT, _c.ASSERT_NOT) and _slow(av[1]))
        ):
            return True
    return False


def _chunks(items: object, icase: bool) -> tuple[str, ...] | None:
    """``("ab", "cd")`` when the pattern is only literals separated by ``.*`` (``ab.*cd``), else None."""
    chunks: list[str] = []
    cur: list[str] = []
    for op, av in items:  # type: ignore[attr-defined]
        if op == _c.LITERAL:
            cur.append(chr(av))
        elif op == _c.MAX_REPEAT and av[0] == 0 and av[1] is _c.MAXREPEAT and len(av[2]) == 1 and av[2][0][0] == _c.ANY:
            chunks.append("".join(cur))
            cur = []
        else:
            return None
    chunks.append("".join(cur))
    out = tuple(c.lower() if icase else c for c in chunks if c)
    return out if out and (not icase or all(c.isascii() for c in out)) else None


def _required(items: object, icase: bool) -> tuple[str, ...]:
    """Literal runs at the top level of the pattern (each must occur in any matching line)."""
    runs: list[str] = []
    cur: list[str] = []
    for op, av in items:  # type: ignore[attr-defined]
        if op == _c.LITERAL:
            cur.append(chr(av))
            continue
        if cur:
            runs.append("".join(cur))
            cur = []
    if cur:
        runs.append("".join(cur))
    return tuple(r.lower() if icase else r for r in runs if r)


_LEAD = re.compile(r"^\^?(?:\.\*)+(?![?+*{])")
_TRAIL = re.compile(r"(?<!\\)(?:\.\*)+\$?$")


def compile_grep(patterns: list[str], mode: str, *, icase: bool, word: bool, line: bool, only: bool) -> Matcher:
    """Compile grep patterns (several ``-e`` are alternatives) into one guarded matcher."""
    if sum(len(p) for p in patterns) > MAX_PATTERN:
        raise TooComplex
    parts = []
    repeats = 0
    required: tuple[str, ...] = ()
    chunks: tuple[str, ...] | None = None
    slow = False
    for p in patterns:
        py = translate(p, mode)
        if not only and not word and not line:
            # a leading or trailing .* never changes whether a line matches (lines hold no newline)
            py = _TRAIL.sub("", _LEAD.sub("", py))
        try:
            tree = _p.parse(py, re.IGNORECASE if icase else 0)
        except re.error as e:
            raise BadRegex(_gnu_message(str(e))) from None
        except (OverflowError, RecursionError):
            raise TooComplex from None
        k = _analyze(tree, False)
        if k > 3:
            raise TooComplex
        repeats = max(repeats, k)
        slow = slow or _slow(tree)
        if len(patterns) == 1:
            required = _required(tree, icase)
            if not only and not word and not line:
                chunks = _chunks(tree, icase)
        parts.append(py)
    body = "|".join(f"(?:{x})" for x in parts) if len(parts) > 1 else parts[0]
    if word:
        body = rf"(?<!\w)(?:{body})(?!\w)"
    if line:
        body = rf"^(?:{body})$"
    try:
        rx = re.compile(body, re.IGNORECASE if icase else 0)
    except re.error as e:
        raise BadRegex(_gnu_message(str(e))) from None
    except (OverflowError, RecursionError):
        raise TooComplex from None
    return Matcher(rx, repeats, required, icase, chunks, slow)


def _gnu_message(err: str) -> str:
    if "missing )" in err or "unbalanced parenthesis" in err:
        return "Unmatched ( or \\("
    if "unterminated character set" in err:
        return "Unmatched [, [^, [:, [., or [="
    if "nothing to repeat" in err or "multiple repeat" in err:
        return "Invalid preceding regular expression"
    if "bad escape" in err:
        return "Invalid back reference" if "\\1" in err else "Trailing backslash"
    if "min repeat greater than max" in err or "the repetition number is too large" in err:
        return "Invalid content of \\{\\}"
    return "Invalid regular expression"
