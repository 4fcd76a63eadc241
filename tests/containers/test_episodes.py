"""One recorded episode per env container, through ``EnvClient``: the trajectory's roles come out right."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sql_env.server import expert_actions as sql_expert
from terminal_env.server import expert_actions as terminal_expert

from openenv_echo.client import EnvClient
from openenv_echo.roles import Role
from openenv_echo.trajectory import Trajectory

pytestmark = pytest.mark.docker


def _roles(segments: list) -> list[Role]:
    return [s.role for s in segments]


def _check_conversation(trajectory: Trajectory, n_steps: int, reset_roles: list[Role]) -> None:
    """Shape shared by every env: the policy's context message, a role-tagged reset, then action/observation pairs."""
    assert [m.role for m in trajectory.messages] == ["system"]
    assert trajectory.reset is not None
    assert _roles(trajectory.reset.segments) == reset_roles
    assert len(trajectory.steps) == n_steps
    for step in trajectory.steps:
        assert step.action_text
        assert step.observation.segments, step
        assert set(_roles(step.observation.segments)) <= {Role.ENV_OUTPUT, Role.WARNING}


def test_echo_episode_in_container(env_server: Callable[[str], str]) -> None:
    with EnvClient(env_server("echo")) as client:
        client.reset(seed=3, messages=[{"role": "system", "content": "Repeat after me."}])
        hello = client.step({"message": "hello container"}, action_text="hello container")
        empty = client.step({"message": ""}, action_text="(nothing)")
        bye = client.step({"message": "bye"}, action_text="bye")
        trajectory = client.trajectory
    assert [(s.role, s.text) for s in hello.segments] == [
        (Role.WARNING, "[echo] "),
        (Role.ENV_OUTPUT, "hello container\n"),
    ]
    assert _roles(empty.segments) == [Role.WARNING] and "empty message" in empty.segments[0].text
    assert bye.done and not hello.done
    assert trajectory is not None
    _check_conversation(trajectory, 3, [Role.CONTEXT])
    assert trajectory.reset is not None and trajectory.reset.segments[0].text.startswith(
        "You are talking to an echo server"
    )
    assert [s.observation.reward for s in trajectory.steps] == pytest.approx([0.15, 0.0, 0.03])


def test_terminal_episode_in_container(env_server: Callable[[str], str]) -> None:
    with EnvClient(env_server("terminal")) as client:
        reset = client.reset(seed=7, messages=[{"role": "system", "content": "Triage the alert."}])
        echo = client.step({"command": "echo hello from the box"}, action_text="echo hello from the box")
        missing = client.step({"command": "cat /nonexistent"}, action_text="cat /nonexistent")
        expert = terminal_expert(7)
        for action in expert:
            last = client.step(action, action_text=action["command"])
            if last.done:
                break
        trajectory = client.trajectory
    assert "on-call engineer" in reset.segments[0].text
    assert [(s.role, s.text) for s in echo.segments] == [
        (Role.WARNING, "$ echo hello from the box\n"),
        (Role.ENV_OUTPUT, "hello from the box\n"),
    ]
    assert [(s.role, s.text) for s in missing.segments] == [
        (Role.WARNING, "$ cat /nonexistent\n"),
        (Role.ENV_OUTPUT, "cat: /nonexistent: No such file or directory\n"),
    ]
    assert last.done and last.reward == 1.0
    assert _roles(last.segments) == [Role.WARNING, Role.WARNING] and "correct; reward 1" in last.segments[1].text
    assert trajectory is not None
    _check_conversation(trajectory, 2 + len(expert), [Role.CONTEXT, Role.ENV_OUTPUT])  # task, then the login banner
    assert trajectory.steps[-1].observation.reward == 1.0


def test_sql_episode_in_container(env_server: Callable[[str], str]) -> None:
    with EnvClient(env_server("sql")) as client:
        reset = client.reset(seed=7, messages=[{"role": "system", "content": "Answer with SQL."}])
        two = client.step({"query": "SELECT 1 + 1 AS two"}, action_text="SELECT 1 + 1 AS two")
        typo = client.step({"query": "SELEC 1"}, action_text="SELEC 1")
        refused = client.step({"query": "DROP TABLE orders"}, action_text="DROP TABLE orders")
        expert = sql_expert(7)
        for action in expert:
            last = client.step(action, action_text=next(iter(action.values())))
            if last.done:
                break
        trajectory = client.trajectory
    assert "read-only SQL access" in reset.segments[0].text
    assert [(s.role, s.text) for s in two.segments] == [
        (Role.WARNING, "sqlite> SELECT 1 + 1 AS two\n"),
        (Role.ENV_OUTPUT, " two\n-----\n   2\n(1 row)\n"),
    ]
    assert _roles(typo.segments) == [Role.WARNING, Role.WARNING, Role.ENV_OUTPUT]
    assert typo.segments[2].text == 'near "SELEC": syntax error\n'  # the engine's own words are env_output
    assert _roles(refused.segments) == [Role.WARNING, Role.WARNING] and "read-only" in refused.segments[1].text
    assert last.done and last.reward == 1.0
    assert trajectory is not None
    _check_conversation(trajectory, 3 + len(expert), [Role.CONTEXT])


def test_shell_episode_in_container(
    env_server: Callable[[str], str], shell_task_images: dict[str, str], tmp_path: Path
) -> None:
    """The shell env's server in its own container, starting the episode's container through the engine's socket;
    the recorded trajectory tokenizes and exports like any other (masks per role, stderr still env_output)."""
    from shell_env.server import solution_actions, task_suite

    from openenv_echo.tokenization import (
        build_tokenizer,
        read_jsonl,
        tokenize_offline,
        tokenize_trajectory,
        write_jsonl,
    )

    task = task_suite().by_name("count-word")
    with EnvClient(env_server("shell")) as client:
        reset = client.reset(task=task.name, messages=[{"role": "system", "content": "Use the shell."}])
        look = client.step({"command": "ls /app; ls /nonexistent"}, action_text="ls /app; ls /nonexistent")
        for action in solution_actions(task):
            last = client.step(action, action_text=action["command"])
        trajectory = client.trajectory
    assert task.instruction in reset.segments[0].text
    assert _roles(look.segments) == [Role.WARNING, Role.ENV_OUTPUT, Role.ENV_OUTPUT, Role.WARNING]
    streams = {str(s.metadata): s.text for s in look.segments[1:3]}  # writes ms apart on two streams may swap
    assert streams["None"] == "notes.txt\n" and "No such file" in streams[str({"stream": "stderr"})]
    assert last.done and last.reward == 1.0 and "reward 1" in last.segments[-1].text
    assert trajectory is not None
    _check_conversation(trajectory, 1 + len(solution_actions(task)), [Role.CONTEXT])
    tokenizer = build_tokenizer("qwen")
    for tokenized in (tokenize_trajectory(trajectory, tokenizer), tokenize_offline(trajectory, tokenizer)):
        counts = {role: int((tokenized.role_ids == role.code).sum()) for role in Role}
        assert all(counts[role] > 0 for role in Role), counts
        write_jsonl([tokenized], tmp_path / "shell.jsonl")
        (back,) = read_jsonl(tmp_path / "shell.jsonl")
        assert back.input_ids.tolist() == tokenized.input_ids.tolist()
        assert back.role_ids.tolist() == tokenized.role_ids.tolist()
