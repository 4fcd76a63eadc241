"""GNU-style option parsing for the virtual commands (``-la``, ``-n 5``, ``-n5``, ``--max-depth=1``, ``--``).

Errors carry the exact text GNU tools print (``ls: invalid option -- 'z'`` + the ``Try ... --help`` line).
"""

from __future__ import annotations


class OptError(Exception):
    """Bad usage; ``str(e)`` is the complete stderr text (with trailing newline)."""


def getopt(
    cmd: str,
    args: list[str],
    flags: str = "",
    valued: str = "",
    longs: dict[str, bool] | None = None,
    *,
    numeric: bool = False,
    permute: bool = True,
) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Parse ``args``: ``flags`` are value-less short options, ``valued`` take a value, ``longs`` maps long names
    to whether they take a value. Returns ``([(opt, value)], operands)`` with opts as ``-x`` / ``--name``;
    ``numeric`` accepts ``-5`` as ``("-NUM", "5")`` (head/tail)."""
    longs = longs or {}
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            operands.extend(args[i + 1 :])
            break
        if a.startswith("--") and len(a) > 2:
            name, eq, val = a[2:].partition("=")
            cands = [name] if name in longs else [k for k in longs if k.startswith(name)]
            if len(cands) != 1:
                kind = "ambiguous" if len(cands) > 1 else "unrecognized"
                raise OptError(f"{cmd}: {kind} option '{a}'\nTry '{cmd} --help' for more information.\n")
            name = cands[0]
            if longs[name]:
                if not eq:
                    if i + 1 >= len(args):
                        raise OptError(
                            f"{cmd}: option '--{name}' requires an argument\nTry '{cmd} --help' for more information.\n"
                        )
                    i += 1
                    val = args[i]
                opts.append((f"--{name}", val))
            else:
                if eq:
                    raise OptError(
                        f"{cmd}: option '--{name}' doesn't allow an argument\n"
                        f"Try '{cmd} --help' for more information.\n"
                    )
                opts.append((f"--{name}", None))
        elif a.startswith("-") and len(a) > 1:
            if numeric and digits(a[1:]):
                opts.append(("-NUM", a[1:]))
                i += 1
                continue
            j = 1
            while j < len(a):
                ch = a[j]
                if ch in valued:
                    val = a[j + 1 :]
                    if not val:
                        if i + 1 >= len(args):
                            raise OptError(
                                f"{cmd}: option requires an argument -- '{ch}'\n"
                                f"Try '{cmd} --help' for more information.\n"
                            )
                        i += 1
                        val = args[i]
                    opts.append((f"-{ch}", val))
                    break
                if ch in flags:
                    opts.append((f"-{ch}", None))
                    j += 1
                    continue
                raise OptError(f"{cmd}: invalid option -- '{ch}'\nTry '{cmd} --help' for more information.\n")
        else:
            operands.append(a)
            if not permute:
                operands.extend(args[i + 1 :])
                break
        i += 1
    return opts, operands


def digits(s: str) -> bool:
    """ASCII digits only (``str.isdigit`` also accepts ``²`` and friends, which ``int`` rejects)."""
    return s.isascii() and s.isdigit()


def has(opts: list[tuple[str, str | None]], *names: str) -> bool:
    return any(o in names for o, _ in opts)


def last(opts: list[tuple[str, str | None]], *names: str) -> str | None:
    val = None
    for o, v in opts:
        if o in names:
            val = v
    return val
