"""Episodes through a real server (uvicorn on loopback) and the real ``EnvClient``: roles in the recorded
trajectory, hostile input that neither escapes nor stops the server, determinism over the wire."""

from __future__ import annotations

import pytest
from sql_env import server as sql
from sql_env.server import SqlEnvironment
from terminal_env import server as terminal
from terminal_env.server import TerminalEnvironment, generate_machine

from openenv_echo.client import ActionValidationError, EnvClient
from openenv_echo.roles import Role

R = Role


def _roles(step) -> list[Role]:  # type: ignore[no-untyped-def]
    return [s.role for s in step.observation.segments]


def test_terminal_episode_trajectory_roles(running_server):
    url = running_server(TerminalEnvironment)
    with EnvClient(url) as client:
        reset = client.reset(seed=8, incident="disk_full", messages=[{"role": "system", "content": "triage"}])
        assert [s.role for s in reset.segments] == [R.CONTEXT, R.ENV_OUTPUT]
        hostname = client.step({"command": "cat /etc/hostname"}, action_text="cat /etc/hostname")
        svc = hostname.metadata.get("service")  # not exposed: the answer stays hidden until the end
        assert svc is None
        log_cmd = "cat /var/log/nginx/access.log"
        client.step({"command": log_cmd})
        client.step({"command": "head -n 2 /nope"})
        client.step({"command": "echo $(id)"})
        for a in terminal.expert_actions(8, "disk_full"):
            last = client.step(a)
        traj = client.trajectory
    assert last.done and last.reward == 1.0
    s = traj.steps
    host = generate_machine(8, "disk_full").hostname
    assert [x.text for x in s[0].observation.segments] == ["$ cat /etc/hostname\n", host + "\n"]
    assert hostname.observation["text"] == f"$ cat /etc/hostname\n{host}\n"
    assert _roles(s[0]) == [R.WARNING, R.ENV_OUTPUT] and s[0].action_text == "cat /etc/hostname"
    assert s[1].observation.segments[0].text == f"$ {log_cmd}\n"
    assert _roles(s[1]) == [R.WARNING, R.ENV_OUTPUT, R.WARNING]
    assert s[1].observation.segments[1].text.startswith(("10.", "1", "2"))  # access-log lines: what the file holds
    assert "output truncated" in s[1].observation.segments[2].text and s[1].observation.fields["truncated"] is True
    assert [(x.role, x.text) for x in s[2].observation.segments] == [
        (R.WARNING, "$ head -n 2 /nope\n"),
        (R.ENV_OUTPUT, "head: cannot open '/nope' for reading: No such file or directory\n"),
    ]
    assert s[2].observation.fields["exit_code"] == 1
    assert _roles(s[3]) == [R.WARNING, R.WARNING]
    assert _roles(s[-1]) == [R.WARNING, R.WARNING] and s[-1].observation.reward == 1.0
    assert traj.messages[0].content == "triage"


def test_sql_episode_trajectory_roles(running_server):
    url = running_server(SqlEnvironment)
    with EnvClient(url) as client:
        reset = client.reset(seed=4)
        assert [s.role for s in reset.segments] == [R.CONTEXT]
        client.step({"query": "SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY status"})
        client.step({"query": "SELECT * FROM order_items"})
        client.step({"query": "SELECT frm FROM orders"})
        client.step({"query": "DELETE FROM orders"})
        for a in sql.expert_actions(4):
            last = client.step(a)
        traj = client.trajectory
    assert last.done and last.reward == 1.0
    s = traj.steps
    assert _roles(s[0]) == [R.WARNING, R.ENV_OUTPUT]
    assert s[0].observation.segments[1].text.endswith("rows)\n")
    assert s[0].observation.fields["columns"] == ["status", "n"]
    assert _roles(s[1]) == [R.WARNING, R.ENV_OUTPUT, R.WARNING] and "first 50 rows" in s[1].observation.text
    assert [(x.role, x.text) for x in s[2].observation.segments[1:]] == [
        (R.WARNING, "ERROR:  "),
        (R.ENV_OUTPUT, "no such column: frm\n"),
    ]
    assert _roles(s[3]) == [R.WARNING, R.WARNING] and "read-only" in s[3].observation.text


TERMINAL_HOSTILE = [
    "cat ../../../../etc/passwd",
    "cat /proc/self/environ",
    "ls /home/*/.ssh",
    "echo $(cat /etc/passwd)",
    "echo `whoami`",
    "ls; rm -rf /",
    "true && shutdown -h now",
    "cat /etc/passwd > /tmp/leak",
    "yes",
    "yes | grep -c y",
    "cat /var/log/*/*",
    "grep -E '(x+x+)+y' -r /",
    "find / -exec sh -c id \\;",
    "cat " + "A" * 5000,
    "printf '%s' " + "B" * 3000,
    "cat /dev/zero",
    "ls -R /",
    "sudo su -",
    "/bin/sh -c id",
    "exec /bin/bash",
    "echo \x1b[31mred",
    "cat\t/etc/hostname\n/etc/hosts",
    "'",
    '"',
    "\\",
    "${",
    "$((1+1))",
    "a" * 70000,
]


# The hostile tests judge the envs' own bounds (the shell's deterministic work budget, SQLite's), not the server's wall
# clock: a pipeline that spends its whole budget (~0.25 s of CPU) can pass the default 2 s step timeout on a loaded
# 2-core machine, so these servers get room (the step timeout has tests of its own).
HOSTILE_STEP_TIMEOUT_S = 30.0


def test_terminal_hostile_input_never_escapes_or_stops_the_server(running_server):
    url = running_server(TerminalEnvironment, step_timeout_s=HOSTILE_STEP_TIMEOUT_S)
    with EnvClient(url) as client:
        client.reset(seed=13, max_steps=1000)
        for cmd in TERMINAL_HOSTILE:
            try:
                r = client.step({"command": cmd})
            except ActionValidationError:
                assert len(cmd) > 65536  # only the wire model's size bound may refuse a command outright
                continue
            text = r.observation["text"]
            assert "root:x:0:0" not in text or "nologin" in text  # /etc/passwd only ever the virtual one
            assert len(text.encode()) < 6000
            alive = client.step({"command": "echo alive"})
            assert alive.observation["text"] == "$ echo alive\nalive\n"
        for bad in ({}, {"command": 5}, {"command": "ls", "extra": 1}, {"cmd": "ls"}):
            with pytest.raises(ActionValidationError):
                client.step(bad)
        assert client.step({"command": "pwd"}).observation["exit_code"] == 0


SQL_HOSTILE = [
    "DROP TABLE orders",
    "ATTACH DATABASE '/etc/passwd' AS p",
    "PRAGMA writable_schema = 1",
    "SELECT load_extension('libc.so.6')",
    "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT max(i) FROM r",
    "SELECT randomblob(2000000000)",
    "SELECT * FROM orders, order_items, customers",
    "SELECT readfile('/etc/passwd')",
    "SELECT 1; SELECT 2",
    "SELECT '" + "x" * 5000 + "'",
    "",
    ")))",
    "SELECT group_concat(email, '" + "-" * 900 + "') FROM customers",
]


def test_sql_hostile_input_never_escapes_or_stops_the_server(running_server):
    url = running_server(SqlEnvironment, step_timeout_s=HOSTILE_STEP_TIMEOUT_S)
    with EnvClient(url) as client:
        client.reset(seed=13, max_steps=1000)
        for sql in SQL_HOSTILE:
            r = client.step({"query": sql})
            assert r.observation["failed"] is True or r.observation["truncated"] is True, (sql, r.observation)
            alive = client.step({"query": "SELECT COUNT(*) AS n FROM orders"})
            assert alive.segments[1].role == R.ENV_OUTPUT and "(1 row)" in alive.observation["text"]
        for bad in ({"query": ["SELECT 1"]}, {"sql": "SELECT 1"}, {"query": None, "answer": 5}):
            with pytest.raises(ActionValidationError):
                client.step(bad)
        for ambiguous in ({}, {"query": "SELECT 1", "answer": "1"}):  # schema-valid: a format warning, no error
            r = client.step(ambiguous)
            assert [s.role for s in r.segments] == [R.WARNING] and r.observation["failed"] is True
        assert client.step({"answer": "0"}).done


def test_same_seed_same_bytes_over_the_wire(running_server):
    url = running_server(TerminalEnvironment)
    cmds = ["ps aux", "date", "tail -n 4 /var/log/syslog", "yes", "systemctl --failed", "df -h"]

    def episode(seed: int) -> list[dict]:
        with EnvClient(url) as client:
            out = [client.reset(seed=seed).observation]
            out += [client.step({"command": c}).observation for c in cmds]
            return out

    a = episode(77)
    assert a == episode(77)
    assert a[0]["text"] != episode(78)[0]["text"]
