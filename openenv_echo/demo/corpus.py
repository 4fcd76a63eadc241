"""The generic pretraining text of the start checkpoint: the Python standard library's docstrings.

Text every machine with Python already has and that is not any env's: the module, class and function docstrings of
the standard library's own ``.py`` files, read with ``ast`` (nothing is imported, so nothing runs), in sorted path
order. Tests, the IDLE, tkinter and 2to3 packages and ``site-packages`` are left out. The same Python install gives
the same corpus; the report records its Python version, size and sha256.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

SKIPPED_TOP = frozenset({"site-packages", "dist-packages", "test", "idlelib", "lib2to3", "tkinter", "turtledemo"})
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class GenericCorpus:
    """The docstrings (one text each) and where they came from."""

    texts: tuple[str, ...]
    source: str
    files: int
    python: str

    @property
    def chars(self) -> int:
        return sum(map(len, self.texts))

    @property
    def sha256(self) -> str:
        return hashlib.sha256("\x00".join(self.texts).encode("utf-8")).hexdigest()

    def describe(self) -> dict[str, object]:
        return {
            "what": "docstrings of the Python standard library's .py files (read with ast, nothing imported)",
            "source": self.source,
            "python": self.python,
            "files": self.files,
            "docstrings": len(self.texts),
            "chars": self.chars,
            "sha256": self.sha256,
        }


def _docstrings(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    found = (ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, _DOCUMENTED))
    return [d for d in found if d]


@functools.cache
def stdlib_docstrings(root: str | None = None) -> GenericCorpus:
    """The corpus of the running Python's standard library (or of the stdlib directory ``root``)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    files = 0
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).parts
        if rel[0] in SKIPPED_TOP or "tests" in rel:
            continue
        found = _docstrings(path)
        files += bool(found)
        texts.extend(found)
    if not texts:
        raise RuntimeError(f"no docstrings under {base}: is this a Python standard library directory?")
    return GenericCorpus(tuple(texts), str(base.name), files, platform.python_version())
