"""The virtual filesystem: an in-memory tree of text files and directories with Unix metadata.

Nothing here touches the host. Paths are normalized lexically (``..`` at ``/`` stays at ``/``, like the kernel),
so ``cat ../../../../etc/passwd`` reaches the *virtual* ``/etc/passwd`` and nothing else. Very large files are
``LazyText``: fixed-width lines produced on demand, so a 17 GB log costs nothing until someone reads it, and
reading it is bounded by the shell's work budget.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class LazyText:
    """``count`` lines of exactly ``width`` characters (plus ``\\n``), line ``i`` given by ``line(i)``."""

    count: int
    width: int
    line: Callable[[int], str]

    @property
    def size(self) -> int:
        return self.count * (self.width + 1)

    def lines(self, start: int = 0) -> Iterator[str]:
        for i in range(max(start, 0), self.count):
            yield self.line(i) + "\n"


@dataclass
class Node:
    """Common metadata; ``mode`` is the full ``ls -l`` permission string (``drwxr-xr-x``)."""

    mode: str
    owner: str = "root"
    group: str = "root"
    mtime: int = 0


@dataclass
class File(Node):
    text: str | None = None
    lazy: LazyText | None = None
    binary: bool = False
    declared_size: int | None = None  # binaries: a size without content

    @property
    def size(self) -> int:
        if self.lazy is not None:
            return self.lazy.size
        if self.text is not None:
            return len(self.text.encode("utf-8"))
        return self.declared_size or 0

    @property
    def nlines(self) -> int | None:
        if self.lazy is not None:
            return self.lazy.count
        if self.text is not None:
            return self.text.count("\n") + (0 if self.text.endswith("\n") or not self.text else 1)
        return None

    def lines(self, start: int = 0) -> Iterator[str]:
        """The file's lines, each with its newline (the last one may lack it)."""
        if self.lazy is not None:
            yield from self.lazy.lines(start)
        elif self.text is not None:
            for i, ln in enumerate(self.text.splitlines(keepends=True)):
                if i >= start:
                    yield ln
        elif self.binary:
            yield binary_garbage(self.size)

    def tail_start(self, n: int) -> int:
        """Index of the first of the last ``n`` lines, so ``lines(tail_start(n))`` streams them one at a time
        (a caller charges each line before it is built: ``n`` comes from an argument and may be huge)."""
        count = self.nlines or 0
        return max(count - max(n, 0), 0)


@dataclass
class Dir(Node):
    children: list[str] = field(default_factory=list)  # kept sorted


def binary_garbage(size: int) -> str:
    """What ``cat`` of an ELF binary looks like once decoded: a header, then replacement characters."""
    return "\x7fELF\x02\x01\x01" + "\ufffd" * min(48, max(size // 4096, 8))


def block_size(size: int) -> int:
    """Disk usage in 1K blocks (4 KiB allocation units)."""
    return -(-size // 4096) * 4


class VFS:
    """Path -> node map with sorted children, built once per episode and read-only afterwards."""

    def __init__(self, default_mtime: int = 0) -> None:
        self.nodes: dict[str, Node] = {"/": Dir(mode="drwxr-xr-x", mtime=default_mtime)}
        self.default_mtime = default_mtime

    # -- building ------------------------------------------------------------------------------------
    def mkdir(
        self, path: str, mode: str = "drwxr-xr-x", owner: str = "root", group: str = "root", mtime: int | None = None
    ) -> Dir:
        path = normalize("/", path)
        node = self.nodes.get(path)
        if isinstance(node, Dir):
            if mtime is not None:
                node.mtime = mtime
            node.mode, node.owner, node.group = mode, owner, group
            return node
        if path != "/":
            self._ensure_parent(path)
        d = Dir(mode=mode, owner=owner, group=group, mtime=self.default_mtime if mtime is None else mtime)
        self.nodes[path] = d
        self._link(path)
        return d

    def add(
        self,
        path: str,
        text: str | None = None,
        *,
        mode: str = "-rw-r--r--",
        owner: str = "root",
        group: str = "root",
        mtime: int | None = None,
        lazy: LazyText | None = None,
        binary: bool = False,
        size: int | None = None,
    ) -> File:
        path = normalize("/", path)
        self._ensure_parent(path)
        f = File(
            mode=mode,
            owner=owner,
            group=group,
            mtime=self.default_mtime if mtime is None else mtime,
            text=text,
            lazy=lazy,
            binary=binary,
            declared_size=size,
        )
        existed = path in self.nodes
        self.nodes[path] = f
        if not existed:
            self._link(path)
        return f

    def _ensure_parent(self, path: str) -> None:
        parent = posixpath.dirname(path)
        if parent not in self.nodes:
            self.mkdir(parent)

    def _link(self, path: str) -> None:
        parent, name = posixpath.split(path)
        d = self.nodes[parent]
        assert isinstance(d, Dir)
        if name not in d.children:
            d.children.append(name)
            d.children.sort()

    # -- reading -------------------------------------------------------------------------------------
    def get(self, path: str) -> Node | None:
        return self.nodes.get(path)

    def walk(self, path: str) -> Iterator[tuple[str, Node]]:
        """Pre-order walk (the order ``find`` prints), children in name order."""
        node = self.nodes.get(path)
        if node is None:
            return
        yield path, node
        if isinstance(node, Dir):
            for name in node.children:
                yield from self.walk(join(path, name))

    def usage_blocks(self, path: str) -> int:
        """``du -s`` of a path in 1K blocks (directories count 4K each)."""
        node = self.nodes.get(path)
        if node is None:
            return 0
        if isinstance(node, File):
            return block_size(node.size)
        assert isinstance(node, Dir)
        return 4 + sum(self.usage_blocks(join(path, c)) for c in node.children)


def join(base: str, name: str) -> str:
    return "/" + name if base == "/" else base + "/" + name


def normalize(cwd: str, path: str) -> str:
    """Lexical absolute path: relative to ``cwd``, ``.``/``..``/``//`` resolved, never above ``/``."""
    full = path if path.startswith("/") else join(cwd, path) if path else cwd
    parts: list[str] = []
    for p in full.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if parts:
                parts.pop()
            continue
        parts.append(p)
    return "/" + "/".join(parts)
