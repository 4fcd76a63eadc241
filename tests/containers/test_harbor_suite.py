"""Every shipped Harbor task, run the way Harbor's oracle does it, with plain Docker: its reference solution earns
reward 1 and an untouched (empty) submission earns 0, even when the agent wrote a reward file of its own.

Per task: its image (``environment/`` built once for the tier), then in a fresh container (no network, non-root uid 1000, the task's memory,
CPU and pids limits) upload ``solution/`` to ``/solution`` and run ``solve.sh`` (oracle only), upload ``tests/`` to
``/tests``, run ``test.sh`` and read ``/logs/verifier/reward.txt``. The full-stack run through the shell server
lives with the server's tests.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from shell_env.server.tasks import (
    CONTAINER_REWARD_TXT,
    CONTAINER_SOLUTION_DIR,
    CONTAINER_TESTS_DIR,
    HarborTask,
    load_suite,
)

pytestmark = pytest.mark.docker

SUITE = load_suite()
LABEL = "io.openenv-echo.test"
RUN_ID = uuid.uuid4().hex[:8]


def _tar_dir(src: Path, arcname: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.add(src, arcname=arcname)
    return raw.getvalue()


@pytest.fixture(scope="module")
def task_images(shell_task_images: dict[str, str]) -> dict[str, str]:
    """The tasks' images, shared with the shell env's tests (built once per tier, see conftest)."""
    return shell_task_images


def _read_file(container: Any, path: str) -> bytes:
    """A container file's bytes through the archive API: an exec's attached output can come back empty on a loaded
    engine when the process exits before the attach (a CI run read '' for a reward file the verifier had written)."""
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.next()
        assert member is not None and member.isfile(), path
        body = tar.extractfile(member)
        assert body is not None, path
        return body.read()


def run_episode(client: Any, image: str, task: HarborTask, *, oracle: bool) -> str:
    """The reward file's text after (optionally) the oracle's solve.sh and then the verifier."""
    limits = task.limits
    container = client.containers.run(
        image,
        ["sleep", "infinity"],
        detach=True,
        network_mode="none",
        user="1000:1000",
        working_dir=task.workdir,
        mem_limit=f"{limits.memory_mb}m",
        nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        labels={LABEL: RUN_ID},
    )
    try:
        if oracle:
            assert task.solution is not None
            container.put_archive("/", _tar_dir(task.solution.parent, CONTAINER_SOLUTION_DIR.lstrip("/")))
            code, out = container.exec_run(["bash", f"{CONTAINER_SOLUTION_DIR}/solve.sh"], workdir=task.workdir)
            assert code == 0, out.decode(errors="replace")
        else:  # a cheating agent: a reward file written before the verifier runs must not count
            code, out = container.exec_run(["sh", "-c", f"echo 1 > {CONTAINER_REWARD_TXT}"])
            assert code == 0, out
        container.put_archive("/", _tar_dir(task.tests_dir, CONTAINER_TESTS_DIR.lstrip("/")))
        code, out = container.exec_run(
            ["timeout", str(int(limits.verifier_timeout_s)), "bash", f"{CONTAINER_TESTS_DIR}/test.sh"],
            workdir=task.workdir,
        )
        assert code == 0, out.decode(errors="replace")
        return _read_file(container, CONTAINER_REWARD_TXT).decode().strip()
    finally:
        container.remove(force=True)


@pytest.mark.parametrize("name", [t.name for t in SUITE.tasks])
def test_reference_solution_gets_1_and_empty_submission_gets_0(
    docker_engine: Any, task_images: dict[str, str], name: str
) -> None:
    task = SUITE.by_name(name)
    assert run_episode(docker_engine, task_images[name], task, oracle=True) == "1"
    assert run_episode(docker_engine, task_images[name], task, oracle=False) == "0"


def test_a_generated_git_instance_is_a_harbor_task_of_its_own(
    docker_engine: Any, task_images: dict[str, str], tmp_path: Path
) -> None:
    """Our env runs a generated instance on its family's image, but its directory is a Harbor task by itself too:
    the git family's own Dockerfile (git as in the family's image, the repository among its files) builds, and the
    oracle earns 1, a planted reward 0."""
    from shell_env.server.generate_tasks import GENERATED_FAMILIES
    from shell_env.server.instances import instance_task
    from shell_env.server.runtime import ShellRuntime

    index = [f.name for f in GENERATED_FAMILIES].index("revert-bad-commit") + 3 * len(GENERATED_FAMILIES)
    task = instance_task(index, tmp_path)
    assert task.image_of == "revert-bad-commit"
    runtime = ShellRuntime(pool_size=0)
    try:
        image = runtime.image_for(task)  # labelled like the tier's images, removed with them
    finally:
        runtime.close()
    assert run_episode(docker_engine, image, task, oracle=True) == "1"
    assert run_episode(docker_engine, image, task, oracle=False) == "0"


def test_no_container_left(docker_engine: Any, task_images: dict[str, str]) -> None:
    assert docker_engine.containers.list(all=True, filters={"label": f"{LABEL}={RUN_ID}"}) == []
