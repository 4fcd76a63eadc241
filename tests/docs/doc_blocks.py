"""Code blocks of the docs (README.md, rfcs/*.md, docs/**/*.md) and the ``<!-- doc-test: ... -->`` directives that say how to run them.

A fenced ``python`` or ``bash``/``sh``/``shell`` block runs as written. An HTML comment on the line(s) right before
the fence may declare what the block needs (keys are separated by spaces, values without spaces or "quoted"):

* ``port=8000`` – the block's ``8000`` (as a whole number) is replaced by a free port;
* ``server=echo`` – a python block talks to a live ``echo`` server: one is started on the free port first;
* ``background=1,3`` – shell commands (logical lines, ``\\`` continuations joined) that keep running (servers): started
  in the background, then the block waits until ``port`` answers ``/health``; all are stopped when the block ends;
* ``sub="FROM=>TO"`` – a visible text substitution (e.g. a smaller flag for a run too long for the suite);
* ``docker`` – needs a Docker engine: runs in the container tier (``pytest -m docker``), from the repo root;
* ``slow`` – runs in the slow tier (``-m trainer``); ``timeout=600`` – seconds (default 300);
* ``skip="reason"`` – not run; the reason is shown by pytest and the README lists every such block.

Shell blocks run with ``bash -euo pipefail`` from a scratch directory holding links to the repo's top-level files,
with ``.venv`` linked to the environment running the tests (so ``.venv/bin/openenv-echo`` is this checkout's);
``sudo`` is dropped when already root. Python blocks run in a fresh interpreter in a scratch directory.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

RUNNABLE = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
KEYS = {"port", "server", "background", "sub", "docker", "slow", "timeout", "skip"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
_DIRECTIVE = re.compile(r"<!--\s*doc-test:(?P<body>.*?)-->", re.S)


@dataclass
class Block:
    """One fenced code block and its directives."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str  # "python" or "bash"
    code: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}:{self.line}"

    def prepared(self, port: int | None = None) -> str:
        """The code with the directive substitutions applied (``sub``, then ``port``)."""
        code = self.code
        if "sub" in self.directives:
            for pair in self.directives["sub"].split("||"):
                old, sep, new = pair.partition("=>")
                if not sep or old not in code:
                    raise ValueError(f"{self.id}: sub={pair!r} does not match the block")
                code = code.replace(old, new)
        if port is not None and "port" in self.directives:
            code = re.sub(rf"\b{re.escape(self.directives['port'])}\b", str(port), code)
        return code


def parse_directives(text: str, where: str) -> dict[str, str]:
    """``key=value`` / ``key="value with spaces"`` / ``flag`` pairs; unknown keys are an error (no silent typo)."""
    out: dict[str, str] = {}
    for token in shlex.split(text):
        key, _, value = token.partition("=")
        if key not in KEYS:
            raise ValueError(f"{where}: unknown doc-test key {key!r}; known: {sorted(KEYS)}")
        out[key] = value
    return out


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` in a runnable language, with the directive comment right before it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m["fence"], m["lang"].lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if lang in RUNNABLE:
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            before = "\n".join(lines[max(0, k - 5) : k + 1])
            directive = None
            if k >= 0 and lines[k].strip().endswith("-->"):
                matches = list(_DIRECTIVE.finditer(before))
                directive = matches[-1] if matches else None
            where = f"{path.name}:{start + 1}"
            found.append(
                Block(
                    path=path,
                    line=start + 1,
                    lang=RUNNABLE[lang],
                    code="\n".join(lines[start + 1 : j]) + "\n",
                    directives=parse_directives(directive["body"], where) if directive else {},
                )
            )
        i = j + 1
    return found


def commands(script: str) -> list[str]:
    """Logical shell commands: ``\\`` continuations joined; blank and comment-only lines dropped."""
    out: list[str] = []
    pending = ""
    for raw in script.splitlines():
        line = pending + (raw.lstrip() if pending else raw)
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1].rstrip() + " "
            continue
        pending = ""
        if line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    return out
