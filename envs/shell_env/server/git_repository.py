"""A git repository written as plain files by Python: a generated instance carries its repository this way.

The git family's shipped tasks make their repository with git at image build time (``environment/setup.sh``:
a ``.git`` directory cannot be committed to this project's repository). A generated instance runs on the family's
shipped image with its working directory unpacked from the instance's files at reset, so its repository must
already be files: loose objects, ``HEAD``, the branch ref, a minimal config and an index. Nothing runs at reset
(the reset costs one ``tar`` like every other instance) and no git is needed where the instance is written.

The objects are the ones git itself makes from the same history (same author, committer and dates: the commit ids
match a repository that ``setup.sh`` builds, tests/envs/test_shell_tasks.py checks it). The index carries no stat
data (zero times, inode and device: the files are unpacked fresh anyway), so git compares contents on its first
refresh, as it does for the shipped tasks, whose files are copied out of the image at reset.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["AUTHOR", "Commit", "repository_files"]

AUTHOR = "agent <agent@example.org>"
"""Author and committer of every commit (the family image's ``git config --system user.*``)."""

_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
_FILE_MODE = 0o100644


@dataclass(frozen=True)
class Commit:
    """One commit of a linear history: its message (one line), its whole tree (path -> text) and its time."""

    message: str
    files: Mapping[str, str]
    timestamp: int
    """Seconds since the epoch (UTC; author and committer date alike)."""


def _object(kind: str, body: bytes, objects: dict[str, bytes]) -> bytes:
    """Store one object (loose, zlib-compressed) and return its binary id."""
    raw = f"{kind} {len(body)}".encode() + b"\0" + body
    digest = hashlib.sha1(raw).digest()  # git object ids are SHA-1
    objects[f".git/objects/{digest.hex()[:2]}/{digest.hex()[2:]}"] = zlib.compress(raw)
    return digest


def _tree(files: Mapping[str, bytes], objects: dict[str, bytes]) -> bytes:
    """Store the tree of ``files`` (relative path -> blob id) and its subtrees; git orders entries by name, a
    subtree's name compared as if it ended in ``/``."""
    blobs: dict[str, bytes] = {}
    subdirs: dict[str, dict[str, bytes]] = {}
    for path, blob in files.items():
        head, sep, rest = path.partition("/")
        if sep:
            subdirs.setdefault(head, {})[rest] = blob
        else:
            blobs[head] = blob
    entries = [(name, b"100644", blob) for name, blob in blobs.items()]
    entries += [(name, b"40000", _tree(sub, objects)) for name, sub in subdirs.items()]
    entries.sort(key=lambda e: e[0].encode() + (b"/" if e[1] == b"40000" else b""))
    return _object("tree", b"".join(mode + b" " + name.encode() + b"\0" + oid for name, mode, oid in entries), objects)


def _index(files: Mapping[str, tuple[bytes, int]]) -> bytes:
    """A version 2 index of ``files`` (path -> (blob id, size)) with no stat data."""
    body = b"DIRC" + struct.pack(">II", 2, len(files))
    for path in sorted(files, key=str.encode):
        oid, size = files[path]
        name = path.encode()
        entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, _FILE_MODE, 0, 0, size) + oid
        entry += struct.pack(">H", min(len(name), 0xFFF)) + name
        entry += b"\0" * (8 - len(entry) % 8)  # NUL-terminated, padded to a multiple of 8
        body += entry
    return body + hashlib.sha1(body).digest()  # the index checksum is SHA-1


def repository_files(history: Sequence[Commit], branch: str = "main") -> dict[str, bytes]:
    """The files of a repository whose branch ``branch`` holds ``history`` (oldest first), checked out clean:
    the last commit's tree plus ``.git/`` (paths relative to the repository's top directory)."""
    if not history:
        raise ValueError("a repository needs at least one commit")
    objects: dict[str, bytes] = {}
    parent: bytes | None = None
    blobs: dict[str, bytes] = {}
    for commit in history:
        blobs = {path: _object("blob", text.encode(), objects) for path, text in commit.files.items()}
        tree = _tree(blobs, objects)
        stamp = f"{commit.timestamp} +0000"
        body = f"tree {tree.hex()}\n" + (f"parent {parent.hex()}\n" if parent is not None else "")
        body += f"author {AUTHOR} {stamp}\ncommitter {AUTHOR} {stamp}\n\n{commit.message}\n"
        parent = _object("commit", body.encode(), objects)
    assert parent is not None
    last = history[-1].files
    index = {path: (blobs[path], len(text.encode())) for path, text in last.items()}
    return {
        **{path: text.encode() for path, text in last.items()},
        ".git/HEAD": f"ref: refs/heads/{branch}\n".encode(),
        ".git/config": _CONFIG,
        f".git/refs/heads/{branch}": parent.hex().encode() + b"\n",
        ".git/index": _index(index),
        **objects,
    }
