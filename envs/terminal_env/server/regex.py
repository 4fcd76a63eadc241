"""POSIX regular expressions (GNU grep BRE/ERE/fixed/perl syntax) matched by RE2, a linear-time engine.

Patterns are translated to RE2 syntax and run by ``google-re2``: matching time is linear in the line length for
every pattern (no backtracking, so ``(a+)+$`` is as cheap as ``a``) and the engine's memory is capped. What RE2
cannot do in linear time (backreferences, lookaround) is refused by the harness instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import re2

MAX_PATTERN = 1024
_ENGINE_MEMORY = 8 << 20  # bytes RE2 may use for one compiled pattern (its DFA cache included)
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
_BACKREF = re.compile(r"(?<!\\)(?:\\\\)*\\[1-9]")


class BadRegex(Exception):
    """Invalid pattern; ``str(e)`` is GNU grep's wording (without the ``grep: `` prefix)."""


class TooComplex(Exception):
    """The pattern needs a backtracking engine (backreferences, lookaround) or is too long; refused by the harness."""


@dataclass
class Matcher:
    regex: re2._Regexp
    group: int  # the group that is the match proper (1 under -w, whose boundaries the pattern consumes)

    @staticmethod
    def cost(line: str) -> int:
        """Work units to charge before matching ``line``: RE2 is linear in its length."""
        return 1 + len(line) // 100

    def search(self, line: str) -> bool:
        return self.regex.search(line) is not None

    def matches(self, line: str) -> Iterator[str]:
        """The non-empty matches in ``line``, left to right (``grep -o``)."""
        for m in self.regex.finditer(line):
            if m.group(self.group):
                yield m.group(self.group)


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
    """GNU grep syntax (``G`` basic, ``E`` extended, ``F`` fixed, ``P`` perl) -> RE2 (Python-like) syntax."""
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


def compile_grep(patterns: list[str], mode: str, *, icase: bool, word: bool, line: bool, only: bool) -> Matcher:
    """Compile grep patterns (several ``-e`` are alternatives) into one RE2 matcher."""
    if sum(len(p) for p in patterns) > MAX_PATTERN:
        raise TooComplex
    parts = [translate(p, mode) for p in patterns]
    if any(_BACKREF.search(x) for x in parts):
        raise TooComplex
    body = "|".join(f"(?:{x})" for x in parts) if len(parts) > 1 else parts[0]
    group = 0
    if word:
        body, group = rf"(?:^|\W)({body})(?:\W|$)", 1
    if line:
        body = rf"^(?:{body})$"
    options = re2.Options()
    options.max_mem = _ENGINE_MEMORY
    options.case_sensitive = not icase
    options.log_errors = False
    try:
        rx = re2.compile(body, options)
    except re2.error as e:
        message = str(e)
        if "perl operator" in message or ("invalid escape" in message and mode == "P"):
            raise TooComplex from None
        raise BadRegex(_gnu_message(message)) from None
    return Matcher(rx, group)


def _gnu_message(err: str) -> str:
    """GNU grep's wording for an RE2 (or Python ``re``) parse error."""
    if "missing )" in err or "unbalanced parenthesis" in err or "unexpected )" in err:
        return "Unmatched ( or \\("
    if "unterminated character set" in err or "missing ]" in err:
        return "Unmatched [, [^, [:, [., or [="
    if "nothing to repeat" in err or "multiple repeat" in err or "repetition operator" in err:
        return "Invalid preceding regular expression"
    if "pattern too large" in err:
        return "Regular expression too big"
    if "bad escape" in err or "invalid escape" in err or "trailing \\" in err:
        return "Invalid back reference" if "\\1" in err else "Trailing backslash"
    if "repetition size" in err or "min repeat greater than max" in err:
        return "Invalid content of \\{\\}"
    return "Invalid regular expression"
