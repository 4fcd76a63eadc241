"""Fresh training instances, one per seed: a family's task with its own inputs and expected outputs.

The shipped suite (``envs/shell_env/tasks``) is fixed, so an answer seen in one epoch could be recalled in the
next. Training seeds past the shipped training tasks therefore name generated instances instead
(``generate_tasks.instance_entry``): the family's generator run with a seed of its own, written once as a Harbor
task directory under ``INSTANCE_DIR`` and run on the family's shipped image (``HarborTask.image_of``), its working
directory filled from the instance's files. No image is built per instance. Validation and test seeds keep the
shipped held-out tasks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .generate_tasks import instance_entry, write_instance
from .tasks import HarborTask, load_task

INSTANCE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "openenv-echo" / "shell-instances"
"""Where generated instances are written (the same index always gives the same bytes, so they are kept)."""


def instance_task(index: int, root: Path = INSTANCE_DIR) -> HarborTask:
    """The ``index``-th generated instance, written under ``root`` first if it is not there (atomically: a
    directory appears whole or not at all, and a concurrent writer of the same instance wrote the same bytes)."""
    entry = instance_entry(index)
    path = root / entry.name
    if not (path / "task.toml").is_file():
        root.mkdir(parents=True, exist_ok=True)
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
