"""Fresh training instances, one per seed: a family's task with its own inputs and expected outputs.

The shipped suite (``envs/shell_env/tasks``) is fixed, so an answer seen in one epoch could be recalled in the
next. Training seeds past the shipped training tasks therefore name generated instances instead
(``generate_tasks.instance_entry``): the family's generator run with a seed of its own, written once as a Harbor
task directory under ``instance_root()`` and run on the family's shipped image (``HarborTask.image_of``), its
working directory filled from the instance's files. No image is built per instance. Validation and test seeds keep the
shipped held-out tasks.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

from .generate_tasks import instance_entry, write_instance
from .tasks import HarborTask, load_task

GENERATOR_DIGEST = hashlib.sha256(
    b"".join(Path(__file__).with_name(name).read_bytes() for name in ("generate_tasks.py", "git_repository.py"))
).hexdigest()[:16]
"""Names the generator's version in the cache's path: an instance written by an older generator is never reused."""
PRUNE_AFTER_S = 24 * 3600.0
"""Another generator version's directory is removed once no server has used it for this long (a server still running
an older checkout beside a newer one keeps its own instances meanwhile)."""
_DIGEST_NAME = re.compile(r"^[0-9a-f]{16}$")


def instance_root() -> Path:
    """Where generated instances are written (the same index always gives the same bytes, so they are kept):
    ``$XDG_CACHE_HOME`` or ``~/.cache``, under ``openenv-echo/shell-instances``; where that cannot be written (a
    server in a read-only container) a private directory of this user under the temporary directory."""
    try:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "openenv-echo" / "shell-instances"
        cache.mkdir(parents=True, exist_ok=True)
        if os.access(cache, os.W_OK):
            return cache
    except (OSError, RuntimeError, KeyError):  # no home directory, or a read-only one
        pass
    private = Path(tempfile.gettempdir()) / f"openenv-echo-shell-instances-{os.getuid()}"
    private.mkdir(mode=0o700, exist_ok=True)
    info = private.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{private} is not a private directory of this user: generated tasks are not written there")
    return private


def prune(root: Path, keep: str, now: float | None = None) -> list[Path]:
    """Remove the directories of other generator versions under ``root``: only this user's real directories named
    like a digest (never a symlink, a file or anything else) that no server used for ``PRUNE_AFTER_S`` (a server
    touches its own at every instance it serves). Nothing inside is followed (``shutil.rmtree`` does not follow
    symlinks); errors leave what could not be removed. Returns the directories removed."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name == keep or not _DIGEST_NAME.match(entry.name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or now - info.st_mtime < PRUNE_AFTER_S:
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def instance_task(index: int, root: Path | None = None) -> HarborTask:
    """The ``index``-th generated instance, written under ``root`` (default ``instance_root()``) first if it is not
    there (atomically: a directory appears whole or not at all, and a concurrent writer wrote the same bytes). The
    first instance of a new generator version prunes the directories of old ones (``prune``)."""
    entry = instance_entry(index)
    base = instance_root() if root is None else root
    root = base / GENERATOR_DIGEST
    try:
        root.mkdir(parents=True)
    except FileExistsError:
        with contextlib.suppress(OSError):  # in use: not pruned by another version's server
            os.utime(root)
    else:
        prune(base, keep=GENERATOR_DIGEST)
    path = root / entry.name
    if not (path / "task.toml").is_file():
        staging = Path(tempfile.mkdtemp(dir=root, prefix=".staging-"))
        try:
            write_instance(index, staging)
            try:
                os.rename(staging / entry.name, path)
            except OSError:  # written meanwhile by another session
                pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return load_task(path)
