"""The cost catalogue: hostile actions and requests by class, each held to its budget, each followed by a normal step.

Classes: CPU, memory, disk, output size, host facts, protocol, connections. One server per env (terminal, sql),
started once with default limits (short header/body timeouts so the connection cases are quick) and never
restarted: the last test checks it is still the same process. Budgets are the documented ``ServerLimits``
defaults: a session's worker stays within 64 MB above its baseline, the server's temp dir within 16 MB, an
observation within 64 KiB, no host fact in any reply, no HTTP 5xx and every reply strict JSON. No timing is
asserted: a runaway step must end in a work-limit warning or a ``STEP_TIMEOUT`` error, whichever comes first.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from openenv_echo.server import ServerLimits
from tests.hardening.cost_server import LiveServer, Session, observation_text, strict_loads

LIMITS = ServerLimits()
MEMORY_BUDGET_MB = LIMITS.memory_mb
DISK_BUDGET = LIMITS.temp_disk_mb << 20
OUTPUT_BUDGET = LIMITS.max_output_bytes
MAX_CONNECTIONS = LIMITS.max_sessions + 16
STOPPED = ("work limit", "output truncated", "output cut", "query stopped", "MB of database memory")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, LiveServer]]:
    flags = ("--header-timeout", "1", "--body-timeout", "1", "--max-connections", str(MAX_CONNECTIONS))
    running = {env: LiveServer(env, *flags) for env in ("terminal", "sql")}
    yield running
    for s in running.values():
        s.stop()


def _normal_step(server: LiveServer, session: Session | None = None) -> None:
    """The server (and, when given, the same session, after a reset if its episode was abandoned) still serves."""
    assert httpx.get(server.url + "/health", trust_env=False, timeout=10).status_code == 200
    own = session is None
    session = session or server.session()
    try:
        session.reset(seed=11)
        if server.env == "terminal":
            assert observation_text(session.step({"command": "echo still-here"})).endswith("still-here\n")
        else:
            assert "still-here" in observation_text(session.step({"query": "SELECT 'still-here'"}))
    finally:
        if own:
            session.close()


def _run_hostile(server: LiveServer, actions: list[dict[str, Any]], seed: int = 3) -> tuple[list[dict], Session]:
    """Reset a fresh session, send ``actions``; returns the replies and the (still open) session."""
    session = server.session()
    session.reset(seed=seed, max_steps=200)
    replies = [session.step(a) for a in actions]
    return replies, session


def _stopped_or_timed_out(reply: dict[str, Any]) -> bool:
    if reply["type"] == "error":
        return bool(reply["data"]["code"] == "STEP_TIMEOUT")
    return any(word in observation_text(reply) for word in STOPPED)


def _check_budgets(server: LiveServer, session: Session, replies: list[dict], disk_before: int) -> None:
    for r in replies:
        if r["type"] == "observation":
            assert len(observation_text(r).encode("utf-8", "surrogatepass")) <= OUTPUT_BUDGET + 256
            assert "internal error" not in observation_text(r), observation_text(r)[-300:]  # never an input's answer
        else:
            assert r["data"]["code"] in ("STEP_TIMEOUT", "VALIDATION_ERROR", "MESSAGE_TOO_LARGE"), r
    timed_out = any(r["type"] == "error" and r["data"]["code"] == "STEP_TIMEOUT" for r in replies)
    if session.worker is not None and not timed_out:  # a timed-out step's worker was killed: no peak to read
        baseline = psutil_baseline(server)
        assert session.worker_peak_mb() <= baseline + MEMORY_BUDGET_MB
    assert server.disk_bytes() - disk_before <= DISK_BUDGET


_BASELINES: dict[int, float] = {}


def psutil_baseline(server: LiveServer) -> float:
    """Peak RSS of a fresh worker after a reset (measured once per server)."""
    if server.pid not in _BASELINES:
        with server.session() as s:
            s.reset(seed=3)
            _BASELINES[server.pid] = s.worker_peak_mb()
    return _BASELINES[server.pid]


# -- CPU ------------------------------------------------------------------------------------------------------
CPU_TERMINAL = [
    "yes | wc -l",
    "yes | sort | uniq -c",
    "yes y | head -n 100000000 | wc -l",
    "cat /var/log/syslog /var/log/syslog /var/log/syslog | sort | sort | sort | wc -l",
    " | ".join(["yes"] + ["cat"] * 60) + " | wc -l",
    "grep -r a / / / / / / / / | wc -l",
    "ls -laR / / / / / / / / / / / / / / / / / / / / | wc -l",
    "find / / / / / / / / / / / / / / / / / / / / / / / / | wc -l",
    "cat /var/log/*/*-debug.log | grep -c nothing",
    "yes " + "ab" * 900 + " | grep -E '(a|b)*(a|b)*(a|b)*c' | wc -l",
    "yes " + "a" * 1500 + " | grep -E '^(a+)+$' | wc -l",
    "yes | cut -c1-3 | sort -r | uniq | wc -l",
    "du -a / / / / / / / / / / / / / / / / | sort -n | tail -1",
    "journalctl | sort | uniq -c | sort -rn | head -1; " * 20,
    "printf '%s\\n' " + "x " * 1500 + "| sort | uniq -c | wc -l",
]
CPU_SQL = [
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "SELECT count(*) FROM order_items a, order_items b, order_items c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(printf('%d', x)) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(date('2024-01-01', '+1 day')) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(random()) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 3000000) SELECT x FROM c ORDER BY random() LIMIT 1",
    "SELECT count(*) FROM orders a JOIN orders b ON a.freight LIKE '%' || b.freight || '%'",
    "SELECT count(*) FROM customers a, customers b, customers c WHERE a.email GLOB '*a*b*c*d*e*'",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(randomblob(1000)) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(strftime('%Y', 'now')) FROM c",
    "SELECT count(*) FROM (SELECT * FROM order_items ORDER BY random()), (SELECT * FROM order_items)",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT group_concat(x) FROM c",
]


@pytest.mark.parametrize("command", CPU_TERMINAL, ids=[f"cpu-terminal-{i}" for i in range(len(CPU_TERMINAL))])
def test_cpu_terminal(servers: dict[str, LiveServer], command: str) -> None:
    server = servers["terminal"]
    disk = server.disk_bytes()
    replies, session = _run_hostile(server, [{"command": command}])
    try:
        reply = replies[0]
        if command.startswith("yes") and "head" not in command:  # endless: must be stopped by the budget
            assert _stopped_or_timed_out(reply), reply
        else:  # finishes or is stopped; either way an answer
            assert reply["type"] == "observation" or reply["data"]["code"] == "STEP_TIMEOUT", reply
        _check_budgets(server, session, replies, disk)
        _normal_step(server, session)
    finally:
        session.close()


@pytest.mark.parametrize("query", CPU_SQL, ids=[f"cpu-sql-{i}" for i in range(len(CPU_SQL))])
def test_cpu_sql(servers: dict[str, LiveServer], query: str) -> None:
    server = servers["sql"]
    disk = server.disk_bytes()
    replies, session = _run_hostile(server, [{"query": query}])
    try:
        reply = replies[0]
        if "RECURSIVE" in query and "LIMIT" not in query:  # endless: must be stopped by the budget
            assert _stopped_or_timed_out(reply), reply
        else:  # finishes or is stopped; either way an answer
            assert reply["type"] == "observation" or reply["data"]["code"] == "STEP_TIMEOUT", reply
        _check_budgets(server, session, replies, disk)
        _normal_step(server, session)
    finally:
        session.close()


# -- memory ---------------------------------------------------------------------------------------------------
A4K = "A=" + "x" * 4000
MEMORY_TERMINAL: list[list[str]] = [
    [A4K, "A=$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A", "A=$A$A$A$A"],
    [A4K, "echo " + "$A" * 900 + " | wc -c"],
    [A4K, "B=" + "$A" * 900],
    [A4K, "echo " + '"$A"' * 800 + " | sort | wc -c"],
    ["printf '%999999999s' x | wc -c"],
    ["printf '%.999999999f' 1 | wc -c"],
    ["printf '%0999999999999999999d' 1 | wc -c"],
    ["printf '%999999s%999999s%999999s%999999s%999999s' a b c d e | wc -c"],
    ["yes " + "x" * 4000 + " | head -n 100000 | sort | wc -c"],
    ["yes " + "x" * 4000 + " | sort -r | uniq -c | wc -l"],
    ["cat /var/log/*/*-debug.log | sort | tail -1"],
    ["yes " + "y" * 2000 + " | tail -n 100000 | wc -l"],
    ["echo /*/*/*/*/*/*/*/*/*/*/* /*/*/*/*/*/*/*/*/* | wc -c"],
    ["yes " + "x" * 3000 + " 2>&1 | uniq | wc -c"],
]
# sizes taken from arguments (counts, widths, repeats, ranges), over the lazily generated multi-GB debug logs that
# seeds 10 and 22 plant: each must be charged line by line before it is built, never allocated up front
HUGE = "999999999999"
ALLOCATION_TERMINAL: list[str] = [
    f"tail -n {HUGE} /var/log/*/*.log | cat | wc -l",
    f"tail -n {HUGE} /var/log/*/*.log /var/log/*/*.log | sort | head -n 2",
    f"tail -c {HUGE} /var/log/*/*-debug.log | wc -c",
    f"tail -n +1 /var/log/*/*-debug.log | tail -n {HUGE} | wc -l",
    f"head -n -{HUGE} /var/log/*/*-debug.log | wc -l",
    f"head -c -{HUGE} /var/log/*/*-debug.log | wc -c",
    f"grep -B {HUGE} -A {HUGE} -m {HUGE} e /var/log/*/*-debug.log | wc -l",
    f"cut -c1-{HUGE} /var/log/*/*-debug.log | wc -c",
    f"cut -f1-{HUGE} -d: /etc/passwd /var/log/*/*-debug.log | wc -c",
    f"uniq -w {HUGE} -s {HUGE} -f {HUGE} /var/log/*/*-debug.log | wc -l",
    f"sort -k1.{HUGE} /var/log/*/*-debug.log | tail -n {HUGE} | wc -l",
    f"yes | head -n {HUGE} | tail -n {HUGE} | wc -l",
    f"ls -w {HUGE} -C /usr/bin /var/log/* | wc -c",
    f"journalctl -n {HUGE} --no-pager | tail -n {HUGE} | wc -l",
    f"dmesg | tail -n {HUGE}; history {HUGE} | wc -l",
    f"less +{HUGE} /var/log/*/*-debug.log | wc -l",
    f"find / -maxdepth {HUGE} | tail -n {HUGE} | wc -l",
    f"printf '%*s' {HUGE} x | wc -c",
]


@pytest.mark.parametrize("seed", [10, 22])
@pytest.mark.parametrize(
    "command", ALLOCATION_TERMINAL, ids=[f"allocation-terminal-{i}" for i in range(len(ALLOCATION_TERMINAL))]
)
def test_allocation_terminal(servers: dict[str, LiveServer], command: str, seed: int) -> None:
    server = servers["terminal"]
    disk = server.disk_bytes()
    replies, session = _run_hostile(server, [{"command": command}], seed=seed)
    try:
        _check_budgets(server, session, replies, disk)
        _normal_step(server, session)
    finally:
        session.close()


MEMORY_SQL = [
    "SELECT " + ", ".join(["zeroblob(900000)"] * 60),
    "SELECT " + ", ".join(["hex(zeroblob(400000))"] * 90),
    "WITH RECURSIVE c(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM c) SELECT length(s) FROM c",
    "SELECT group_concat(hex(randomblob(100000))) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 "
    "FROM c LIMIT 100) SELECT x FROM c)",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 400000) SELECT x, printf('%500s', x) FROM c "
    "ORDER BY 2 DESC LIMIT 1",
    "SELECT printf('%.*c', 2000000000, 'x')",
    "SELECT printf('%*d', 999999999, 1)",
    "SELECT replace(hex(zeroblob(500000)), '0', 'abcdefgh')",
    "SELECT " + ", ".join([f"printf('%400000d', {i})" for i in range(100)]),
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 200000) SELECT count(DISTINCT printf('%200d', x)) FROM c",
    "SELECT randomblob(2000000000)",
]


@pytest.mark.parametrize("commands", MEMORY_TERMINAL, ids=[f"memory-terminal-{i}" for i in range(len(MEMORY_TERMINAL))])
def test_memory_terminal(servers: dict[str, LiveServer], commands: list[str]) -> None:
    server = servers["terminal"]
    disk = server.disk_bytes()
    replies, session = _run_hostile(server, [{"command": c} for c in commands])
    try:
        _check_budgets(server, session, replies, disk)
        _normal_step(server, session)
    finally:
        session.close()


@pytest.mark.parametrize("query", MEMORY_SQL, ids=[f"memory-sql-{i}" for i in range(len(MEMORY_SQL))])
def test_memory_sql(servers: dict[str, LiveServer], query: str) -> None:
    server = servers["sql"]
    disk = server.disk_bytes()
    replies, session = _run_hostile(server, [{"query": query}])
    try:
        _check_budgets(server, session, replies, disk)
        _normal_step(server, session)
    finally:
        session.close()


# -- disk -----------------------------------------------------------------------------------------------------
DISK_TERMINAL = [
    "yes > /tmp/fill",
    "cat /var/log/syslog >> /root/big",
    "yes | tee /tmp/fill | wc -l",
    "dd if=/dev/zero of=/tmp/fill bs=1M count=100",
    "fallocate -l 10G /tmp/fill",
]
DISK_SQL = [
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 2000000) SELECT x FROM c ORDER BY x DESC LIMIT 1",
    "SELECT DISTINCT a.order_id, b.order_id FROM order_items a, order_items b ORDER BY 1, 2 DESC LIMIT 1",
    "PRAGMA temp_store = FILE",
    "PRAGMA temp_store_directory = '/tmp'",
    "VACUUM INTO '/tmp/copy.db'",
    "ATTACH DATABASE '/tmp/new.db' AS x",
    "CREATE TEMP TABLE t AS SELECT * FROM order_items",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 300000) SELECT x, count(*) FROM c GROUP BY "
    "printf('%100d', x) ORDER BY 2 DESC LIMIT 1",
]


@pytest.mark.parametrize("command", DISK_TERMINAL, ids=[f"disk-terminal-{i}" for i in range(len(DISK_TERMINAL))])
def test_disk_terminal(servers: dict[str, LiveServer], command: str) -> None:
    server = servers["terminal"]
    disk = server.disk_bytes()
    replies, session = _run_hostile(server, [{"command": command}])
    try:
        _check_budgets(server, session, replies, disk)
        assert server.disk_bytes() == disk  # the terminal writes nothing at all
        _normal_step(server, session)
    finally:
        session.close()


@pytest.mark.parametrize("query", DISK_SQL, ids=[f"disk-sql-{i}" for i in range(len(DISK_SQL))])
def test_disk_sql(servers: dict[str, LiveServer], query: str) -> None:
    server = servers["sql"]
    disk = server.disk_bytes()
    replies, session = _run_hostile(server, [{"query": query}])
    try:
        _check_budgets(server, session, replies, disk)
        assert server.disk_bytes() == disk  # temp storage is memory only
        _normal_step(server, session)
    finally:
        session.close()


# -- output size ----------------------------------------------------------------------------------------------
OUTPUT_TERMINAL = [
    "yes",
    "cat /var/log/syslog /var/log/syslog /var/log/syslog /var/log/syslog /var/log/syslog",
    "ls -laR /",
    "printf '%65000s' x",
    "yes " + "x" * 3000 + " | head -n 3",
    "find /",
    "grep -r . /",
    "yes " + "é" * 1000,
    "journalctl",
    "ps auxww; " * 8,
]
OUTPUT_SQL = [
    "SELECT * FROM order_items",
    "SELECT * FROM customers, products",
    "SELECT " + ", ".join(["email"] * 99) + " FROM customers",
    "SELECT printf('%900000s', 'x')",
    "SELECT hex(zeroblob(400000)) FROM customers LIMIT 60",
    "SELECT group_concat(email, '') FROM customers",
    "SELECT char(10) || printf('%4000s', 'x') FROM orders",
]


def _output_capped(reply: dict[str, Any]) -> None:
    text = observation_text(reply)
    assert len(text.encode()) <= 8192  # the envs' 4 KiB display cap, plus the echoed action (<= 512 chars) and notices
    assert any(word in text for word in ("truncated", "showing", "cut", "rows")), text[-300:]


@pytest.mark.parametrize("command", OUTPUT_TERMINAL, ids=[f"output-terminal-{i}" for i in range(len(OUTPUT_TERMINAL))])
def test_output_terminal(servers: dict[str, LiveServer], command: str) -> None:
    server = servers["terminal"]
    replies, session = _run_hostile(server, [{"command": command}])
    try:
        _output_capped(replies[0])
        _normal_step(server, session)
    finally:
        session.close()


@pytest.mark.parametrize("query", OUTPUT_SQL, ids=[f"output-sql-{i}" for i in range(len(OUTPUT_SQL))])
def test_output_sql(servers: dict[str, LiveServer], query: str) -> None:
    server = servers["sql"]
    replies, session = _run_hostile(server, [{"query": query}])
    try:
        _output_capped(replies[0])
        _normal_step(server, session)
    finally:
        session.close()


# -- host facts -----------------------------------------------------------------------------------------------
HOST_TERMINAL = [
    "hostname; hostname -f; uname -a",
    "date; date +%s; date -u",
    "env; printenv; set",
    f"echo ${'{'}OPENENV_ECHO_TEST_CANARY{'}'} $HOME $PWD $USER $$ $PPID",
    "cat /proc/self/environ /proc/self/cmdline /proc/self/status",
    "cat /etc/hostname /etc/hosts /etc/machine-id",
    "uptime; cat /proc/uptime /proc/loadavg",
    "ps aux; ps -ef",
    "pwd; cd ~; pwd; ls -la",
    "id; whoami; groups",
    "cat /proc/cpuinfo /proc/meminfo | head -50",
    "ls -la /tmp /var/tmp /dev/shm",
    "df -h; free -m",
    "ss -tlnp; cat /etc/resolv.conf",
]
HOST_SQL = [
    "SELECT date('now'), time('now'), datetime('now'), julianday('now'), unixepoch('now')",
    "SELECT CURRENT_TIMESTAMP, CURRENT_DATE, CURRENT_TIME",
    "SELECT datetime('2024-01-01 10:00', 'localtime'), datetime('now', 'utc'), date()",
    "SELECT strftime('%s %Y-%m-%d %H:%M:%f', 'now')",
    "SELECT sqlite_version()",
    "SELECT sqlite_source_id()",
    "PRAGMA compile_options",
    "PRAGMA database_list",
    "SELECT random(), random(), hex(randomblob(8))",
    "SELECT sqlite_compileoption_used('THREADSAFE')",
]


def _host_fact_free(server: LiveServer, actions: list[dict[str, Any]]) -> None:
    """Two sessions, a second apart, same seed and actions: byte-identical and free of host facts."""
    texts = []
    for _ in range(2):
        replies, session = _run_hostile(server, actions, seed=5)
        try:
            texts.append(json.dumps([r["data"] for r in replies]))
        finally:
            session.close()
        time.sleep(1.1)  # the host clock moves between the two runs; the outputs must not
    assert texts[0] == texts[1], "outputs are a function of (seed, actions) only"
    for fact in server.host_facts():
        assert not re.search(rf"(?<![\w.-]){re.escape(fact)}(?![\w.-])", texts[0]), fact


@pytest.mark.parametrize("command", HOST_TERMINAL, ids=[f"host-terminal-{i}" for i in range(len(HOST_TERMINAL))])
def test_host_facts_terminal(servers: dict[str, LiveServer], command: str) -> None:
    _host_fact_free(servers["terminal"], [{"command": command}])
    _normal_step(servers["terminal"])


@pytest.mark.parametrize("query", HOST_SQL, ids=[f"host-sql-{i}" for i in range(len(HOST_SQL))])
def test_host_facts_sql(servers: dict[str, LiveServer], query: str) -> None:
    _host_fact_free(servers["sql"], [{"query": query}])
    _normal_step(servers["sql"])


def test_sql_now_is_the_worlds_fixed_time(servers: dict[str, LiveServer]) -> None:
    with servers["sql"].session() as s:
        s.reset(seed=5)
        last = observation_text(s.step({"query": "SELECT date(max(order_date), '+1 day') FROM orders"}))
        now = observation_text(s.step({"query": "SELECT date('now')"}))
        assert last.splitlines()[-2].strip() == now.splitlines()[-2].strip()


# every time source reachable from SQL, whatever the argument's type or spelling: (query, query at the world's time)
WORLD_NOW = "(SELECT datetime(max(order_date), '+1 day', 'start of day') FROM orders)"
HOST_CLOCK_SQL: list[tuple[str, str]] = [
    ("SELECT date(x'6e6f77')", f"SELECT date({WORLD_NOW})"),
    ("SELECT datetime(CAST('NOW' AS BLOB))", f"SELECT datetime({WORLD_NOW})"),
    ("SELECT julianday('now' || char(0) || 'later')", f"SELECT julianday({WORLD_NOW})"),
    ("SELECT time(x'6e6f7700ff')", f"SELECT time({WORLD_NOW})"),
    ("SELECT strftime('%s', 'n' || 'o' || 'w')", f"SELECT strftime('%s', {WORLD_NOW})"),
    ("SELECT unixepoch(lower('NoW'))", f"SELECT unixepoch({WORLD_NOW})"),
    ("SELECT date(v) FROM (SELECT 'now' AS v UNION ALL SELECT x'4e4f57')", f"SELECT date({WORLD_NOW})"),
    (
        "WITH t(v) AS (VALUES (CAST('now' AS BLOB))) SELECT datetime(v, '+1 hour') FROM t",
        f"SELECT datetime({WORLD_NOW}, '+1 hour')",
    ),
    ("SELECT date('now', CAST('localtime' AS BLOB))", f"SELECT date({WORLD_NOW})"),
    ("SELECT datetime('now', 'LOCALTIME' || char(0))", f"SELECT datetime({WORLD_NOW})"),
    (
        "SELECT date(), time(), datetime(), julianday(), unixepoch()",
        f"SELECT date({WORLD_NOW}), time({WORLD_NOW}), datetime({WORLD_NOW}), julianday({WORLD_NOW}), unixepoch({WORLD_NOW})",
    ),
    (
        "SELECT CURRENT_TIMESTAMP, CURRENT_DATE, CURRENT_TIME",
        f"SELECT datetime({WORLD_NOW}), date({WORLD_NOW}), time({WORLD_NOW})",
    ),
    ("SELECT strftime(x'2559', x'6e6f77')", f"SELECT strftime('%Y', {WORLD_NOW})"),
]


@pytest.mark.parametrize(
    ("query", "expected"), HOST_CLOCK_SQL, ids=[f"host-clock-sql-{i}" for i in range(len(HOST_CLOCK_SQL))]
)
def test_sql_time_sources_give_the_worlds_time(servers: dict[str, LiveServer], query: str, expected: str) -> None:
    with servers["sql"].session() as s:
        s.reset(seed=5)
        want = observation_text(s.step({"query": expected}))
        got = observation_text(s.step({"query": query}))
        assert "error" not in got.lower() and "error" not in want.lower(), (got, want)
        assert got.splitlines()[-2].split() == want.splitlines()[-2].split(), (got, want)


# -- protocol -------------------------------------------------------------------------------------------------
PROTOCOL_HTTP: list[tuple[str, bytes]] = [
    ("/reset", b'{"seed": NaN}'),
    ("/reset", b'{"seed": Infinity}'),
    ("/reset", b'{"seed": -Infinity}'),
    ("/reset", b'{"seed": 1e999}'),
    ("/reset", b'{"seed": ' + b"9" * 5000 + b"}"),
    ("/reset", b'{"seed": 1e308}'),
    ("/reset", b'{"a":' + b"[" * 50000 + b"]" * 50000 + b"}"),
    ("/reset", b'{"a":' + b"[" * 40 + b"]" * 40 + b"}"),
    ("/reset", b'{"seed": "\xff"}'),
    ("/reset", b'{"seed": "\\ud800"}'),
    ("/reset", b"[1, 2]"),
    ("/reset", b'"just a string"'),
    ("/reset", b"{"),
    ("/reset", b'{"seed": 1, "seed": 2, "episode_id": "' + b"x" * 300 + b'"}'),
    ("/reset", b'{"max_steps": 1e400}'),
    ("/step", b'{"action": {"command": NaN}}'),
    ("/step", b'{"action": {"command": "ls", "metadata": {"x": Infinity}}}'),
    ("/step", b'{"action": ' + b"{" * 30 + b"}" * 30 + b"}"),
    ("/step", b'{"action": {"command": "\\udfff"}}'),
    ("/step", b'{"action": {"command": ' + b"1" * 5000 + b"}}"),
    ("/step", b'{"action": {"command": "' + b"x" * (2 << 20) + b'"}}'),
    ("/mcp", b'{"jsonrpc": "2.0", "id": NaN, "method": "tools/list"}'),
    (
        "/mcp",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": '
        + b"[" * 5000
        + b"]" * 5000
        + b"}}",
    ),
    ("/mcp", b'{"jsonrpc": "2.0", "id": 1e999, "method": "tools/list"}'),
    ("/mcp", b"\xff\xfe"),
    ("/mcp", b'{"jsonrpc": "2.0", "id": {"deep": ' + b"[" * 100 + b"]" * 100 + b'}, "method": "tools/list"}'),
]
PROTOCOL_WS: list[str] = [
    '{"type": "reset", "data": {"seed": NaN}}',
    '{"type": "step", "data": {"command": Infinity}}',
    '{"type": "step", "data": {"command": "ls", "metadata": {"x": -Infinity}}}',
    '{"type": "reset", "data": {"seed": 1e999}}',
    '{"type": "reset", "data": {"seed": ' + "7" * 5000 + "}}",
    '{"type": "step", "data": ' + "[" * 50000 + "]" * 50000 + "}",
    '{"type": "mcp", "data": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": '
    + "{" * 1
    + '"a":'
    + "[" * 500
    + "]" * 500
    + "}}}",
    '{"type": "state", "data": ' + "[" * 40 + "]" * 40 + "}",
    '{"type": "step", "data": {"command": "' + "x" * (2 << 20) + '"}}',
    '{"type": "nope"}',
    "[]",
    "null",
    '{"type": "step"}',
    '{"type": "reset", "data": {"max_steps": 1e400}}',
]


def _typed_error(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:300]
    body = strict_loads(response.text)
    if response.status_code >= 400:
        assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), body
    elif "jsonrpc" in body:
        assert "error" in body or "result" in body


@pytest.mark.parametrize(("path", "body"), PROTOCOL_HTTP, ids=[f"protocol-http-{i}" for i in range(len(PROTOCOL_HTTP))])
def test_protocol_http(servers: dict[str, LiveServer], path: str, body: bytes) -> None:
    server = servers["terminal"]
    response = httpx.post(
        server.url + path, content=body, headers={"content-type": "application/json"}, trust_env=False, timeout=30
    )
    _typed_error(response)
    _normal_step(server)


@pytest.mark.parametrize("frame", PROTOCOL_WS, ids=[f"protocol-ws-{i}" for i in range(len(PROTOCOL_WS))])
def test_protocol_ws(servers: dict[str, LiveServer], frame: str) -> None:
    server = servers["terminal"]
    with server.session() as s:
        s.reset(seed=1)
        reply = s.send(frame)
        assert reply["type"] == "error" and reply["data"]["code"] != "EXECUTION_ERROR", reply
        assert isinstance(reply["data"]["message"], str)
        _normal_step(server, s)  # the same session keeps working


def test_protocol_refusals_name_the_reason(servers: dict[str, LiveServer]) -> None:
    server = servers["terminal"]
    with server.session() as s:
        s.reset(seed=1)
        assert "NaN" in s.send('{"type": "step", "data": {"command": NaN}}')["data"]["message"]
        assert "deeper than" in s.send('{"type": "step", "data": ' + "[" * 100 + "]" * 100 + "}")["data"]["message"]
        assert "64-bit float" in s.send('{"type": "reset", "data": {"seed": 1e999}}')["data"]["message"]
    r = httpx.post(server.url + "/reset", content=b"{", headers={"content-type": "application/json"}, trust_env=False)
    assert (r.status_code, r.json()["code"]) == (400, "INVALID_JSON")


# -- connections ----------------------------------------------------------------------------------------------
def _raw(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def test_connection_slow_headers_are_cut(servers: dict[str, LiveServer]) -> None:
    server = servers["terminal"]
    with _raw(server) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
        answer = _read_all(s)
    assert answer.startswith(b"HTTP/1.1 408") and b"REQUEST_TIMEOUT" in answer
    _normal_step(server)


def test_connection_slow_body_is_cut(servers: dict[str, LiveServer]) -> None:
    server = servers["terminal"]
    with _raw(server) as s:
        s.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n{")
        answer = _read_all(s)
    assert b" 408 " in answer.split(b"\r\n")[0] and b"REQUEST_TIMEOUT" in answer
    _normal_step(server)


def test_connection_flood_is_capped_and_recovers(servers: dict[str, LiveServer]) -> None:
    server = servers["terminal"]
    held = [_raw(server) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)
        with _raw(server) as extra:
            answer = _read_all(extra)
        assert answer.startswith(b"HTTP/1.1 429") and b"CAPACITY_REACHED" in answer
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    _normal_step(server)


def test_connection_idle_keepalive_is_reaped(servers: dict[str, LiveServer]) -> None:
    server = servers["terminal"]
    with _raw(server) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _read_all(s)  # the response, then the server closes the idle keep-alive connection
    assert answer.startswith(b"HTTP/1.1 200")
    _normal_step(server)


def test_connection_garbage_http_gets_json(servers: dict[str, LiveServer]) -> None:
    server = servers["terminal"]
    with _raw(server) as s:
        s.sendall(b"\x16\x03\x01 this is not http\r\n\r\n")
        answer = _read_all(s)
    assert answer.startswith(b"HTTP/1.1 400")
    strict_loads(answer.split(b"\r\n\r\n", 1)[1])
    _normal_step(server)


def test_connection_huge_headers_refused(servers: dict[str, LiveServer]) -> None:
    server = servers["terminal"]
    with _raw(server) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n")
        answer = _read_all(s)
    assert answer == b"" or answer.split(b" ", 2)[1].startswith(b"4")
    _normal_step(server)


def test_connection_sessions_over_capacity(servers: dict[str, LiveServer]) -> None:
    server = servers["sql"]
    sessions = []
    try:
        for _ in range(LIMITS.max_sessions):
            s = server.session()
            s.send({"type": "state"})
            sessions.append(s)
        with server.session() as extra:
            reply = strict_loads(extra.ws.recv(timeout=30))
        assert reply["data"]["code"] == "CAPACITY_REACHED"
    finally:
        for s in sessions:
            s.close()
    time.sleep(0.5)
    _normal_step(server)


def test_zz_server_was_never_restarted(servers: dict[str, LiveServer]) -> None:
    assert set(servers) == {"terminal", "sql"}
    for server in servers.values():
        assert server.alive() and server.proc.pid == server.pid
        assert server.tree_rss_mb() < 200 + 64 * 2  # workers of closed sessions are gone


MCP_WS_FRAMES = [
    '{"jsonrpc": "2.0", "id": NaN, "method": "tools/list"}',
    '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"jsonrpc": "2.0", "id": 1e999, "method": "tools/list"}',
    "not json at all",
    '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "run_command", "arguments": '
    '{"command": "yes | sort | uniq -c"}}}',
]


@pytest.mark.parametrize("frame", MCP_WS_FRAMES, ids=[f"protocol-mcp-ws-{i}" for i in range(len(MCP_WS_FRAMES))])
def test_protocol_mcp_ws(servers: dict[str, LiveServer], frame: str) -> None:
    """WS ``/mcp``: every frame gets a strict-JSON JSON-RPC answer; the same connection then lists its tools."""
    server = servers["terminal"]
    with connect(server.url.replace("http", "ws") + "/mcp", max_size=None, open_timeout=30) as ws:
        ws.send(frame)
        reply = strict_loads(ws.recv(timeout=60))
        assert reply["jsonrpc"] == "2.0" and ("error" in reply or "result" in reply), reply
        if "error" in reply:
            assert reply["error"]["code"] != -32603, reply  # never an internal error
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        assert strict_loads(ws.recv(timeout=60))["result"]["tools"]
    _normal_step(server)
