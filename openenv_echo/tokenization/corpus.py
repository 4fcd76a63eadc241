"""A small, deterministic, varied training corpus for the locally built tokenizers.

Real tokenizers are trained on varied text; a vocabulary trained on one kind of text merges oddly on the
others. The corpus mixes what agent rollouts contain: shell sessions and their output, JSON, source code
(a fixed list of Python standard-library files from the local install), prose, chat markup and some
non-ASCII text. Generation is seeded, so the same Python install gives the same corpus (its sha256 is part
of the tokenizer cache key).
"""

from __future__ import annotations

import functools
import json
import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
    "an",
    "not",
    "have",
    "which",
    "but",
    "all",
    "file",
    "files",
    "directory",
    "path",
    "user",
    "root",
    "home",
    "data",
    "config",
    "value",
    "error",
    "warning",
    "info",
    "debug",
    "output",
    "input",
    "system",
    "process",
    "service",
    "server",
    "client",
    "request",
    "response",
    "status",
    "code",
    "test",
    "tests",
    "build",
    "release",
    "version",
    "python",
    "shell",
    "command",
    "table",
    "query",
    "select",
    "insert",
    "update",
    "delete",
    "where",
    "order",
    "group",
    "count",
    "sum",
    "agent",
    "environment",
    "observation",
    "action",
    "reward",
    "episode",
    "step",
    "model",
    "token",
    "tokens",
    "train",
    "loss",
    "world",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "red",
    "green",
    "blue",
    "small",
    "large",
    "fast",
    "slow",
    "first",
    "last",
    "next",
    "previous",
    "new",
    "old",
    "read",
    "write",
    "open",
    "close",
    "start",
    "stop",
    "run",
    "running",
    "done",
    "failed",
    "success",
    "timeout",
    "retry",
    "connect",
    "network",
    "report",
    "result",
    "results",
    "summary",
    "total",
    "average",
    "number",
    "numbers",
    "string",
    "list",
    "dict",
    "key",
    "keys",
    "item",
    "items",
]
UNICODE_WORDS = [
    "café",
    "naïve",
    "résumé",
    "über",
    "straße",
    "façade",
    "jalapeño",
    "smörgåsbord",
    "Ελληνικά",
    "русский",
    "язык",
    "日本語",
    "中文",
    "한국어",
    "العربية",
    "हिन्दी",
    "emoji",
    "🙂",
    "🚀",
    "✓",
    "→",
    "←",
    "±",
    "µs",
    "°C",
    "€100",
    "£5",
    "¥300",
    "…",
]
STDLIB_FILES = (
    "textwrap.py",
    "shlex.py",
    "string.py",
    "csv.py",
    "json/__init__.py",
    "json/decoder.py",
    "json/encoder.py",
    "fnmatch.py",
    "glob.py",
    "posixpath.py",
    "difflib.py",
    "argparse.py",
    "heapq.py",
    "bisect.py",
    "queue.py",
    "sched.py",
    "calendar.py",
    "base64.py",
    "colorsys.py",
    "dataclasses.py",
    "enum.py",
    "functools.py",
    "operator.py",
    "pprint.py",
    "reprlib.py",
    "statistics.py",
    "contextlib.py",
    "abc.py",
    "copy.py",
    "secrets.py",
    "shutil.py",
    "tempfile.py",
    "tokenize.py",
    "sqlite3/__init__.py",
    "sqlite3/dump.py",
    "logging/__init__.py",
    "http/__init__.py",
    "ipaddress.py",
)
_DIRS = ("src", "docs", "tests", "data", "logs", "etc", "bin", "lib", "tmp", "var", "notes", "build")
_EXTS = (".py", ".txt", ".md", ".json", ".log", ".csv", ".cfg", ".sh", ".toml", ".yaml")


def _word(r: random.Random) -> str:
    return r.choice(WORDS) if r.random() > 0.05 else r.choice(UNICODE_WORDS)


def _sentence(r: random.Random) -> str:
    words = [_word(r) for _ in range(r.randint(4, 16))]
    words[0] = words[0].capitalize()
    return " ".join(words) + r.choice(".!?.")


def _name(r: random.Random) -> str:
    return f"{r.choice(WORDS)}{r.choice(['', '_', '-'])}{r.choice(WORDS)}{r.choice(_EXTS)}"


def _shell(r: random.Random) -> str:
    cwd = "/" + "/".join(r.choice(_DIRS) for _ in range(r.randint(1, 3)))
    kind = r.randrange(7)
    if kind == 0:
        lines = [f"$ ls -l {cwd}", f"total {r.randint(0, 900)}"]
        for _ in range(r.randint(1, 8)):
            lines.append(
                f"{r.choice(['-rw-r--r--', 'drwxr-xr-x', '-rwxr-xr-x'])} 1 user user {r.randint(0, 99999):>6} "
                f"{r.choice(['Jan', 'Feb', 'Mar', 'Nov'])} {r.randint(1, 28):>2} {r.randint(0, 23):02d}:"
                f"{r.randint(0, 59):02d} {_name(r)}"
            )
        return "\n".join(lines) + "\n"
    if kind == 1:
        name = _name(r)
        return f"$ cat {cwd}/{name}\ncat: {cwd}/{name}: No such file or directory\n"
    if kind == 2:
        return "".join(
            f"{r.choice(WORDS)}={r.choice([str(r.randint(0, 9999)), _word(r), 'true'])}\n"
            for _ in range(r.randint(2, 8))
        )
    if kind == 3:
        return "".join(
            f"{r.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} {r.randint(2020, 2026)}-"
            f"{r.randint(1, 12):02d}-{r.randint(1, 28):02d} {_sentence(r)}\n"
            for _ in range(r.randint(2, 6))
        )
    if kind == 4:
        return f"$ wc -l {_name(r)}\n{r.randint(0, 5000)} {_name(r)}\n$ echo $?\n{r.choice([0, 0, 1, 2, 127])}\n"
    if kind == 5:
        return (
            f'Traceback (most recent call last):\n  File "{cwd}/{_name(r)}", line {r.randint(1, 400)}, in '
            f"{r.choice(WORDS)}\n    {r.choice(WORDS)}({r.choice(WORDS)})\nKeyError: '{r.choice(WORDS)}'\n"
        )
    cols = r.sample(WORDS, 3)
    rows = "\n".join(" | ".join(str(r.randint(0, 999)) for _ in cols) for _ in range(r.randint(1, 5)))
    return f"sqlite> SELECT {', '.join(cols)} FROM {r.choice(WORDS)};\n{' | '.join(cols)}\n{rows}\n"


def _json_value(r: random.Random, depth: int = 0) -> object:
    k = r.randrange(6 if depth < 3 else 4)
    if k == 0:
        return r.randint(-1000, 100000)
    if k == 1:
        return round(r.uniform(-100, 100), r.randint(0, 4))
    if k == 2:
        return _word(r) if r.random() < 0.7 else _sentence(r)
    if k == 3:
        return r.choice([True, False, None])
    if k == 4:
        return [_json_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {r.choice(WORDS): _json_value(r, depth + 1) for _ in range(r.randint(1, 5))}


def _json(r: random.Random) -> str:
    obj = {r.choice(WORDS): _json_value(r) for _ in range(r.randint(1, 6))}
    return json.dumps(obj, ensure_ascii=False, indent=r.choice([None, 2])) + "\n"


def _chat(r: random.Random) -> str:
    parts = []
    for role in ("system", "user", "assistant", "tool", "assistant"):
        parts.append(f"{role}\n{_sentence(r)}\n")
    return "".join(parts)


def stdlib_sources(max_bytes: int = 450_000) -> Iterator[str]:
    """Source text of a fixed list of standard-library modules (whatever of them this install has)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    used = 0
    for rel in STDLIB_FILES:
        path = root / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")[: max_bytes - used]
        used += len(text)
        yield text
        if used >= max_bytes:
            return


CORPUS_VERSION = "1"


def default_corpus_key(n_docs: int = 2500, seed: int = 0) -> str:
    """A cheap stand-in for the default corpus's hash: generator version, parameters and the stdlib files'
    sizes (so the key changes when the installed standard library does), without generating the text."""
    import hashlib
    import sys

    root = Path(sysconfig.get_paths()["stdlib"])
    sizes = [(rel, (root / rel).stat().st_size if (root / rel).is_file() else -1) for rel in STDLIB_FILES]
    raw = json.dumps([CORPUS_VERSION, n_docs, seed, sys.version_info[:3], sizes])
    return hashlib.sha256(raw.encode()).hexdigest()


def synthetic_corpus(n_docs: int = 2500, seed: int = 0, include_stdlib: bool = True) -> list[str]:
    """The default training corpus (about 1 MB): shell, JSON, prose, chat markup, unicode, stdlib code."""
    return list(_synthetic_corpus(n_docs, seed, include_stdlib))


@functools.lru_cache(maxsize=4)
def _synthetic_corpus(n_docs: int, seed: int, include_stdlib: bool) -> tuple[str, ...]:
    r = random.Random(seed)
    makers = (_shell, _shell, _shell, _json, _json, _chat, lambda r: " ".join(_sentence(r) for _ in range(5)))
    docs = [r.choice(makers)(r) for _ in range(n_docs)]
    if include_stdlib:
        docs.extend(stdlib_sources())
    return tuple(docs)
