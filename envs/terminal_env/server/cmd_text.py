"""Text commands: grep, sort, uniq, cut, echo, printf, yes — GNU output formats, errors and exit codes."""

from __future__ import annotations

import fnmatch
import re
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from .opts import OptError, digits, getopt, has, last
from .regex import MAX_PATTERN, BadRegex, Matcher, TooComplex, compile_grep
from .shell import IO, Refused, Shell, _file_lines
from .vfs import Dir, File

Out = Generator[str, None, int]

_GREP_LONGS = {
    "ignore-case": False,
    "line-number": False,
    "count": False,
    "invert-match": False,
    "recursive": False,
    "dereference-recursive": False,
    "files-with-matches": False,
    "files-without-match": False,
    "extended-regexp": False,
    "fixed-strings": False,
    "basic-regexp": False,
    "perl-regexp": False,
    "word-regexp": False,
    "line-regexp": False,
    "only-matching": False,
    "quiet": False,
    "silent": False,
    "no-messages": False,
    "with-filename": False,
    "no-filename": False,
    "regexp": True,
    "max-count": True,
    "after-context": True,
    "before-context": True,
    "context": True,
    "include": True,
    "exclude": True,
    "exclude-dir": True,
    "color": True,
    "colour": True,
    "text": False,
    "binary-files": True,
}


@dataclass
class _Grep:
    """What one grep command line asks for, parsed."""

    name: str
    ops: list[str]
    matcher: Matcher
    invert: bool
    count: bool
    listing: str | None  # "l" (-l: files with a match), "L" (-L: files without), or None
    only: bool
    quiet: bool
    silent: bool
    numbers: bool
    recursive: bool
    with_filename: bool  # -H
    no_filename: bool  # -h
    after: int
    before: int
    max_count: int | None
    includes: list[str]
    excludes: list[str]
    exclude_dirs: list[str]


def grep(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    g = _grep_options(io, argv)
    if isinstance(g, int):
        return g
    targets, errors, named = _grep_targets(sh, io, g)
    with_name = (g.with_filename or named or g.recursive) and not g.no_filename
    any_selected = False
    for shown, node in targets:
        if node is not None and node.binary:
            any_selected = (yield from _grep_binary(sh, io, g, shown, node, with_name)) or any_selected
            continue
        lines = iter(stdin or ()) if node is None else _file_lines(sh, node)
        selected = yield from _grep_lines(sh, g, lines, shown if with_name else "")
        if selected is None:
            return 0  # -q: the first match decides
        any_selected = any_selected or selected > 0
        if g.count:
            yield (f"{shown}:" if with_name else "") + f"{selected}\n"
        elif (g.listing == "l" and selected) or (g.listing == "L" and not selected):
            yield shown + "\n"
    if errors and not (g.quiet and any_selected):
        return 2
    return 0 if any_selected else 1


def _grep_options(io: IO, argv: list[str]) -> _Grep | int:
    """The parsed command line, or the exit status of a usage error (reported on ``io``)."""
    name = argv[0]
    try:
        opts, ops = getopt(name, argv[1:], flags="inRrlLcvEFGPwxoqsHhaIZz", valued="emABCf", longs=_GREP_LONGS)
    except OptError as e:
        io.err(
            str(e).replace("Try 'grep --help'", f"Usage: {name} [OPTION]... PATTERNS [FILE]...\nTry '{name} --help'")
        )
        return 2
    mode = {"egrep": "E", "fgrep": "F"}.get(name, "G")
    for o, _ in opts:
        mode = {
            "-E": "E",
            "--extended-regexp": "E",
            "-F": "F",
            "--fixed-strings": "F",
            "-G": "G",
            "--basic-regexp": "G",
            "-P": "P",
            "--perl-regexp": "P",
        }.get(o, mode)
    if has(opts, "-f"):
        raise Refused("grep -f (patterns from a file) is not supported by this sandbox's grep")
    patterns = [v or "" for o, v in opts if o in ("-e", "--regexp")]
    if not patterns:
        if not ops:
            io.err(f"Usage: {name} [OPTION]... PATTERNS [FILE]...\nTry '{name} --help' for more information.\n")
            return 2
        patterns = ops.pop(0).split("\n")
    ints = {}
    for key, names in (
        ("m", ("-m", "--max-count")),
        ("A", ("-A", "--after-context")),
        ("B", ("-B", "--before-context")),
        ("C", ("-C", "--context")),
    ):
        v = last(opts, *names)
        if v is not None:
            if not digits(v):
                what = "max count" if key == "m" else "context length argument"
                io.err(f"{name}: invalid {what}\n" if key == "m" else f"{name}: {v}: invalid context length argument\n")
                return 2
            ints[key] = int(v)
    only = has(opts, "-o", "--only-matching")
    try:
        matcher = compile_grep(
            patterns,
            mode,
            icase=has(opts, "-i", "--ignore-case"),
            word=has(opts, "-w", "--word-regexp"),
            line=has(opts, "-x", "--line-regexp"),
            only=only,
        )
    except BadRegex as e:
        io.err(f"{name}: {e}\n")
        return 2
    except TooComplex:
        raise Refused(
            "grep: this sandbox's grep runs a linear-time regex engine: backreferences and lookaround are not "
            f"supported, and patterns are limited to {MAX_PATTERN} characters"
        ) from None
    return _Grep(
        name=name,
        ops=ops,
        matcher=matcher,
        invert=has(opts, "-v", "--invert-match"),
        count=has(opts, "-c", "--count"),
        listing=(
            "l"
            if has(opts, "-l", "--files-with-matches")
            else "L"
            if has(opts, "-L", "--files-without-match")
            else None
        ),
        only=only,
        quiet=has(opts, "-q", "--quiet", "--silent"),
        silent=has(opts, "-s", "--no-messages"),
        numbers=has(opts, "-n", "--line-number"),
        recursive=has(opts, "-r", "-R", "--recursive", "--dereference-recursive"),
        with_filename=has(opts, "-H", "--with-filename"),
        no_filename=has(opts, "-h", "--no-filename"),
        after=ints.get("A", ints.get("C", 0)),
        before=ints.get("B", ints.get("C", 0)),
        max_count=ints.get("m"),
        includes=[v or "" for o, v in opts if o == "--include"],
        excludes=[v or "" for o, v in opts if o == "--exclude"],
        exclude_dirs=[v or "" for o, v in opts if o == "--exclude-dir"],
    )


def _grep_targets(sh: Shell, io: IO, g: _Grep) -> tuple[list[tuple[str, File | None]], bool, bool]:
    """``(shown name, file or None for stdin)`` to search in order (directories walked under -r, filtered by
    --include/--exclude/--exclude-dir), whether an operand was missing or a directory, and whether there were
    several operands (which shows file names)."""
    targets: list[tuple[str, File | None]] = []
    errors = False
    if g.recursive and not g.ops:
        ops, implicit = ["."], True
    else:
        ops, implicit = g.ops or ["-"], False
    for op in ops:
        if op == "-":
            targets.append(("(standard input)", None))
            continue
        base, node, errno = sh.lookup(op)
        if node is None:
            if not g.silent:
                io.err(f"{g.name}: {op}: {errno}\n")
            errors = True
            continue
        if isinstance(node, Dir):
            if not g.recursive:
                if not g.silent:
                    io.err(f"{g.name}: {op}: Is a directory\n")
                errors = True
                continue
            for path, n in sh.m.fs.walk(base):
                sh.work.charge()
                if isinstance(n, Dir):
                    continue
                parts = path[len(base.rstrip("/")) + 1 :].split("/")
                if g.exclude_dirs and any(fnmatch.fnmatchcase(d, x) for d in parts[:-1] for x in g.exclude_dirs):
                    continue
                fname = parts[-1]
                if g.includes and not any(fnmatch.fnmatchcase(fname, x) for x in g.includes):
                    continue
                if any(fnmatch.fnmatchcase(fname, x) for x in g.excludes):
                    continue
                shown = path[len(base.rstrip("/")) + 1 :] if implicit else sh.display(op, base, path)
                assert isinstance(n, File)
                targets.append((shown, n))
        else:
            assert isinstance(node, File)
            targets.append((op, node))
    return targets, errors, len(ops) > 1


def _grep_binary(sh: Shell, io: IO, g: _Grep, shown: str, node: File, with_name: bool) -> Generator[str, None, bool]:
    """A binary file is one line to grep: "binary file matches" (on stderr), its name, or its count; True when
    selected."""
    text = "".join(node.lines())
    sh.work.charge()
    if g.matcher.search(text) != g.invert:
        if not g.quiet and not g.count and g.listing is None:
            io.err(f"{g.name}: {shown}: binary file matches\n")
        elif g.listing == "l":
            yield shown + "\n"
        elif g.count:
            yield (f"{shown}:" if with_name else "") + "1\n"
        return True
    if g.count:
        yield (f"{shown}:" if with_name else "") + "0\n"
    elif g.listing == "L":
        yield shown + "\n"
    return False


def _grep_lines(sh: Shell, g: _Grep, lines: Iterator[str], prefix: str) -> Generator[str, None, int | None]:
    """Print the selected lines of one input (with -n numbers, -A/-B/-C context, -o matches, -m limit) unless
    counting or listing; the number selected, or None at the first match under -q."""
    matcher, invert, count, numbers = g.matcher, g.invert, g.count, g.numbers
    before, after = g.before, g.after
    selected = 0
    last_printed = 0
    pending_after = 0
    before_buf: deque[tuple[int, str]] = deque(maxlen=before or 1)
    for no, raw in enumerate(lines, 1):
        line = raw[:-1] if raw.endswith("\n") else raw
        sh.work.charge(matcher.cost(line))
        hit = matcher.search(line) != invert
        if hit:
            selected += 1
            if g.quiet:
                return None
            if g.listing is not None:
                break
            if not count:
                if before or after:
                    first = before_buf[0][0] if before and before_buf else no
                    if last_printed and first > last_printed + 1:
                        yield "--\n"
                    for bno, bline in before_buf if before else ():
                        yield _fmt(prefix, bno, bline, "-", numbers)
                    before_buf.clear()
                if g.only and not invert:
                    for hit_text in matcher.matches(line):
                        yield _fmt(prefix, no, hit_text, ":", numbers)
                else:
                    yield _fmt(prefix, no, line, ":", numbers)
                last_printed = no
                pending_after = after
            if g.max_count is not None and selected >= g.max_count:
                if after and not count:
                    for no2, raw2 in enumerate(lines, no + 1):
                        if pending_after <= 0:
                            break
                        l2 = raw2[:-1] if raw2.endswith("\n") else raw2
                        if matcher.search(l2) != invert:
                            break
                        yield _fmt(prefix, no2, l2, "-", numbers)
                        pending_after -= 1
                break
        elif pending_after > 0 and not count and g.listing is None:
            yield _fmt(prefix, no, line, "-", numbers)
            last_printed = no
            pending_after -= 1
        elif before:
            before_buf.append((no, line))
    return selected


def _fmt(prefix: str, no: int, line: str, sep: str, numbers: bool) -> str:
    head = f"{prefix}{sep}" if prefix else ""
    if numbers:
        head += f"{no}{sep}"
    return f"{head}{line}\n"


_HUMAN = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "k": 1e3}
_NUM = re.compile(r"^\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)?")
_HNUM = re.compile(r"^\s*([-+]?\d*\.?\d+)([KMGTPk]?)")


def _numeric(s: str) -> float:
    m = _NUM.match(s)
    return float(m.group(1)) if m and m.group(1) else 0.0


def _human_num(s: str) -> float:
    m = _HNUM.match(s)
    return float(m.group(1)) * _HUMAN[m.group(2)] if m else 0.0


def sort(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "sort",
            argv[1:],
            flags="rnhufbVsM",
            valued="ktoT",
            longs={
                "reverse": False,
                "numeric-sort": False,
                "human-numeric-sort": False,
                "unique": False,
                "ignore-case": False,
                "key": True,
                "field-separator": True,
                "version-sort": False,
                "stable": False,
            },
        )
    except OptError as e:
        io.err(str(e))
        return 2
    if has(opts, "-o"):
        raise Refused("sort -o writes a file; this triage sandbox is read-only")
    sep = last(opts, "-t", "--field-separator")
    if sep is not None and len(sep) != 1:
        io.err("sort: multi-character tab ‘" + sep + "’\n")
        return 2
    keys = []
    for o, v in opts:
        if o in ("-k", "--key"):
            m = re.fullmatch(r"(\d+)(?:\.\d+)?([a-zA-Z]*)(?:,(\d+)(?:\.\d+)?([a-zA-Z]*))?", v or "")
            if not m or int(m.group(1)) == 0:
                io.err(f"sort: invalid number at field start: invalid count at start of ‘{v}’\n")
                return 2
            keys.append(
                (int(m.group(1)), int(m.group(3)) if m.group(3) else None, (m.group(2) or "") + (m.group(4) or ""))
            )
    numeric = has(opts, "-n", "--numeric-sort")
    hum = has(opts, "-h", "--human-numeric-sort")
    fold = has(opts, "-f", "--ignore-case")
    lines: list[str] = []
    status = 0
    for op in ops or ["-"]:
        if op == "-":
            src = iter(stdin or ())
        else:
            _, node, errno = sh.lookup(op)
            if node is None or isinstance(node, Dir):
                io.err(f"sort: cannot read: {op}: {errno or 'Is a directory'}\n")
                return 2
            assert isinstance(node, File)
            src = _file_lines(sh, node)
        for ln in src:
            sh.work.charge()
            lines.append(ln if ln.endswith("\n") else ln + "\n")

    def fields(line: str) -> list[str]:
        body = line[:-1]
        return body.split(sep) if sep is not None else body.split()

    def keyval(text: str, flags: str) -> tuple[Any, ...]:
        if hum or "h" in flags:
            return (_human_num(text), text)
        if numeric or "n" in flags:
            return (_numeric(text), text)
        return ((text.lower() if fold or "f" in flags else text),)

    def key(line: str) -> tuple[Any, ...]:
        if not keys:
            return (*keyval(line[:-1], ""), line)
        fs = fields(line)
        out: list[Any] = []
        for start, end, flags in keys:
            seg = fs[start - 1 : (end if end else len(fs))]
            out.extend(keyval((sep or " ").join(seg), flags))
        return (*out, line)

    rev = has(opts, "-r", "--reverse")
    sh.work.charge(len(lines))
    lines.sort(key=key, reverse=rev)
    prev = None
    for ln in lines:
        if has(opts, "-u", "--unique"):
            k = key(ln)[:-1] if keys or numeric or hum else (ln.lower() if fold else ln)
            if k == prev:
                continue
            prev = k
        yield ln
    return status


def uniq(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "uniq",
            argv[1:],
            flags="cdui",
            longs={"count": False, "repeated": False, "unique": False, "ignore-case": False},
        )
    except OptError as e:
        io.err(str(e))
        return 1
    if ops:
        _, node, errno = sh.lookup(ops[0])
        if node is None or isinstance(node, Dir):
            io.err(f"uniq: {ops[0]}: {errno or 'Is a directory'}\n")
            return 1
        assert isinstance(node, File)
        src: Iterator[str] = _file_lines(sh, node)
    else:
        src = iter(stdin or ())
    icase = has(opts, "-i", "--ignore-case")
    count, dup, uni = has(opts, "-c", "--count"), has(opts, "-d", "--repeated"), has(opts, "-u", "--unique")

    def emit(line: str, n: int) -> Iterator[str]:
        if (dup and n < 2) or (uni and n > 1):
            return
        line = line if line.endswith("\n") else line + "\n"
        yield f"{n:7d} {line}" if count else line

    cur: str | None = None
    n = 0
    for ln in src:
        k = ln.rstrip("\n")
        k = k.lower() if icase else k
        if cur is not None and k == (cur.rstrip("\n").lower() if icase else cur.rstrip("\n")):
            n += 1
            continue
        if cur is not None:
            yield from emit(cur, n)
        cur, n = ln, 1
    if cur is not None:
        yield from emit(cur, n)
    return 0


def _ranges(spec: str) -> list[tuple[int, int]] | None:
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d*)(-?)(\d*)", part)
        if not m or (not m.group(1) and not m.group(3)):
            return None
        a = int(m.group(1)) if m.group(1) else 1
        b = (int(m.group(3)) if m.group(3) else 10**9) if m.group(2) else a
        if a == 0:
            return None
        out.append((a, b))
    return out


def cut(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "cut",
            argv[1:],
            flags="s",
            valued="dfcb",
            longs={"delimiter": True, "fields": True, "characters": True, "bytes": True, "only-delimited": False},
        )
    except OptError as e:
        io.err(str(e))
        return 1
    fspec = last(opts, "-f", "--fields")
    cspec = last(opts, "-c", "--characters", "-b", "--bytes")
    if fspec is None and cspec is None:
        io.err("cut: you must specify a list of bytes, characters, or fields\nTry 'cut --help' for more information.\n")
        return 1
    delim = last(opts, "-d", "--delimiter")
    if delim is not None and len(delim) != 1:
        io.err("cut: the delimiter must be a single character\nTry 'cut --help' for more information.\n")
        return 1
    ranges = _ranges(fspec if fspec is not None else cspec or "")
    if ranges is None:
        io.err(f"cut: invalid field value ‘{fspec or cspec}’\nTry 'cut --help' for more information.\n")
        return 1
    d = delim if delim is not None else "\t"
    spans = _merged(ranges)
    status = 0
    for op in ops or ["-"]:
        if op == "-":
            src: Iterator[str] = iter(stdin or ())
        else:
            _, node, errno = sh.lookup(op)
            if node is None or isinstance(node, Dir):
                io.err(f"cut: {op}: {errno or 'Is a directory'}\n")
                status = 1
                continue
            assert isinstance(node, File)
            src = _file_lines(sh, node)
        for ln in src:
            body = ln.rstrip("\n")
            if fspec is not None:
                if d not in body:
                    if not has(opts, "-s", "--only-delimited"):
                        yield body + "\n"
                    continue
                parts = body.split(d)
                keep = [p for i, p in enumerate(parts, 1) if any(a <= i <= b for a, b in ranges)]
                yield d.join(keep) + "\n"
            else:
                yield "".join(body[a - 1 : b] for a, b in spans) + "\n"
    return status


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching 1-based ranges joined, in order: each position is cut once, by slicing (a range's
    size costs nothing: ``-c1-999999999999`` is one slice, not a loop over its positions)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


_ESC = {"n": "\n", "t": "\t", "\\": "\\", "a": "\a", "r": "\r", "v": "\v", "f": "\f", "e": "\x1b", "0": "\0"}


def _escapes(s: str) -> tuple[str, bool]:
    out: list[str] = []
    i = 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            c = s[i + 1]
            if c == "c":
                return "".join(out), True
            if c in _ESC and c != "0":
                out.append(_ESC[c])
                i += 2
                continue
        out.append(s[i])
        i += 1
    return "".join(out).replace("\0", ""), False


def echo(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    args = argv[1:]
    newline, interpret = True, False
    while args and re.fullmatch(r"-[neE]+", args[0]):
        for ch in args[0][1:]:
            newline = newline and ch != "n"
            interpret = True if ch == "e" else False if ch == "E" else interpret
        args = args[1:]
    text = " ".join(args)
    if interpret:
        text, stop = _escapes(text)
        if stop:
            newline = False
    yield text + ("\n" if newline else "")
    return 0


def _field_size(digits: str | None) -> int:
    """The number a printf width/precision spells, without converting an absurdly long digit string."""
    if not digits:
        return 0
    return int(digits) if len(digits) <= 12 else 1 << 62


def printf(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    if len(argv) < 2:
        io.err("printf: usage: printf [-v var] format [arguments]\n")
        return 2
    fmt, args = argv[1], list(argv[2:])
    out: list[str] = []
    status = 0
    while True:
        i = 0
        used = 0
        while i < len(fmt):
            c = fmt[i]
            if c == "\\":
                s, _ = _escapes(fmt[i : i + 2])
                out.append(s)
                i += 2
                continue
            if c == "%":
                m = re.match(r"%([-+ 0#]*)(\d*)(?:\.(\d+))?([sdifxXo%c])", fmt[i:])
                if not m:
                    out.append(c)
                    i += 1
                    continue
                conv = m.group(4)
                if conv == "%":
                    out.append("%")
                else:
                    arg = args[used] if used < len(args) else ""
                    used += 1
                    spec = "%" + m.group(1) + m.group(2) + (f".{m.group(3)}" if m.group(3) is not None else "")
                    # a field is as wide as its width or precision: pay for it before Python builds it
                    sh.work.charge(1, _field_size(m.group(2)) + _field_size(m.group(3)) + len(arg))
                    if conv in "dixXo":
                        try:
                            val = int(arg or "0", 0)
                        except ValueError:
                            io.err(f"bash: printf: {arg}: invalid number\n")
                            val, status = 0, 1
                        out.append((spec + ("d" if conv == "i" else conv)) % val)
                    elif conv == "f":
                        try:
                            fv = float(arg or "0")
                        except ValueError:
                            io.err(f"bash: printf: {arg}: invalid number\n")
                            fv, status = 0.0, 1
                        out.append((spec + "f") % fv)
                    else:
                        out.append((spec + "s") % (arg[:1] if conv == "c" else arg))
                i += len(m.group(0))
                continue
            out.append(c)
            i += 1
        args = args[used:]
        if not args or used == 0:
            break
    text = "".join(out)
    if len(text) > 65536:
        text = text[:65536]
    yield text
    return status


def yes(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    text = " ".join(argv[1:]) if len(argv) > 1 else "y"
    while True:
        sh.work.charge()
        yield text + "\n"
