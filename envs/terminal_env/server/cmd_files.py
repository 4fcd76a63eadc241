"""File commands: ls, cat, head, tail, wc, find, du, cd, pwd — GNU coreutils/findutils output and errors."""

from __future__ import annotations

import fnmatch
import math
from collections import deque
from collections.abc import Generator, Iterator

from .opts import OptError, digits, getopt, has, last
from .shell import IO, Shell, _file_lines, iter_input
from .timefmt import human, ls_ts
from .vfs import Dir, File, Node, block_size, join

Out = Generator[str, None, int]


def _nlink(sh: Shell, node: Node, path: str) -> int:
    if isinstance(node, Dir):
        return 2 + sum(isinstance(sh.m.fs.get(join(path, c)), Dir) for c in node.children)
    return 1


def _columns(names: list[str], width: int = 80) -> list[str]:
    """GNU ls's column-major layout for a terminal of ``width`` columns."""
    if not names:
        return []
    n = len(names)
    for ncols in range(min(n, width // 3 or 1), 0, -1):
        nrows = math.ceil(n / ncols)
        cols = [names[c * nrows : (c + 1) * nrows] for c in range(ncols)]
        if not cols[-1]:
            continue
        widths = [max(len(x) for x in col) + (2 if c < ncols - 1 else 0) for c, col in enumerate(cols)]
        if sum(widths) <= width or ncols == 1:
            rows = []
            for r in range(nrows):
                cells = [
                    cols[c][r].ljust(widths[c]) if c < ncols - 1 else cols[c][r]
                    for c in range(ncols)
                    if r < len(cols[c])
                ]
                rows.append("".join(cells).rstrip() + "\n")
            return rows
    return [x + "\n" for x in names]


def ls(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "ls",
            argv[1:],
            flags="laAhtrSd1RFi",
            longs={
                "all": False,
                "almost-all": False,
                "human-readable": False,
                "reverse": False,
                "directory": False,
                "recursive": False,
                "color": True,
                "classify": False,
                "full-time": False,
            },
        )
    except OptError as e:
        io.err(str(e))
        return 2
    long_ = has(opts, "-l", "--full-time")
    all_ = has(opts, "-a", "--all")
    almost = has(opts, "-A", "--almost-all")
    hum = has(opts, "-h", "--human-readable")
    one = has(opts, "-1") or not io.isatty
    classify = has(opts, "-F", "--classify")
    dir_self = has(opts, "-d", "--directory")
    recursive = has(opts, "-R", "--recursive")
    sort_key = "t" if has(opts, "-t") else "S" if has(opts, "-S") else "name"
    rev = has(opts, "-r", "--reverse")
    status = 0
    files: list[tuple[str, str, Node]] = []
    dirs: list[tuple[str, str, Node]] = []
    for op in ops or ["."]:
        path, node, errno = sh.lookup(op)
        if node is None:
            io.err(f"ls: cannot access '{op}': {errno}\n")
            status = 2
            continue
        (dirs if isinstance(node, Dir) and not dir_self else files).append((op, path, node))

    def order(entries: list[tuple[str, str, Node]]) -> list[tuple[str, str, Node]]:
        entries = sorted(entries, key=lambda e: e[0])
        if sort_key == "t":
            entries.sort(key=lambda e: -e[2].mtime)
        elif sort_key == "S":
            entries.sort(key=lambda e: -(e[2].size if isinstance(e[2], File) else 4096))
        return entries[::-1] if rev else entries

    def name_of(shown: str, node: Node) -> str:
        if classify:
            if isinstance(node, Dir):
                return shown + "/"
            if "x" in node.mode:
                return shown + "*"
        return shown

    def render(entries: list[tuple[str, str, Node]], total: bool) -> Iterator[str]:
        if long_:
            rows = []
            blocks = 0
            for shown, path, node in entries:
                size = node.size if isinstance(node, File) else 4096
                blocks += block_size(size) if isinstance(node, File) else 4
                rows.append(
                    (
                        node.mode,
                        str(_nlink(sh, node, path)),
                        node.owner,
                        node.group,
                        human(size) if hum else str(size),
                        ls_ts(node.mtime, sh.now),
                        name_of(shown, node),
                    )
                )
            if total:
                yield f"total {human(blocks * 1024) if hum else blocks}\n"
            if rows:
                w = [max(len(r[i]) for r in rows) for i in range(6)]
                for r in rows:
                    yield (f"{r[0]} {r[1]:>{w[1]}} {r[2]:<{w[2]}} {r[3]:<{w[3]}} {r[4]:>{w[4]}} {r[5]} {r[6]}\n")
        else:
            names = [name_of(shown, node) for shown, _, node in entries]
            yield from ([n + "\n" for n in names] if one else _columns(names))

    first = True
    if files:
        for line in render(order(files), total=False):
            sh.work.charge()
            yield line
        first = False
    queue = order(dirs)
    multi = len(ops) > 1 or bool(files) or recursive
    while queue:
        shown, path, node = queue.pop(0)
        assert isinstance(node, Dir)
        entries = []
        if all_:
            entries += [
                (".", path, node),
                ("..", path.rsplit("/", 1)[0] or "/", sh.m.fs.get(path.rsplit("/", 1)[0] or "/") or node),
            ]
        for c in node.children:
            if c.startswith(".") and not (all_ or almost):
                continue
            cp = join(path, c)
            entries.append((c, cp, sh.m.fs.nodes[cp]))
        dots, rest = entries[:2] if all_ else [], entries[2:] if all_ else entries
        entries = list(dots) + order(rest)
        if not first:
            yield "\n"
        if multi:
            yield f"{shown}:\n"
        first = False
        for line in render(entries, total=True):
            sh.work.charge()
            yield line
        if recursive:
            subs = [
                (join(shown, c) if shown != "/" else "/" + c, cp, n) for c, cp, n in order(rest) if isinstance(n, Dir)
            ]
            queue = subs + queue
    return status


def cat(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt("cat", argv[1:], flags="nbAEsTuv", longs={"number": False, "show-all": False})
    except OptError as e:
        io.err(str(e))
        return 1
    number = has(opts, "-n", "--number")
    status = 0
    n = 0
    for name, lines, err in iter_input(sh, io, "cat", ops, stdin):
        if lines is None:
            io.err(f"cat: {name}: {err}\n")
            status = 1
            continue
        for ln in lines:
            if number:
                n += 1
                ln = f"{n:6d}\t{ln}"
            yield ln
    return status


def _count(cmd: str, kind: str, value: str, io: IO) -> tuple[int, bool] | None:
    """Parse ``[+-]N[suffix]``; returns (n, plus_or_minus_sign) or reports GNU's error."""
    v = value.strip()
    sign = v[:1] in "+-" and v[:1] != ""
    body = v[1:] if sign else v
    mult = 1
    for suf, m in (
        ("KB", 1000),
        ("K", 1024),
        ("kB", 1000),
        ("MB", 10**6),
        ("M", 1024**2),
        ("GB", 10**9),
        ("G", 1024**3),
        ("b", 512),
        ("k", 1024),
    ):
        if body.endswith(suf) and digits(body[: -len(suf)]):
            body, mult = body[: -len(suf)], m
            break
    if not digits(body):
        io.err(f"{cmd}: invalid number of {kind}: ‘{value}’\n")
        return None
    return int(body) * mult, sign


def head(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "head",
            argv[1:],
            flags="qv",
            valued="nc",
            longs={"lines": True, "bytes": True, "quiet": False, "silent": False, "verbose": False},
            numeric=True,
        )
    except OptError as e:
        io.err(str(e))
        return 1
    n, mode, minus = 10, "lines", False
    for o, v in opts:
        if o in ("-n", "--lines", "-NUM", "-c", "--bytes"):
            mode = "bytes" if o in ("-c", "--bytes") else "lines"
            parsed = _count("head", mode, v or "", io)
            if parsed is None:
                return 1
            n, signed = parsed
            minus = signed and (v or "").strip().startswith("-")
    verbose = has(opts, "-v", "--verbose") or (len(ops) > 1 and not has(opts, "-q", "--quiet", "--silent"))
    status = 0
    first = True
    for name, lines, err in iter_input(sh, io, "head", ops, stdin):
        if lines is None:
            io.err(
                f"head: cannot open '{name}' for reading: {err}\n"
                if err != "Is a directory"
                else f"head: error reading '{name}': Is a directory\n"
            )
            status = 1
            continue
        if verbose:
            yield ("" if first else "\n") + f"==> {name} <==\n"
        first = False
        if mode == "bytes":
            data = []
            size = 0
            for ln in lines:
                data.append(ln)
                size += len(ln.encode())
                if not minus and size >= n:
                    break
            raw = "".join(data).encode()
            yield raw[: (len(raw) - n if minus else n)].decode("utf-8", "replace")
            continue
        if minus:
            buf: deque[str] = deque()
            for ln in lines:
                buf.append(ln)
                if len(buf) > n:
                    yield buf.popleft()
            continue
        for i, ln in enumerate(lines):
            if i >= n:
                break
            yield ln
    return status


def tail(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "tail",
            argv[1:],
            flags="qvfF",
            valued="nc",
            longs={"lines": True, "bytes": True, "quiet": False, "silent": False, "verbose": False, "follow": False},
            numeric=True,
        )
    except OptError as e:
        io.err(str(e))
        return 1
    n, mode, from_start = 10, "lines", False
    for o, v in opts:
        if o in ("-n", "--lines", "-NUM", "-c", "--bytes"):
            mode = "bytes" if o in ("-c", "--bytes") else "lines"
            parsed = _count("tail", mode, v or "", io)
            if parsed is None:
                return 1
            n, signed = parsed
            from_start = signed and (v or "").strip().startswith("+")
    follow = has(opts, "-f", "-F", "--follow")
    verbose = has(opts, "-v", "--verbose") or (len(ops) > 1 and not has(opts, "-q", "--quiet", "--silent"))
    status = 0
    first = True
    for op in ops or ["-"]:
        if op == "-":
            name, node = "standard input", None
        else:
            _, node, errno = sh.lookup(op)
            name = op
            if node is None:
                io.err(f"tail: cannot open '{op}' for reading: {errno}\n")
                status = 1
                continue
            if isinstance(node, Dir):
                io.err(f"tail: error reading '{op}': Is a directory\n")
                status = 1
                continue
        if verbose:
            yield ("" if first else "\n") + f"==> {name} <==\n"
        first = False
        if isinstance(node, File) and mode == "lines" and not from_start:
            yield from _file_lines(sh, node, node.tail_start(n))  # each line charged before it is built
            continue
        lines = iter(stdin or ()) if node is None else _file_lines(sh, node)  # type: ignore[arg-type]
        if from_start:
            if mode == "bytes":
                raw = "".join(lines).encode()
                yield raw[max(n - 1, 0) :].decode("utf-8", "replace")
            else:
                for i, ln in enumerate(lines):
                    if i >= n - 1:
                        yield ln
            continue
        if mode == "bytes":
            raw = "".join(lines).encode()
            yield raw[len(raw) - n if n else len(raw) :].decode("utf-8", "replace")
            continue
        buf: deque[str] = deque(maxlen=n) if n else deque(maxlen=0)
        for ln in lines:
            buf.append(ln)
        yield from buf
    if follow and status == 0:
        sh.notices.append(
            "[harness: `tail -f` never exits; the sandbox stopped following after printing the "
            "current end of the file]\n"
        )
    return status


def wc(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "wc", argv[1:], flags="lwcmL", longs={"lines": False, "words": False, "bytes": False, "chars": False}
        )
    except OptError as e:
        io.err(str(e))
        return 1
    want = [
        k
        for k, names in (
            ("l", ("-l", "--lines")),
            ("w", ("-w", "--words")),
            ("m", ("-m", "--chars")),
            ("c", ("-c", "--bytes")),
        )
        if has(opts, *names)
    ] or ["l", "w", "c"]
    rows: list[tuple[list[int], str | None]] = []
    status = 0
    all_files = bool(ops)
    total_size = 0
    for name, lines, err in iter_input(sh, io, "wc", ops, stdin):
        if lines is None:
            io.err(f"wc: {name}: {err}\n" if err != "Is a directory" else f"wc: {name}: Is a directory\n")
            if err == "Is a directory":
                rows.append(([0] * len(want), name))
            status = 1
            continue
        node = sh.m.fs.get(sh.abspath(name)) if name != "(standard input)" else None
        if want == ["c"] and isinstance(node, File):
            counts = {"c": node.size}  # GNU wc -c stats regular files instead of reading them
        else:
            nl = nw = nc = nm = 0
            for ln in lines:
                nl += ln.endswith("\n")
                nw += len(ln.split())
                nc += len(ln.encode("utf-8"))
                nm += len(ln)
            counts = {"l": nl, "w": nw, "c": nc, "m": nm}
        if isinstance(node, File):
            total_size += node.size
        else:
            all_files = False
        rows.append(([counts[k] for k in want], None if name == "(standard input)" and not ops else name))
    if len(rows) > 1:
        rows.append(([sum(r[0][i] for r in rows) for i in range(len(want))], "total"))
    if len(want) == 1 and len(rows) == 1:
        width = 1
    elif all_files:
        width = max(len(str(total_size)), 1)
    else:
        width = 7
    for nums, label in rows:
        yield " ".join(f"{x:>{width}}" for x in nums) + (f" {label}" if label else "") + "\n"
    return status


def _find_parse(args: list[str]) -> tuple[list[str], list[tuple[str, str | None, bool]], dict[str, int], str | None]:
    paths: list[str] = []
    i = 0
    while i < len(args) and not (args[i].startswith("-") or args[i] in ("!", "(")):
        paths.append(args[i])
        i += 1
    preds: list[tuple[str, str | None, bool]] = []
    depth = {"max": 10**9, "min": 0}
    negate = False
    takes = {
        "-name",
        "-iname",
        "-type",
        "-size",
        "-mtime",
        "-mmin",
        "-path",
        "-wholename",
        "-user",
        "-group",
        "-newer",
        "-perm",
    }
    while i < len(args):
        a = args[i]
        if a in ("!", "-not"):
            negate = not negate
            i += 1
            continue
        if a in ("-print", "-a", "-and", "-xdev", "-mount", "-follow", "-depth"):
            i += 1
            continue
        if a in ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fls"):
            return paths, preds, depth, f"REFUSE:{a}"
        if a in ("-o", "-or", "(", ")", "-printf", "-ls"):
            return paths, preds, depth, f"UNSUPPORTED:{a}"
        if a in ("-maxdepth", "-mindepth"):
            if i + 1 >= len(args):
                return paths, preds, depth, f"find: missing argument to `{a}'\n"
            if not digits(args[i + 1]):
                return (
                    paths,
                    preds,
                    depth,
                    (f"find: Expected a positive decimal integer argument to {a}, but got ‘{args[i + 1]}’\n"),
                )
            depth["max" if a == "-maxdepth" else "min"] = int(args[i + 1])
            i += 2
            continue
        if a in ("-empty", "-true", "-false"):
            preds.append((a, None, negate))
            negate = False
            i += 1
            continue
        if a in takes:
            if i + 1 >= len(args):
                return paths, preds, depth, f"find: missing argument to `{a}'\n"
            preds.append((a, args[i + 1], negate))
            negate = False
            i += 2
            continue
        if a.startswith("-"):
            return paths, preds, depth, f"find: unknown predicate `{a}'\n"
        return paths, preds, depth, f"find: paths must precede expression: `{a}'\n"
    return paths, preds, depth, None


def _num_test(spec: str, value: float) -> bool | None:
    sign = spec[:1] if spec[:1] in "+-" else ""
    body = spec[len(sign) :]
    try:
        n = float(body)
    except ValueError:
        return None
    return value > n if sign == "+" else value < n if sign == "-" else value == n


def find(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    paths, preds, depth, problem = _find_parse(argv[1:])
    if problem:
        if problem.startswith("REFUSE:"):
            from .shell import Refused

            raise Refused(f"find {problem[7:]} is disabled in this read-only triage sandbox")
        if problem.startswith("UNSUPPORTED:"):
            from .shell import Refused

            raise Refused(f"find {problem[12:]} is not supported by this sandbox's find")
        io.err(problem)
        return 1
    for p, v, _ in preds:
        if p == "-type" and (v or "") not in ("f", "d", "l", "b", "c", "p", "s"):
            io.err(f"find: Unknown argument to -type: {v}\n")
            return 1
    status = 0
    for op in paths or ["."]:
        base, node, errno = sh.lookup(op)
        if node is None:
            io.err(f"find: ‘{op}’: {errno}\n")
            status = 1
            continue
        for path, n in sh.m.fs.walk(base):
            sh.work.charge()
            d = 0 if path == base else path[len(base.rstrip("/")) :].count("/")
            if d > depth["max"]:
                continue
            if d < depth["min"]:
                continue
            if all(_pred(sh, p, v, path, n) != neg for p, v, neg in preds):
                yield sh.display(op, base, path) + "\n"
    return status


def _pred(sh: Shell, p: str, v: str | None, path: str, n: Node) -> bool:
    name = path.rsplit("/", 1)[1] or "/"
    v = v or ""
    if p == "-name":
        return fnmatch.fnmatchcase(name, v)
    if p == "-iname":
        return fnmatch.fnmatchcase(name.lower(), v.lower())
    if p in ("-path", "-wholename"):
        return fnmatch.fnmatchcase(path, v)
    if p == "-type":
        return (v == "d") == isinstance(n, Dir) if v in ("f", "d") else (v == "c" and n.mode.startswith("c"))
    if p == "-empty":
        return (isinstance(n, File) and n.size == 0) or (isinstance(n, Dir) and not n.children)
    if p == "-true":
        return True
    if p == "-false":
        return False
    if p in ("-user", "-group"):
        return (n.owner if p == "-user" else n.group) == v
    if p == "-size":
        units = {"c": 1, "w": 2, "b": 512, "k": 1024, "M": 1024**2, "G": 1024**3}
        unit = units.get(v[-1:], 512)
        spec = v[:-1] if v[-1:] in units else v
        size = n.size if isinstance(n, File) else 4096
        return bool(_num_test(spec, math.ceil(size / unit)))
    if p in ("-mtime", "-mmin"):
        age = (sh.now - n.mtime) / (86400 if p == "-mtime" else 60)
        return bool(_num_test(v, math.floor(age) if p == "-mtime" else math.ceil(age)))
    if p == "-newer":
        ref = sh.m.fs.get(sh.abspath(v))
        return ref is not None and n.mtime > ref.mtime
    return p == "-perm"


def du(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "du",
            argv[1:],
            flags="shacbkmxL",
            valued="d",
            longs={
                "summarize": False,
                "human-readable": False,
                "all": False,
                "total": False,
                "max-depth": True,
                "apparent-size": False,
                "bytes": False,
            },
        )
    except OptError as e:
        io.err(str(e))
        return 1
    hum = has(opts, "-h", "--human-readable")
    summarize = has(opts, "-s", "--summarize")
    all_ = has(opts, "-a", "--all")
    apparent = has(opts, "--apparent-size", "-b", "--bytes")
    md = last(opts, "-d", "--max-depth")
    if md is not None and not digits(md):
        io.err(f"du: invalid maximum depth ‘{md}’\nTry 'du --help' for more information.\n")
        return 1
    maxdepth = 0 if summarize else int(md) if md is not None else 10**9
    if summarize and md is not None and int(md) != 0:
        io.err(
            "du: warning: summarizing conflicts with --max-depth=" + md + "\nTry 'du --help' for more information.\n"
        )
        return 1
    unit = 1024 if has(opts, "-k") else 1024**2 if has(opts, "-m") else 1024

    def fmt(kb: int) -> str:
        if hum:
            return human(kb * 1024) if kb else "0"
        return str(math.ceil(kb * 1024 / unit)) if unit != 1024 else str(kb)

    def size_of(node: Node) -> int:
        if isinstance(node, File):
            return math.ceil(node.size / 1024) if apparent else block_size(node.size)
        return 4

    status = 0
    grand = 0

    def visit(op: str, base: str, path: str, node: Node, d: int) -> Generator[str, None, int]:
        sh.work.charge()
        total = size_of(node)
        if isinstance(node, Dir):
            for c in node.children:
                cp = join(path, c)
                total += yield from visit(op, base, cp, sh.m.fs.nodes[cp], d + 1)
        if (isinstance(node, Dir) or all_ or d == 0) and d <= maxdepth:
            yield f"{fmt(total)}\t{sh.display(op, base, path)}\n"
        return total

    for op in ops or ["."]:
        base, node, errno = sh.lookup(op)
        if node is None:
            io.err(f"du: cannot access '{op}': {errno}\n")
            status = 1
            continue
        grand += yield from visit(op, base, base, node, 0)
    if has(opts, "-c", "--total"):
        yield f"{fmt(grand)}\ttotal\n"
    return status


def cd(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    args = argv[1:]
    if len(args) > 1:
        io.err("bash: cd: too many arguments\n")
        return 1
    target = args[0] if args else sh.env.get("HOME", "/root")
    if target == "-":
        if sh.oldpwd is None:
            io.err("bash: cd: OLDPWD not set\n")
            return 1
        target = sh.oldpwd
        yield target + "\n"
    path, node, errno = sh.lookup(target)
    if node is None:
        io.err(f"bash: cd: {target}: {errno}\n")
        return 1
    if not isinstance(node, Dir):
        io.err(f"bash: cd: {target}: Not a directory\n")
        return 1
    sh.oldpwd, sh.cwd = sh.cwd, path
    sh.env["OLDPWD"], sh.env["PWD"] = sh.oldpwd, path
    return 0


def pwd(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    yield sh.cwd + "\n"
    return 0
