"""A bash-like shell over a generated ``Machine``: tokenizer, parser, glob/variable expansion, pipelines.

Pure Python and side-effect free: commands are Python generator functions reading the virtual filesystem and the
machine model; nothing is ever handed to a real shell, no host file is opened, no process is spawned.

What the machine prints (stdout and stderr, in the order they would appear on a terminal) is the *output*; the
shell's own refusals and limits are *notices* (harness text). Output is capped (bytes and lines) and every command
line runs under a deterministic work budget (counted in lines read/produced/matched and in bytes passed between
stages, expanded or formatted, charged before the work; never wall time), so floods end in a truncation notice
and runaway commands in a "killed" notice, identically on every host.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field

from .machine_state import Machine
from .vfs import Dir, File, Node, join, normalize

Cmd = Callable[["Shell", "IO", list[str], "Iterator[str] | None"], Generator[str, None, int]]

MAX_COMMAND_CHARS = 4096


class OutputFull(Exception):
    """The terminal capture reached its byte or line cap."""


class WorkExceeded(Exception):
    """The command line used up its work budget (the sandbox's deterministic stand-in for a timeout)."""


class Refused(Exception):
    """The harness refuses to run something (unsupported shell feature, disabled command). Message is harness text."""


class SyntaxErr(Exception):
    """A bash syntax error; the message is what bash itself prints."""


MAX_WORK_BYTES = 4 << 20
"""Bytes one command line may move or build: every line a pipeline stage passes on, every expanded variable,
every formatted field (charged before the string is built)."""
MAX_VARIABLE_BYTES = 64 << 10
"""All shell variables of a session together."""


class Work:
    """Deterministic work counter: units (one ~ one line read, written or matched) and bytes, each with a limit."""

    def __init__(self, limit: int, byte_limit: int = MAX_WORK_BYTES) -> None:
        self.limit = limit
        self.byte_limit = byte_limit
        self.used = 0
        self.bytes = 0

    def charge(self, n: int = 1, nbytes: int = 0) -> None:
        self.used += n
        self.bytes += nbytes
        if self.used > self.limit or self.bytes > self.byte_limit:
            raise WorkExceeded


class Terminal:
    """Captures what the terminal shows, up to ``max_bytes`` UTF-8 bytes and ``max_lines`` lines."""

    def __init__(self, max_bytes: int, max_lines: int) -> None:
        self.max_bytes = max_bytes
        self.max_lines = max_lines
        self.parts: list[str] = []
        self.bytes = 0
        self.lines = 0
        self.truncated = False

    def write(self, text: str) -> None:
        if not text:
            return
        if self.truncated:
            raise OutputFull
        nb = len(text.encode("utf-8"))
        nl = text.count("\n")
        if self.bytes + nb <= self.max_bytes and self.lines + nl <= self.max_lines:
            self.parts.append(text)
            self.bytes += nb
            self.lines += nl
            return
        keep = []
        for ch in text:
            cb = len(ch.encode("utf-8"))
            if self.bytes + cb > self.max_bytes or (ch == "\n" and self.lines + 1 > self.max_lines):
                break
            if self.lines >= self.max_lines:
                break
            keep.append(ch)
            self.bytes += cb
            self.lines += ch == "\n"
        self.parts.append("".join(keep))
        self.truncated = True
        raise OutputFull

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class IO:
    """Per-stage I/O: where stderr goes and whether stdout is the terminal (``ls`` columns vs one per line)."""

    err: Callable[[str], None]
    isatty: bool


@dataclass
class ShellResult:
    output: str  # env_output: what the machine printed
    notices: list[str] = field(default_factory=list)  # warning: harness text, in order
    exit_code: int | None = 0
    truncated: bool = False


@dataclass
class Word:
    """A word as lexed, not yet expanded: bash expands each command's words when that command runs, so ``$?``,
    ``$PWD`` and variables see what the earlier commands of the same line did (``false; echo $?`` prints 1).

    ``parts``: ``("raw", text)`` unquoted literal text (its ``* ? [`` glob), ``("lit", text)`` quoted or escaped
    text, ``("var", name)`` a ``$name``/``${name}`` reference, ``("home", "")`` a leading ``~``. ``elidable``: the word
    is only unquoted references, so it disappears when they expand to nothing (``echo $UNSET``)."""

    parts: tuple[tuple[str, str], ...]
    elidable: bool = False


@dataclass
class Redirect:
    op: str  # > >> 2> 2>> &> &>> < 2>&1 >&2
    target: Word | None


@dataclass
class Command:
    words: list[Word]
    redirects: list[Redirect]


# -- tokenizer -------------------------------------------------------------------------------------------------
_OPS = ("&&", "||", "|&", ";;", "&>>", "&>", ">>", ">&2", "<<", "<(", ">(", "|", ";", "&", ">", "<", "(", ")", "\n")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GLOB_QUOTE = str.maketrans({c: f"[{c}]" for c in "*?["})  # literal text inside a glob pattern


def tokenize(line: str) -> list[Word | str]:
    """Split a command line into words and operator strings, like bash's lexer. Expansions are left in the words
    (``expand_word`` does them when the command runs); malformed ones are syntax errors here, before anything runs.
    """
    toks: list[Word | str] = []
    parts: list[tuple[str, str]] = []
    in_word = False  # something other than an unquoted reference: the word exists even if it expands to ""
    i, n = 0, len(line)

    def flush() -> None:
        nonlocal parts, in_word
        if in_word or parts:
            toks.append(Word(tuple(parts), elidable=not in_word))
        parts, in_word = [], False

    def lit(s: str, kind: str = "lit") -> None:  # quoted text: no globbing
        nonlocal in_word
        in_word = True
        parts.append((kind, s))

    def expand(j: int) -> tuple[tuple[str, str], int]:
        """The reference ``$...`` at ``line[j] == '$'``; returns (part, next index)."""
        if j + 1 < n and line[j + 1] == "(":
            raise Refused("command substitution $(...) is not supported in this sandbox shell")
        if j + 1 < n and line[j + 1] == "{":
            end = line.find("}", j + 2)
            if end < 0:
                raise SyntaxErr("bash: unexpected EOF while looking for matching `}'")
            name = line[j + 2 : end]
            if not _VAR.fullmatch(name) and name not in ("?", "$"):
                raise SyntaxErr(f"bash: ${{{name}}}: bad substitution")
            return ("var", name), end + 1
        if j + 1 < n and line[j + 1] in "?$#0123456789":
            return ("var", line[j + 1]), j + 2
        if m := _VAR.match(line, j + 1):
            return ("var", m.group(0)), m.end()
        return ("lit", "$"), j + 1

    while i < n:
        c = line[i]
        if c in " \t":
            flush()
            i += 1
        elif c == "#" and not in_word and not parts:
            break
        elif c == "\\":
            if i + 1 < n and line[i + 1] != "\n":
                lit(line[i + 1])
            i += 2
        elif c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                raise SyntaxErr("bash: unexpected EOF while looking for matching `''")
            lit(line[i + 1 : end])
            i = end + 1
        elif c == '"':
            j = i + 1
            in_word = True
            while True:
                if j >= n:
                    raise SyntaxErr("bash: unexpected EOF while looking for matching `\"'")
                d = line[j]
                if d == '"':
                    break
                if d == "\\" and j + 1 < n and line[j + 1] in '"\\$`':
                    lit(line[j + 1])
                    j += 2
                elif d == "`":
                    raise Refused("command substitution `...` is not supported in this sandbox shell")
                elif d == "$":
                    part, j = expand(j)
                    lit(part[1], part[0])
                else:
                    lit(d)
                    j += 1
            if j == i + 1:
                lit("")
            i = j + 1
        elif c == "`":
            raise Refused("command substitution `...` is not supported in this sandbox shell")
        elif c == "$":
            part, i = expand(i)
            if part[0] == "var":
                parts.append(part)  # an unquoted reference alone does not make a word
            else:
                lit(part[1])
        elif c == "~" and not in_word and not parts and (i + 1 == n or line[i + 1] in "/ \t;|&"):
            lit("", "home")
            i += 1
        elif c in "|&;<>()\n":
            if c in "<>" and len(parts) == 1 and parts[0] in (("raw", "1"), ("raw", "2")):
                fd = parts[0][1]
                parts, in_word = [], False
                if line.startswith(">&1", i) and fd == "2":
                    toks.append("2>&1")
                    i += 3
                elif line.startswith(">>", i):
                    toks.append(f"{fd}>>" if fd == "2" else ">>")
                    i += 2
                elif c == ">":
                    toks.append("2>" if fd == "2" else ">")
                    i += 1
                else:
                    toks.append("<")
                    i += 1
                continue
            flush()
            op = next(o for o in _OPS if line.startswith(o, i))
            toks.append(op)
            i += len(op)
        else:
            lit(c, "raw")
            i += 1
    flush()
    return toks


def expand_word(word: Word, env: dict[str, str], last_status: int, work: Work) -> tuple[str, str | None] | None:
    """``(text, glob pattern or None)`` of ``word`` in ``env`` with ``$?`` = ``last_status``; None when an elidable
    word expands to nothing. Each value is charged to ``work`` before it is copied, so ``$A$A$A...`` cannot build a
    huge line; a value never globs (no word splitting either: one word stays one word)."""
    text: list[str] = []
    pat: list[str] = []
    has_glob = False
    for kind, s in word.parts:
        if kind == "raw":
            text.append(s)
            pat.append(s)
            has_glob = has_glob or any(ch in s for ch in "*?[")
            continue
        if kind == "var":
            s = _var(s, env, last_status)
            work.charge(1, 2 * len(s))  # the value is copied twice: into the word and into its glob pattern
        elif kind == "home":
            s = env.get("HOME", "/root")
        text.append(s)
        pat.append(s.translate(_GLOB_QUOTE))
    value = "".join(text)
    if word.elidable and not value:
        return None
    return value, "".join(pat) if has_glob else None


def _var(name: str, env: dict[str, str], last_status: int) -> str:
    if name == "?":
        return str(last_status)
    if name == "$":
        return env.get("$$", "")
    if name == "#" or (name.isascii() and name.isdigit()):
        return "0" if name == "#" else ("-bash" if name == "0" else "")
    return env.get(name, "")


# -- parser ------------------------------------------------------------------------------------------------
def parse(toks: list[Word | str]) -> list[tuple[str, list[Command]]]:
    """``[(connector, pipeline)]`` where connector is ``;`` ``&&`` or ``||`` (the first is ``;``)."""
    out: list[tuple[str, list[Command]]] = []
    connector = ";"
    pipeline: list[Command] = []
    cur: Command | None = None
    i = 0

    def unexpected(tok: str) -> SyntaxErr:
        shown = "newline" if tok == "\n" else tok
        return SyntaxErr(f"bash: syntax error near unexpected token `{shown}'")

    while i < len(toks):
        t = toks[i]
        if isinstance(t, Word):
            if cur is None:
                cur = Command([], [])
            cur.words.append(t)
            i += 1
            continue
        if t in ("<<", "<(", ">(", "(", ")"):
            raise Refused(
                {
                    "<<": "here-documents (<<) are",
                    "<(": "process substitution <(...) is",
                    ">(": "process substitution >(...) is",
                }.get(t, "subshells ( ... ) are")
                + " not supported in this sandbox shell"
            )
        if t == "&":
            raise Refused("background jobs (&) are not supported in this sandbox shell")
        if t == ";;":
            raise unexpected(";;")
        if t in (">", ">>", "2>", "2>>", "&>", "&>>", "<"):
            nxt = toks[i + 1] if i + 1 < len(toks) else "\n"
            if not isinstance(nxt, Word):
                raise unexpected(nxt)
            if cur is None:
                cur = Command([], [])
            cur.redirects.append(Redirect(t, nxt))
            i += 2
            continue
        if t in ("2>&1", ">&2"):
            if cur is None:
                cur = Command([], [])
            cur.redirects.append(Redirect(t, None))
            i += 1
            continue
        if t in ("|", "|&"):
            if cur is None:
                raise unexpected(t)
            if t == "|&":
                cur.redirects.append(Redirect("2>&1", None))
            pipeline.append(cur)
            cur = None
            if i + 1 >= len(toks) or toks[i + 1] in ("\n",):
                raise SyntaxErr("bash: syntax error: unexpected end of file")
            i += 1
            continue
        # ; && || newline
        if cur is None:
            if t in ("\n", ";") and not pipeline and t == "\n":
                i += 1
                continue
            raise unexpected(t)
        pipeline.append(cur)
        out.append((connector, pipeline))
        pipeline, cur = [], None
        connector = ";" if t == "\n" else t
        i += 1
        if t in ("&&", "||") and (i >= len(toks)):
            raise SyntaxErr("bash: syntax error: unexpected end of file")
    if cur is not None:
        pipeline.append(cur)
    if pipeline:
        out.append((connector, pipeline))
    return out


# -- the shell -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommandTable:
    """What the shell can run (name -> command) and what it says about commands it deliberately lacks.

    ``commands.TABLE`` is the sandbox's; the shell gets it at construction, so it never imports its commands.
    """

    commands: dict[str, Cmd]
    unavailable: dict[str, str]


class Shell:
    """One interactive root shell on ``machine``; ``run(line)`` executes one command line."""

    def __init__(
        self,
        machine: Machine,
        commands: CommandTable,
        *,
        max_bytes: int = 4096,
        max_lines: int = 200,
        work_limit: int = 150_000,
    ) -> None:
        self.m = machine
        self.commands: dict[str, Cmd] = commands.commands
        self.unavailable = commands.unavailable
        self.cwd = "/root"
        self.oldpwd: str | None = None
        self.env = dict(machine.env)
        self.env["PWD"] = self.cwd
        self.env["$$"] = str(machine.shell_pid)
        self.max_bytes = max_bytes
        self.max_lines = max_lines
        self.work_limit = work_limit
        self.last_status = 0
        self.history: list[str] = []
        self.ncommands = 0  # commands run so far: drives the virtual clock and new pids
        self.term = Terminal(max_bytes, max_lines)
        self.work = Work(work_limit)
        self.notices: list[str] = []

    # -- clock and paths --------------------------------------------------------------------------------
    @property
    def now(self) -> int:
        """Virtual time: the machine's ``now`` plus 7 s per command run (no wall clock anywhere)."""
        return self.m.now + 7 * self.ncommands

    def next_pid(self) -> int:
        return self.m.shell_pid + 17 + 3 * self.ncommands

    def abspath(self, arg: str) -> str:
        return normalize(self.cwd, arg)

    def lookup(self, arg: str) -> tuple[str, Node | None, str | None]:
        """``(abs_path, node, errno_text)``; errno_text is e.g. ``No such file or directory``."""
        path = self.abspath(arg)
        node = self.m.fs.get(path)
        if node is None:
            parent = path
            while parent != "/":
                parent = parent.rsplit("/", 1)[0] or "/"
                pn = self.m.fs.get(parent)
                if pn is not None:
                    return path, None, "Not a directory" if isinstance(pn, File) else "No such file or directory"
            return path, None, "No such file or directory"
        if arg.endswith("/") and isinstance(node, File):
            return path, None, "Not a directory"
        return path, node, None

    def display(self, base_arg: str, base_abs: str, path: str) -> str:
        """How ``find``/``grep -r``/``du`` print ``path`` found under the operand ``base_arg``."""
        if path == base_abs:
            return base_arg
        rel = path[len(base_abs.rstrip("/")) + 1 :]
        return (base_arg if base_arg.endswith("/") else base_arg + "/") + rel

    # -- running ----------------------------------------------------------------------------------------
    def run(self, line: str) -> ShellResult:
        self.term = Terminal(self.max_bytes, self.max_lines)
        self.work = Work(self.work_limit)
        self.notices = []
        status: int | None = 0
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            self.ncommands += 1
            return ShellResult(
                output="",
                notices=[
                    "[harness: command rejected: it is not valid Unicode text (lone surrogate); nothing was run]\n"
                ],
                exit_code=2,
            )
        if line.strip():
            self.history.append(line)
        try:
            try:
                items = parse(tokenize(line))
            except SyntaxErr as e:
                self.term.write(str(e) + "\n")
                status = 2
                items = []
            for connector, pipeline in items:
                if connector == "&&" and status != 0:
                    continue
                if connector == "||" and status == 0:
                    continue
                status = self._pipeline(pipeline)
                self.last_status = status
        except Refused as e:
            self.notices.append(f"[harness: {e}; nothing was run]\n")
            status = 2
        except OutputFull:
            status = None
        except WorkExceeded:
            self.notices.append(
                "[harness: command killed: it exceeded this sandbox's work limit (the equivalent of a 10 s timeout)]\n"
            )
            status = 124
        except RecursionError:
            self.notices.append("[harness: command rejected: too deeply nested]\n")
            status = 2
        except Exception as e:  # a bug in a virtual command must not end the episode: report it as harness text
            self.notices.append(
                f"[harness: internal error in the sandbox shell ({type(e).__name__}); the command was abandoned]\n"
            )
            status = 2
        self.ncommands += 1
        if status is not None:
            self.last_status = status
        out = self.term.text
        notices = list(self.notices)
        if self.term.truncated:
            notices.insert(
                0,
                ("\n" if out and not out.endswith("\n") else "")
                + f"[harness: output truncated: showing the first {self.term.lines} lines / "
                f"{self.term.bytes} bytes (cap {self.max_lines} lines / {self.max_bytes} bytes)]\n",
            )
        return ShellResult(output=out, notices=notices, exit_code=status, truncated=self.term.truncated)

    def _expand(self, words: list[Word], env: dict[str, str]) -> list[str]:
        """A command's argv: its words expanded now (variables, then pathname globs), as bash does per command."""
        argv: list[str] = []
        for w in words:
            expanded = expand_word(w, env, self.last_status, self.work)
            if expanded is None:
                continue
            text, pattern = expanded
            if pattern is not None:
                matches = glob(self, pattern)
                argv.extend(matches if matches else [text])
            else:
                argv.append(text)
        return argv

    def _redirects(self, redirects: list[Redirect], env: dict[str, str]) -> list[tuple[str, str | None]]:
        """``(op, target)`` with each target word expanded (never globbed); one that expands to nothing is ``""``."""
        out: list[tuple[str, str | None]] = []
        for r in redirects:
            expanded = None if r.target is None else expand_word(r.target, env, self.last_status, self.work)
            out.append((r.op, None if r.target is None else (expanded[0] if expanded else "")))
        return out

    def _assign(self, name: str, value: str) -> None:
        size = sum(len(k) + len(v) for k, v in self.env.items() if k != name) + len(name) + len(value)
        if size > MAX_VARIABLE_BYTES:
            raise Refused(f"shell variables are limited to {MAX_VARIABLE_BYTES >> 10} KiB in all in this sandbox shell")
        self.env[name] = value

    def _pipeline(self, cmds: list[Command]) -> int:
        stdin: Iterator[str] | None = None
        holders: list[list[int | None]] = []
        last = len(cmds) - 1
        env = {**self.env, "PWD": self.cwd}  # every stage of a pipeline sees the state before it starts
        for idx, c in enumerate(cmds):
            argv = self._expand(c.words, env)
            while argv and "=" in argv[0] and _VAR.fullmatch(argv[0].split("=", 1)[0]):
                name, _, value = argv.pop(0).partition("=")
                if not argv and len(cmds) == 1:
                    self._assign(name, value)
            holder: list[int | None] = [None]
            holders.append(holder)
            stdin = self._stage(argv, self._redirects(c.redirects, env), stdin, holder, isatty=idx == last)
        assert stdin is not None
        for chunk in stdin:
            self.work.charge(1, len(chunk))
            self.term.write(chunk)
        return holders[-1][0] if holders[-1][0] is not None else 0

    def _stage(
        self,
        argv: list[str],
        redirects: list[tuple[str, str | None]],
        stdin: Iterator[str] | None,
        holder: list[int | None],
        isatty: bool,
    ) -> Iterator[str]:
        """Build the lazy output iterator of one pipeline stage (nothing runs until it is iterated)."""
        shell = self
        err_mode, out_mode = "term", "pipe"
        for op, target in redirects:
            if op == "<":
                _path, node, errno = self.lookup(target or "")
                if node is None or isinstance(node, Dir):
                    msg = errno or "Is a directory"
                    return _failing(self, holder, f"bash: {target}: {msg}\n")
                assert isinstance(node, File)
                stdin = _file_lines(self, node)
            elif op == "2>&1":
                err_mode = "out"
            elif op == ">&2":
                out_mode = "err"
            elif target is not None and self.abspath(target) == "/dev/null":
                if op in ("2>", "2>>"):
                    err_mode = "null"
                elif op in ("&>", "&>>"):
                    err_mode, out_mode = "null", "null"
                else:
                    out_mode = "null"
            else:
                return _failing(self, holder, f"bash: {target or ''}: Read-only file system\n")
        pending: list[str] = []

        def to_pending(text: str) -> None:
            shell.work.charge(1, len(text))
            pending.append(text)

        err: Callable[[str], None] = {"term": self.term.write, "null": lambda s: None, "out": to_pending}[err_mode]
        if out_mode == "null" and err_mode == "out":
            err = lambda s: None  # noqa: E731 - `>/dev/null 2>&1`
        io = IO(err=err, isatty=isatty and out_mode == "pipe")

        def run() -> Iterator[str]:
            if not argv:
                holder[0] = 0
                return
            gen = shell._command(io, argv, None if stdin is None else _pipe_lines(stdin))
            while True:
                try:
                    line = next(gen)
                except StopIteration as stop:
                    yield from pending
                    pending.clear()
                    holder[0] = stop.value if isinstance(stop.value, int) else 0
                    return
                if pending:
                    yield from pending
                    pending.clear()
                shell.work.charge(1, len(line))  # every intermediate is paid for as it is passed on
                if out_mode == "err":
                    shell.term.write(line)
                elif out_mode != "null":
                    yield line

        return run()

    def _command(self, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Generator[str, None, int]:
        name = argv[0]
        fn = self.commands.get(name)
        if fn is None and name.startswith(("/bin/", "/sbin/", "/usr/sbin/", "/usr/bin/")):
            base = name.rsplit("/", 1)[1]
            if base in self.commands and base not in ("cd", "help", "history"):
                fn = self.commands[base]
                argv = [base, *argv[1:]]
        if fn is None:
            if "/" in name:
                path, node, errno = self.lookup(name)
                if node is None:
                    io.err(f"bash: {name}: {errno}\n")
                    return 127
                if isinstance(node, Dir):
                    io.err(f"bash: {name}: Is a directory\n")
                    return 126
                base = path.rsplit("/", 1)[1]
                if base in self.commands and path.startswith(("/usr/bin/", "/bin/", "/usr/sbin/")):
                    return (yield from self.commands[base](self, io, [base, *argv[1:]], stdin))
                raise Refused(f"running programs ({name}) is not supported in this sandbox shell")
            why = self.unavailable.get(name)
            if why:
                raise Refused(why.format(cmd=name))
            io.err(f"bash: {name}: command not found\n")
            return 127
        return (yield from fn(self, io, argv, stdin))


def _failing(sh: Shell, holder: list[int | None], message: str) -> Iterator[str]:
    def run() -> Iterator[str]:
        sh.term.write(message)
        holder[0] = 1
        return
        yield  # pragma: no cover - makes this a generator

    return run()


def _pipe_lines(chunks: Iterator[str]) -> Iterator[str]:
    """What a pipe carries, as the lines commands read: a stage may pass several lines in one chunk (printf's whole
    output) or a line in several. Already charged by the stage that passed it on; a partial line is at most the
    command line's ``MAX_WORK_BYTES``."""
    partial: list[str] = []
    for chunk in chunks:
        start = 0
        end = chunk.find("\n")
        while end != -1:
            partial.append(chunk[start : end + 1])
            yield "".join(partial)
            partial.clear()
            start = end + 1
            end = chunk.find("\n", start)
        if start < len(chunk):
            partial.append(chunk[start:])
    if partial:
        yield "".join(partial)


def _file_lines(sh: Shell, node: File, start: int = 0) -> Iterator[str]:
    """A file's lines from ``start``, each charged before it is produced (generated lines cost more)."""
    cost = 1 if node.lazy is None else 3
    if node.lazy is not None:
        for i in range(start, node.lazy.count):
            sh.work.charge(cost)
            yield node.lazy.line(i) + "\n"
        return
    for ln in node.lines(start):
        sh.work.charge(cost)
        yield ln


# -- globbing ------------------------------------------------------------------------------------------------
def glob(sh: Shell, pattern: str) -> list[str]:
    """Pathname expansion of ``pattern`` against the virtual filesystem (sorted; dotfiles need a leading dot)."""
    absolute = pattern.startswith("/")
    parts = [p for p in pattern.split("/") if p]
    trailing = pattern.endswith("/")
    results = [("/" if absolute else "", sh.cwd if not absolute else "/")]
    for k, part in enumerate(parts):
        nxt: list[tuple[str, str]] = []
        is_glob = any(ch in part for ch in "*?[")
        for shown, real in results:
            node = sh.m.fs.get(real)
            if not isinstance(node, Dir):
                continue
            if not is_glob:
                lit = re.sub(r"\[(.)\]", r"\1", part)
                if lit in (".", ".."):
                    nxt.append((shown + lit + ("/" if k < len(parts) - 1 else ""), normalize(real, lit)))
                    continue
                child = join(real, lit)
                if sh.m.fs.get(child) is not None:
                    nxt.append((shown + lit + ("/" if k < len(parts) - 1 else ""), child))
                continue
            for name in node.children:
                if name.startswith(".") and not part.startswith("."):
                    continue
                if fnmatch.fnmatchcase(name, part):
                    nxt.append((shown + name + ("/" if k < len(parts) - 1 else ""), join(real, name)))
        results = nxt
        sh.work.charge(len(results) + 1)
    out = []
    for shown, real in results:
        if trailing:
            if not isinstance(sh.m.fs.get(real), Dir):
                continue
            shown += "/"
        out.append(shown.rstrip("/") + ("/" if trailing else "") if shown not in ("/",) else shown)
    return sorted(out)


def iter_input(
    sh: Shell, io: IO, cmd: str, operands: list[str], stdin: Iterator[str] | None
) -> Iterable[tuple[str, Iterator[str] | None, str | None]]:
    """``(name, lines, error)`` per operand (``-`` or none -> stdin), with the command's error texts."""
    if not operands:
        operands = ["-"]
    for op in operands:
        if op == "-":
            yield "(standard input)", iter(stdin or ()), None
            continue
        _path, node, errno = sh.lookup(op)
        if node is None:
            yield op, None, errno
        elif isinstance(node, Dir):
            yield op, None, "Is a directory"
        else:
            assert isinstance(node, File)
            yield op, _file_lines(sh, node), None
