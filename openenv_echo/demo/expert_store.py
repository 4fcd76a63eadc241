"""The expert's episodes of a split, stored beside a run's checkpoints and reused by a run of the same env code.

A sql start trains on 12,800 expert episodes, about 25 minutes of rollouts on one core; every probe and every rerun
from that start needs the same episodes again (its tokenizer and env-CE sets are built on them). They are a function
of the env's code, the split's seeds, the step cap and the task kinds, so a stored copy stands in for them where its
key (those, the Python and SQLite versions, and a hash of this package's and the env package's source) is the run's.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import platform
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ..envs import spec_of
from ..trajectory import Trajectory

PACKAGE = Path(__file__).resolve().parents[1]


def _source_roots(env_name: str) -> list[Path]:
    """This package and the env's package (the echo env lives in this one)."""
    roots = [PACKAGE]
    top = spec_of(env_name).module.partition(".")[0]
    found = importlib.util.find_spec(top)
    if found is not None and found.origin is not None and top != PACKAGE.name:
        roots.append(Path(found.origin).parent)
    return roots


def code_fingerprint(env_name: str) -> str:
    """sha256 over the source of this package and of ``env_name``'s package (path and bytes of every ``.py``)."""
    h = hashlib.sha256()
    for root in _source_roots(env_name):
        for f in sorted(root.rglob("*.py")):
            h.update(f"{root.name}/{f.relative_to(root).as_posix()}\n".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def episodes_key(env_name: str, seeds: list[int], max_env_steps: int, kinds: tuple[str, ...], docker: bool) -> str:
    """What stored episodes must match to stand in for a split's rollouts."""
    return json.dumps(
        {
            "env": env_name,
            "seeds": hashlib.sha256(json.dumps(seeds).encode()).hexdigest(),
            "n_seeds": len(seeds),
            "max_env_steps": max_env_steps,
            "kinds": list(kinds),
            "docker": docker,
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "code": code_fingerprint(env_name),
        },
        sort_keys=True,
    )


def stored_episodes(path: Path, key: str, collect: Callable[[], list[Trajectory]]) -> tuple[list[Trajectory], bool]:
    """``(episodes, reused)``: those stored at ``path`` under ``key``, else ``collect()``'s, stored there (a gzip
    JSON-lines file, the key on its first line, written whole and renamed into place)."""
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            if f.readline().rstrip("\n") == key:
                return [Trajectory.from_json(line) for line in f], True
    episodes = collect()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        f.write(key + "\n")
        for t in episodes:
            f.write(t.to_json() + "\n")
    os.replace(tmp, path)
    return episodes, False
