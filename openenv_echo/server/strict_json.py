"""Strict JSON for requests and frames: RFC 8259 numbers only (no NaN/Infinity, no overflow), bounded nesting.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``1e999`` (as inf), which no strict peer can read back and
which the server could never echo in a valid reply; it also nests as deep as its recursion limit allows. Every
body and frame the server reads goes through ``loads`` instead, and is refused with a reason when it breaks a rule.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


class BadJson(ValueError):
    """The text is not strict JSON within the limits; ``str(e)`` says why."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJson(f"out of range: the number {text[:40]} does not fit a 64-bit float")
    return value


def _no_constant(name: str) -> Any:
    raise BadJson(f"not strict JSON: {name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)  # built once: loads is on the hot path


def loads(text: str | bytes, max_depth: int) -> Any:
    """Parse ``text``; raises ``BadJson`` for invalid UTF-8 or JSON, non-finite numbers or nesting deeper than
    ``max_depth`` arrays/objects."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadJson(f"not valid UTF-8 (byte {e.start})") from None
    try:
        value = _DECODER.decode(text)
    except BadJson:
        raise
    except RecursionError:
        raise BadJson(f"nested deeper than {max_depth} levels") from None
    except ValueError as e:  # syntax, or an integer too long to convert
        raise BadJson(f"not valid JSON: {e}") from None
    if _too_deep(text, max_depth):
        raise BadJson(f"nested deeper than {max_depth} levels")
    return value


def _too_deep(text: str, max_depth: int) -> bool:
    """Whether valid JSON ``text`` nests deeper than ``max_depth``, in ``max_depth`` passes of C-speed string ops."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text)).replace("{", "[").replace("}", "]")
    for _ in range(max_depth):
        if not brackets:
            return False
        brackets = brackets.replace("[]", "")  # removes every innermost level at once
    return bool(brackets)
