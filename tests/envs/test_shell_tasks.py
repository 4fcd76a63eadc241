"""The Harbor task loader: valid tasks load with limits and splits; every bad input is a clear, named error."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from shell_env.server.generate_tasks import SUITE, generate
from shell_env.server.tasks import (
    BASE_IMAGE,
    CONTAINER_REWARD_TXT,
    CONTAINER_TESTS_DIR,
    SUITE_DIR,
    TaskError,
    UnsupportedTaskError,
    load_suite,
    load_task,
)

from openenv_echo.envs.splits import TASK_SPLITS

GOOD_TOML = """\
schema_version = "1.4"
[metadata]
difficulty = "easy"
[metadata.openenv_echo]
split = "validation"
pids = 64
command_timeout_sec = 5
[verifier]
timeout_sec = 60.0
[environment]
cpus = 0.5
memory_mb = 256
network_mode = "no-network"
future_key = "kept"
"""


def make_task(root: Path, name: str = "demo", toml: str = GOOD_TOML, dockerfile: str | None = None) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text("Write hello to /app/out.txt\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho hello > /app/out.txt\n")
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


def test_valid_task_loads_with_limits_split_and_unknown_keys(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path, dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n"))
    assert task.name == "demo" and task.split == "validation"
    assert task.instruction == "Write hello to /app/out.txt"
    assert task.limits.cpus == 0.5 and task.limits.memory_mb == 256 and task.limits.pids == 64
    assert task.limits.command_timeout_s == 5 and task.limits.verifier_timeout_s == 60
    assert task.config["environment"]["future_key"] == "kept" and task.config["metadata"]["difficulty"] == "easy"
    assert task.dockerfile == task.path / "environment" / "Dockerfile"
    assert task.solution == task.path / "solution" / "solve.sh" and task.test_script.is_file()
    assert task.workdir == "/app" and CONTAINER_TESTS_DIR == "/tests"
    assert CONTAINER_REWARD_TXT == "/logs/verifier/reward.txt"


def test_defaults_when_task_names_nothing(tmp_path: Path) -> None:
    path = make_task(tmp_path, toml="")
    (path / "solution" / "solve.sh").unlink()
    task = load_task(path)
    assert task.dockerfile is None and task.solution is None and task.split == "train"
    assert task.limits.cpus == 1.0 and task.limits.memory_mb == 512 and task.limits.pids == 128
    assert task.limits.verifier_timeout_s == 120.0


def test_base_image_by_name_and_build_arg_are_accepted(tmp_path: Path) -> None:
    t1 = load_task(make_task(tmp_path, "a", toml=f'[environment]\ndocker_image = "{BASE_IMAGE}"\n'))
    assert t1.dockerfile is None
    t2 = load_task(make_task(tmp_path, "b", dockerfile="ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"))
    assert t2.dockerfile is not None


@pytest.mark.parametrize("missing", ["task.toml", "instruction.md", "tests/test.sh"])
def test_missing_file(tmp_path: Path, missing: str) -> None:
    path = make_task(tmp_path)
    (path / missing).unlink()
    with pytest.raises(TaskError, match=f"missing {missing}"):
        load_task(path)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[environment\n", "not valid TOML"),
        ("environment = 3\n", r"\[environment\] must be a table"),
        ('[environment]\ncpus = "two"\n', "cpus must be a number"),
        ("[environment]\ncpus = true\n", "cpus must be a number"),
        ("[environment]\ncpus = 64\n", r"cpus = 64 is out of range"),
        ("[environment]\nmemory_mb = 1\n", "memory_mb = 1 is out of range"),
        ("[environment]\nmemory_mb = 100.5\n", "memory_mb must be a whole number"),
        ("[environment]\nstorage_mb = 10000000\n", "storage_mb = 10000000 is out of range"),
        ("[verifier]\ntimeout_sec = nan\n", "timeout_sec = nan is out of range"),
        ("[metadata.openenv_echo]\npids = 1\n", "pids = 1 is out of range"),
        ("[metadata.openenv_echo]\ncommand_timeout_sec = 0\n", "command_timeout_sec = 0 is out of range"),
        ('[metadata.openenv_echo]\nsplit = "dev"\n', "split = 'dev' is not one of"),
        ('[environment]\nworkdir = "app"\n', "workdir must be an absolute path"),
        ("[verifier]\nenv = 3\n", r"\[verifier\].env must be a table"),
        ("[metadata]\nopenenv_echo = 1\n", r"\[openenv_echo\] must be a table"),
    ],
)
def test_bad_task_toml(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        load_task(make_task(tmp_path, toml=toml))


def test_bad_directories(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        load_task(tmp_path / "nope")
    with pytest.raises(TaskError, match="directory name"):
        load_task(make_task(tmp_path, "Bad Name"))
    path = make_task(tmp_path, "empty-instruction")
    (path / "instruction.md").write_text("  \n")
    with pytest.raises(TaskError, match=r"instruction\.md is empty"):
        load_task(path)
    path = make_task(tmp_path, "no-dockerfile")
    (path / "environment").mkdir()
    with pytest.raises(TaskError, match="has no Dockerfile"):
        load_task(path)
    path = make_task(tmp_path, "latin1")
    (path / "instruction.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(TaskError, match="not UTF-8"):
        load_task(path)
    with pytest.raises(TaskError, match="no FROM line"):
        load_task(make_task(tmp_path, "no-from", dockerfile="RUN true\n"))


@pytest.mark.parametrize(
    ("toml", "feature"),
    [
        ('[environment]\nnetwork_mode = "public"\n', "network access"),
        ("[environment]\nallow_internet = true\n", "allow_internet"),
        ('[agent]\nnetwork_mode = "allowlist"\n', r"\[agent\].network_mode"),
        ("[environment]\ngpus = 1\n", "GPUs"),
        ('[environment]\ntpu = {type = "v6e", topology = "2x2"}\n', "TPUs"),
        ('[environment]\nos = "windows"\n', "non-Linux"),
        ('[environment]\ndocker_image = "python:3.12"\n', "pre-built image 'python:3.12'"),
        ('[environment]\nenv = {TOKEN = "${TOKEN}"}\n', "host environment variables"),
        ('[[environment.mcp_servers]]\nname = "x"\nurl = "http://x"\n', "MCP servers"),
        ('[environment.healthcheck]\ncommand = "true"\n', "healthcheck"),
        ('[[steps]]\nname = "one"\n', "multi-step"),
        ('[verifier]\nenvironment_mode = "separate"\n', "separate verifier"),
        ('[verifier]\nenv = {KEY = "${HOST_KEY}"}\n', r"\[verifier\].env.KEY"),
    ],
)
def test_unsupported_features_are_named(tmp_path: Path, toml: str, feature: str) -> None:
    with pytest.raises(UnsupportedTaskError, match=feature) as info:
        load_task(make_task(tmp_path, toml=toml))
    assert info.value.features


def test_compose_and_foreign_base_image_refused_together(tmp_path: Path) -> None:
    path = make_task(
        tmp_path,
        toml='[environment]\nnetwork_mode = "public"\n',
        dockerfile="FROM --platform=linux/amd64 ubuntu:24.04\n",
    )
    (path / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(UnsupportedTaskError) as info:
        load_task(path)
    text = " ".join(info.value.features)
    assert "docker-compose" in text and "ubuntu:24.04" in text and "network" in text


def test_suite_splits_and_seeds(tmp_path: Path) -> None:
    for name, split in [("a", "train"), ("b", "train"), ("c", "validation"), ("d", "test")]:
        make_task(tmp_path, name, toml=f'[metadata.openenv_echo]\nsplit = "{split}"\n')
    suite = load_suite(tmp_path)
    assert [t.name for t in suite.tasks] == ["a", "b", "c", "d"]
    assert [t.name for t in suite.split("train")] == ["a", "b"]
    assert suite.for_seed(0).name == "a" and suite.for_seed(1).name == "b"
    assert suite.for_seed(TASK_SPLITS["validation"][0]).name == "c"
    assert suite.for_seed(TASK_SPLITS["test"][5]).name == "d"
    assert suite.by_name("c").split == "validation"
    with pytest.raises(KeyError, match="in no split"):
        suite.for_seed(-1)
    with pytest.raises(KeyError, match="unknown split"):
        suite.split("dev")


def test_bad_suites(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        load_suite(tmp_path / "nope")
    with pytest.raises(TaskError, match="no task directory"):
        load_suite(tmp_path)
    make_task(tmp_path, "ok")
    make_task(tmp_path, "bad", toml="[environment]\ngpus = 2\n")
    with pytest.raises(UnsupportedTaskError, match="bad"):
        load_suite(tmp_path)


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), bool(p.stat().st_mode & 0o100))
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_shipped_suite_is_valid_and_split_by_family_and_by_seed() -> None:
    suite = load_suite()
    assert len(suite.tasks) >= 40
    family = {t.name: t.config["metadata"]["openenv_echo"]["family"] for t in suite.tasks}
    assert len(set(family.values())) >= 8
    splits = {name: {family[t.name] for t in suite.split(name)} for name in ("train", "validation", "test")}
    assert all(splits.values())
    # whole families no training task comes from, in validation and in test ...
    assert splits["validation"] - splits["train"] and splits["test"] - splits["train"]
    # ... and new seeds (new inputs, new answers) of training families, in both
    assert splits["validation"] & splits["train"] and splits["test"] & splits["train"]
    seeds = [t.config["metadata"]["openenv_echo"]["seed"] for t in suite.tasks]
    assert len(set(seeds)) == len(seeds)
    for task in suite.tasks:
        assert task.solution is not None and task.dockerfile is not None, task.name
        assert (task.path / "solution" / "near_miss.sh").is_file(), task.name
        assert "network_mode" not in task.config["environment"]  # unset: Harbor's docker env runs it as is
        assert task.config["metadata"]["openenv_echo"]["seed"] in [e.seed for e in SUITE if e.name == task.name]


def test_regeneration_reproduces_the_committed_suite(tmp_path: Path) -> None:
    generate(tmp_path)
    for entry in SUITE:
        assert _tree(tmp_path / entry.name) == _tree(SUITE_DIR / entry.name), entry.name
    assert sorted(p.name for p in SUITE_DIR.iterdir()) == sorted(e.name for e in SUITE)


def test_training_seeds_past_the_shipped_tasks_are_fresh_generated_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shell_env.server import instances
    from shell_env.server import shell_environment as environment
    from shell_env.server.generate_tasks import FAMILIES, GENERATED_FAMILIES, instance_entry

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    suite = load_suite()
    train = suite.split("train")
    held_out = {f.name for f in FAMILIES if f.held_out is not None}
    # generated only for training families, never on a shipped seed (so never a validation or test input)
    assert held_out and not held_out & {f.name for f in GENERATED_FAMILIES} and len(GENERATED_FAMILIES) >= 8
    shipped_seeds = {e.seed for e in SUITE}
    entries = [instance_entry(i) for i in range(5 * len(GENERATED_FAMILIES))]
    assert not shipped_seeds & {e.seed for e in entries} and len({e.seed for e in entries}) == len(entries)
    # the shipped training tasks keep their seeds; the next seeds are instances, each family in turn
    assert [environment.task_for_seed(s).name for s in range(len(train))] == [t.name for t in train]
    first = [environment.task_for_seed(len(train) + i) for i in range(len(GENERATED_FAMILIES))]
    assert [t.image_of for t in first] == [f.name for f in GENERATED_FAMILIES]
    for task in first:
        assert task.split == "train" and task.image_of is not None and task.solution is not None
        shipped = suite.by_name(task.image_of)
        # the family's shape (the image it runs on holds nothing of the instance), its own inputs and answers
        assert shipped.dockerfile is not None
        # the same image up to the working directory (a shipped repository is made at build time, an instance's
        # is among its files)
        head = shipped.dockerfile.read_text().split("WORKDIR")[0]
        assert (task.path / "environment" / "Dockerfile").read_text().split("WORKDIR")[0] == head
        assert (task.tests_dir / "check.py").read_text() != (shipped.tests_dir / "check.py").read_text(), task.name
    # the same seed gives the same bytes, from the cache or written afresh
    again = environment.task_for_seed(len(train) + 3)
    assert again.path == first[3].path and again.path.is_relative_to(tmp_path / "cache")
    fresh = instances.instance_task(3, tmp_path / "other")
    assert _tree(fresh.path) == _tree(first[3].path)
    # the cache is keyed by the generator's version: a changed generator never reuses an older instance
    assert fresh.path.parent.name == instances.GENERATOR_DIGEST
    monkeypatch.setattr(instances, "GENERATOR_DIGEST", "0" * 16)
    assert instances.instance_task(3, tmp_path / "other").path.parent.name == "0" * 16
    # validation and test seeds keep the shipped held-out tasks
    for split in ("validation", "test"):
        task = environment.task_for_seed(TASK_SPLITS[split].start)
        assert task.image_of is None and task.split == split


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return result.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed on this machine")
def test_a_generated_git_instance_carries_the_repository_git_itself_makes(tmp_path: Path) -> None:
    """The git family's instances carry their repository as files (no setup at reset): the same commits as the
    shipped build script makes with git from the same history, checked out clean, valid for git fsck."""
    from shell_env.server.generate_tasks import GENERATED_FAMILIES, REPO, _setup_script, instance_entry, write_instance

    index = [f.name for f in GENERATED_FAMILIES].index("revert-bad-commit") + 2 * len(GENERATED_FAMILIES)
    entry = instance_entry(index)
    spec = entry.build(random.Random(entry.seed))
    assert spec.repository is not None
    ours = write_instance(index, tmp_path / "instances") / "environment" / "app" / REPO
    assert not (ours.parent.parent / "setup.sh").exists()  # nothing to run at reset
    # git makes the same history from the shipped build script
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "agent",
        "GIT_AUTHOR_EMAIL": "agent@example.org",
        "GIT_COMMITTER_NAME": "agent",
        "GIT_COMMITTER_EMAIL": "agent@example.org",
    }
    script = _setup_script(spec.repository).replace(f"/app/{REPO}", str(tmp_path / "theirs"))
    subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True)
    theirs = tmp_path / "theirs"
    assert _git(ours, "rev-parse", "HEAD", env=env) == _git(theirs, "rev-parse", "HEAD", env=env)
    assert _git(ours, "rev-list", "--count", "HEAD", env=env) == str(len(spec.repository))
    _git(ours, "fsck", "--strict", "--no-dangling", env=env)
    assert _git(ours, "status", "--porcelain", env=env) == ""
    assert _git(ours, "symbolic-ref", "HEAD", env=env) == "refs/heads/main"
    # a near miss of the index (a file changed after the commit) is seen, so the index holds the real contents
    (ours / "VERSION").write_text("tampered\n")
    assert _git(ours, "status", "--porcelain", env=env) == "M VERSION"


def test_the_first_instance_of_a_new_generator_prunes_old_versions_only(tmp_path: Path) -> None:
    """Other generator versions' directories go when a new version's is first made, once unused for a day; a
    directory in use, anything not named like a digest, a symlink (and what it points to) and a file stay."""
    from shell_env.server import instances

    base, outside = tmp_path / "cache", tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "data.txt").write_text("not ours\n")
    day_ago = time.time() - instances.PRUNE_AFTER_S - 60

    def old(path: Path) -> Path:
        os.utime(path, (day_ago, day_ago), follow_symlinks=False)
        return path

    stale = base / ("a" * 16)
    (stale / "count-word-g4").mkdir(parents=True)
    (stale / "count-word-g4" / "task.toml").write_text("x\n")
    (stale / "count-word-g4" / "link").symlink_to(outside / "keep")  # inside a pruned directory: not followed
    old(stale / "count-word-g4")
    old(stale)
    recent = base / ("b" * 16)  # another version used within the day (a server of an older checkout, still running)
    recent.mkdir()
    not_ours = base / "notes"
    not_ours.mkdir()
    old(not_ours)
    link = base / ("c" * 16)
    link.symlink_to(outside / "keep", target_is_directory=True)
    old(link)
    a_file = base / ("d" * 16)
    a_file.write_text("x\n")
    old(a_file)

    task = instances.instance_task(0, base)
    assert task.path.parent == base / instances.GENERATOR_DIGEST
    assert sorted(p.name for p in base.iterdir()) == sorted(
        [instances.GENERATOR_DIGEST, recent.name, "notes", link.name, a_file.name]
    )
    assert (outside / "keep" / "data.txt").read_text() == "not ours\n" and link.is_symlink()
    # only a new version's first instance prunes; serving from an existing directory keeps it in use (touched)
    stale.mkdir()
    old(stale)
    old(task.path.parent)
    instances.instance_task(1, base)
    assert stale.is_dir() and time.time() - task.path.parent.stat().st_mtime < 60
    # a day later, a newer version's first instance removes both older ones
    old(task.path.parent)
    assert sorted(instances.prune(base, keep="e" * 16, now=time.time() + instances.PRUNE_AFTER_S)) == sorted(
        [stale, recent, task.path.parent]
    )


def test_image_of_must_name_a_task(tmp_path: Path) -> None:
    bad = GOOD_TOML.replace('split = "validation"', 'split = "train"\nimage_of = "../escape"')
    with pytest.raises(TaskError, match="image_of must be a task name"):
        load_task(make_task(tmp_path, toml=bad))
