"""Sandbox escape attempts against terminal_env and sql_env, through a real server and client.

Each case must be answered with an observation (never a crash), reveal nothing of the host (a canary file with a
secret is planted on the host first), change nothing on the host or in the database, and leave the server healthy.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from openenv_echo import EnvClient
from openenv_echo.client import ActionValidationError, MessageTooLargeError

SECRET = "canary-" + uuid.uuid4().hex
CANARY_DIR = Path("/tmp") / f"openenv-echo-escape-{os.getpid()}"
CANARY = CANARY_DIR / "secret.txt"
DROP = CANARY_DIR / "dropped.txt"

TERMINAL_CASES: list[tuple[str, str]] = [
    ("absolute path to host file", f"cat {CANARY}"),
    ("traversal", f"cat ../../../../../../..{CANARY}"),
    ("traversal from root", f"cd / && cat ./../../..{CANARY}"),
    ("host passwd", "cat /etc/shadow"),
    ("proc self environ", "cat /proc/self/environ"),
    ("command substitution", f"echo $(cat {CANARY})"),
    ("backticks", f"echo `cat {CANARY}`"),
    ("redirect to host file", f"echo pwned > {DROP}"),
    ("append redirect", f"echo pwned >> {DROP}"),
    ("tee to host file", f"echo pwned | tee {DROP}"),
    ("semicolon chain", f"ls; cat {CANARY}"),
    ("and chain", f"true && cat {CANARY}"),
    ("bash -c", f"bash -c 'cat {CANARY}'"),
    ("python -c", f"python3 -c \"print(open('{CANARY}').read())\""),
    ("eval", f"eval cat {CANARY}"),
    ("symlink trick", f"ln -s {CANARY} /tmp/link && cat /tmp/link"),
    ("find the canary", f"find / -name {CANARY.name}"),
    ("grep the filesystem", f"grep -r {SECRET} /"),
    ("env var expansion", "echo $HOME $PATH $OPENAI_API_KEY"),
    ("fork bomb", ":(){ :|:& };:"),
    ("background job", f"cat {CANARY} &"),
    ("infinite output", "yes"),
    ("random device", "cat /dev/urandom"),
    ("huge brace expansion", "echo {1..100000000}"),
    ("deep pipe chain", " | ".join(["cat /var/log/syslog"] + ["grep a"] * 200)),
    ("very long argument", "echo " + "A" * 60000),
    ("binary and control bytes", "cat \x00\x01\x1b[2J/etc/hostname"),
    ("sudo", "sudo cat /etc/shadow"),
    ("network", "curl http://169.254.169.254/latest/meta-data/"),
    ("host hostname leak", "hostname"),
]

SQL_CASES: list[tuple[str, str]] = [
    ("insert", "INSERT INTO customers (name) VALUES ('x')"),
    ("update", "UPDATE customers SET name = 'x'"),
    ("delete", "DELETE FROM customers"),
    ("drop", "DROP TABLE customers"),
    ("create", "CREATE TABLE pwn (x)"),
    ("temp table", "CREATE TEMP TABLE pwn AS SELECT 1"),
    ("attach host file", f"ATTACH DATABASE '{CANARY_DIR / 'x.db'}' AS x"),
    ("attach memory", "ATTACH DATABASE ':memory:' AS m"),
    ("vacuum into host file", f"VACUUM INTO '{DROP}'"),
    ("load_extension", "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libsqlite3.so.0')"),
    ("readfile", f"SELECT readfile('{CANARY}')"),
    ("writefile", f"SELECT writefile('{DROP}', 'pwned')"),
    ("pragma write", "PRAGMA writable_schema = 1"),
    ("pragma journal", "PRAGMA journal_mode = WAL"),
    ("pragma query_only off", "PRAGMA query_only = 0"),
    ("two statements", "SELECT 1; DROP TABLE customers"),
    ("transaction", "BEGIN IMMEDIATE"),
    ("recursive CTE bomb", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"),
    ("cartesian bomb", "SELECT count(*) FROM customers a, customers b, customers c, customers d"),
    ("huge blob", "SELECT length(zeroblob(2000000000))"),
    ("random blob flood", "SELECT hex(randomblob(100000000))"),
    ("long query", "SELECT " + " + ".join(["1"] * 20000)),
    ("dot command", ".shell cat /etc/passwd"),
    ("sqlite_master write via schema", "UPDATE sqlite_master SET sql = 'x'"),
]


@pytest.fixture(scope="module")
def canary() -> Iterator[None]:
    CANARY_DIR.mkdir(exist_ok=True)
    CANARY.write_text(SECRET + "\n")
    yield
    for p in CANARY_DIR.iterdir():
        p.unlink()
    CANARY_DIR.rmdir()


@pytest.fixture(scope="module")
def servers(canary: None) -> Iterator[dict[str, str]]:
    from openenv_echo.envs import load_env
    from openenv_echo.server import BackgroundServer, ServerLimits, create_app

    running = {
        name: BackgroundServer(create_app(load_env(name), limits=ServerLimits(step_timeout_s=20)))
        for name in ("terminal", "sql")
    }
    urls = {name: s.start() for name, s in running.items()}
    yield urls
    for s in running.values():
        s.stop()


def _host_untouched() -> None:
    assert CANARY.read_text() == SECRET + "\n"
    assert sorted(p.name for p in CANARY_DIR.iterdir()) == ["secret.txt"]


def _attempt(url: str, action: dict, seed: int) -> str:
    with EnvClient(url, message_timeout_s=60) as env:
        env.reset(seed=seed)
        try:
            result = env.step(action)
        except (ActionValidationError, MessageTooLargeError) as e:  # refused at the door: also not an escape
            return str(e)
        assert result.segments, "every attempt gets a role-tagged answer"
        sent = next(iter(action.values()))
        return result.text.replace(sent, "<the command>")  # the harness echoes the command; that is no leak


@pytest.mark.parametrize(("name", "command"), TERMINAL_CASES, ids=[c[0] for c in TERMINAL_CASES])
def test_terminal_escape(servers: dict[str, str], name: str, command: str) -> None:
    text = _attempt(servers["terminal"], {"command": command}, seed=3)
    assert SECRET not in text
    assert socket.gethostname() not in text or socket.gethostname() in ("localhost",)
    assert len(text.encode()) < 64 * 1024, "output is capped"
    _host_untouched()
    assert httpx.get(servers["terminal"] + "/health", trust_env=False).status_code == 200


@pytest.mark.parametrize(("name", "query"), SQL_CASES, ids=[c[0] for c in SQL_CASES])
def test_sql_escape(servers: dict[str, str], name: str, query: str) -> None:
    url = servers["sql"]
    text = _attempt(url, {"query": query}, seed=5)
    assert SECRET not in text
    assert len(text.encode()) < 64 * 1024, "output is capped"
    _host_untouched()
    with EnvClient(url) as env:  # the database of the seed is intact afterwards
        env.reset(seed=5)
        after = env.step(
            {"query": "SELECT count(*) AS n, (SELECT count(*) FROM sqlite_master) AS t FROM customers"}
        ).text
    with EnvClient(url) as env:
        env.reset(seed=5)
        before = env.step(
            {"query": "SELECT count(*) AS n, (SELECT count(*) FROM sqlite_master) AS t FROM customers"}
        ).text
    assert after == before
    assert httpx.get(url + "/health", trust_env=False).status_code == 200


def test_catalogue_size() -> None:
    assert len(TERMINAL_CASES) + len(SQL_CASES) >= 30
