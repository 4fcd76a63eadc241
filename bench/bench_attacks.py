"""Worst case of each attack class against live servers while a bystander session steps; a verdict on the targets.

One ``openenv-echo serve`` process per env (terminal, sql) with default limits and a private TMPDIR. For each
class (CPU, memory, disk, output size, host facts, protocol, connections) its worst actions run ``--rounds``
times on the env they target while a bystander session on the same server steps ordinary commands. Printed per
class: the attacker's worst step wall time, RSS growth per session (peak of the attacking session's worker above a
fresh worker's, plus the server process's own growth), growth of the server's temp dir, host facts found in
replies, HTTP 5xx replies, and the bystander's p99 step latency.

    python bench/bench_attacks.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from websockets.sync.client import connect

TARGETS = {"worst_step_s": 2.0, "rss_growth_mb": 64.0, "disk_growth_mb": 16.0, "bystander_p99_ms": 100.0}


class Server:
    def __init__(self, env: str) -> None:
        from openenv_echo.server import free_port

        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"bench-attacks-{env}-"))
        self.canary = "canary-" + uuid.uuid4().hex
        environ = {**os.environ, "TMPDIR": str(self.tmp), "OPENENV_ECHO_BENCH_CANARY": self.canary}
        cmd = [sys.executable, "-m", "openenv_echo.cli", "serve", env, "--port", str(self.port), "--log-level", "error"]
        self.proc = subprocess.Popen(cmd, env=environ, stdout=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if httpx.get(self.url + "/health", trust_env=False, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"{env} server did not start")

    def workers(self) -> set[int]:
        out = set()
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if p.ppid() != self.proc.pid:
                    out.add(p.pid)
            except psutil.NoSuchProcess:
                pass
        return out

    def main_rss_mb(self) -> float:
        return psutil.Process(self.proc.pid).memory_info().rss / 2**20

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.tmp.rglob("*") if f.is_file())

    def facts(self) -> list[re.Pattern[str]]:
        today = time.gmtime()
        words = [self.canary, str(self.tmp), os.getcwd(), sys.prefix, time.strftime("%Y-%m-%d", today)]
        if len(socket.gethostname()) >= 4:
            words.append(socket.gethostname())
        return [re.compile(rf"(?<![\w.-]){re.escape(w)}(?![\w.-])") for w in words]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)  # the private TMPDIR


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Session:
    """A raw WS session on ``server``; knows its worker pid once it has reset."""

    def __init__(self, server: Server) -> None:
        before = server.workers()
        self.ws = connect(server.ws_url, max_size=None, open_timeout=30)
        self.ws.send(json.dumps({"type": "reset", "data": {"seed": 3, "max_steps": 1000}}))
        json.loads(self.ws.recv(timeout=60))
        new = server.workers() - before
        self.worker = min(new) if new else None

    def send(self, frame: dict[str, Any] | str) -> tuple[float, str]:
        t0 = time.perf_counter()
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))
        reply = self.ws.recv(timeout=120)
        return time.perf_counter() - t0, str(reply)

    def close(self) -> None:
        self.ws.close()


class Bystander(threading.Thread):
    """Steps ordinary actions on its own session until stopped; records each step's latency."""

    def __init__(self, server: Server) -> None:
        super().__init__(daemon=True)
        self.session = Session(server)
        self.actions = (
            [{"command": c} for c in ("ls /var/log", "tail -n 5 /var/log/syslog", "df -h", "ps aux | head -5")]
            if server.env == "terminal"
            else [{"query": q} for q in ("SELECT count(*) FROM customers", "SELECT name FROM products LIMIT 5")]
        )
        self.latencies: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        k = 0
        while not self.stopped.is_set():
            dt, _ = self.session.send({"type": "step", "data": self.actions[k % len(self.actions)]})
            self.latencies.append(dt)
            k += 1
            if k % 900 == 0:  # a fresh episode before the step limit
                self.session.send({"type": "reset", "data": {"seed": k, "max_steps": 1000}})
            time.sleep(0.005)

    def p99_ms(self) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


@dataclass
class Result:
    worst_step_s: float = 0.0
    rss_growth_mb: float = 0.0
    disk_growth_mb: float = 0.0
    host_facts: int = 0
    http_5xx: int = 0
    bystander_p99_ms: float = 0.0
    notes: list[str] = field(default_factory=list)


def step_attack(server: Server, actions: list[dict[str, Any]], baseline_peak: float, r: Result) -> None:
    """Run ``actions`` in one fresh session; fold its worst step, worker peak and host facts into ``r``."""
    s = Session(server)
    try:
        for a in actions:
            dt, reply = s.send({"type": "step", "data": a})
            r.worst_step_s = max(r.worst_step_s, dt)
            r.host_facts += sum(bool(p.search(reply)) for p in server.facts())
        if s.worker is not None:
            r.rss_growth_mb = max(r.rss_growth_mb, peak_mb(s.worker) - baseline_peak)
    finally:
        s.close()


def host_facts_attack(server: Server, actions: list[dict[str, Any]], baseline: float, r: Result) -> None:
    """Host facts: the same seed and actions twice, a second apart, must give the same bytes (else a fact leaked)."""
    replies = []
    for _ in range(2):
        s = Session(server)
        try:
            replies.append([s.send({"type": "step", "data": a})[1] for a in actions])
        finally:
            s.close()
        time.sleep(1.1)
    r.host_facts += sum(a != b for a, b in zip(*replies, strict=True))
    step_attack(server, actions, baseline, r)


PROTOCOL_BODIES = [
    ("/reset", b'{"seed": NaN}'),
    ("/reset", b'{"seed": 1e999}'),
    ("/reset", b'{"seed": ' + b"9" * 5000 + b"}"),
    ("/reset", b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}"),
    ("/step", b'{"action": {"command": "\\ud800"}}'),
    ("/step", b'{"action": ' + b"{" * 40 + b"}" * 40 + b"}"),
    ("/mcp", b'{"jsonrpc": "2.0", "id": Infinity, "method": "tools/list"}'),
    ("/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
]


def protocol_attack(server: Server, r: Result) -> None:
    with httpx.Client(trust_env=False, timeout=30) as client:
        for path, body in PROTOCOL_BODIES:
            t0 = time.perf_counter()
            resp = client.post(server.url + path, content=body, headers={"content-type": "application/json"})
            r.worst_step_s = max(r.worst_step_s, time.perf_counter() - t0)
            r.http_5xx += resp.status_code >= 500
            try:
                json.loads(resp.text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            except ValueError:
                r.notes.append(f"non-strict JSON reply from {path}")
    s = Session(server)
    try:
        for frame in ('{"type":"step","data":' + "[" * 200000 + "]" * 200000 + "}", '{"type":"step","data":{"x":NaN}}'):
            dt, reply = s.send(frame)
            r.worst_step_s = max(r.worst_step_s, dt)
            if '"EXECUTION_ERROR"' in reply:
                r.notes.append("EXECUTION_ERROR on a bad frame")
    finally:
        s.close()


def connections_attack(server: Server, r: Result) -> None:
    """Slowloris (half-sent headers) up to the connection cap and beyond, then let the header deadline cut them."""
    held = []
    for _ in range(300):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        held.append(sock)
    t0 = time.perf_counter()
    try:
        resp = httpx.get(server.url + "/health", trust_env=False, timeout=30)
        r.http_5xx += resp.status_code >= 500
    except httpx.HTTPError:
        pass
    r.worst_step_s = max(r.worst_step_s, time.perf_counter() - t0)
    time.sleep(11)  # the default header deadline (10 s) cuts every half-sent request
    for sock in held:
        sock.close()


@dataclass
class AttackClass:
    name: str
    env: str
    run: Callable[[Server, float, Result], None]


A4K = "A=" + "x" * 4000
CLASSES = [
    AttackClass(
        "cpu",
        "terminal",
        lambda s, b, r: step_attack(s, [{"command": c} for c in ("yes | sort | uniq -c", "yes | wc -l")], b, r),
    ),
    AttackClass(
        "cpu",
        "sql",
        lambda s, b, r: step_attack(
            s,
            [
                {
                    "query": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(printf('%d', x)) FROM c"
                }
            ],
            b,
            r,
        ),
    ),
    AttackClass(
        "memory",
        "terminal",
        lambda s, b, r: step_attack(
            s,
            [
                {"command": c}
                for c in (A4K, "A=$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A", "echo " + "$A" * 900 + " | sort | wc -c")
            ],
            b,
            r,
        ),
    ),
    AttackClass(
        "memory",
        "sql",
        lambda s, b, r: step_attack(s, [{"query": "SELECT " + ", ".join(["zeroblob(900000)"] * 60)}], b, r),
    ),
    AttackClass(
        "disk",
        "sql",
        lambda s, b, r: step_attack(
            s,
            [
                {
                    "query": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 2000000) "
                    "SELECT x FROM c ORDER BY x DESC LIMIT 1"
                }
            ],
            b,
            r,
        ),
    ),
    AttackClass(
        "output",
        "terminal",
        lambda s, b, r: step_attack(s, [{"command": "yes " + "x" * 3000}, {"command": "ls -laR / / / /"}], b, r),
    ),
    AttackClass(
        "output",
        "sql",
        lambda s, b, r: step_attack(s, [{"query": "SELECT * FROM customers, products"}], b, r),
    ),
    AttackClass(
        "host facts",
        "terminal",
        lambda s, b, r: host_facts_attack(
            s, [{"command": "date; hostname; uname -a; env; cat /proc/self/environ; uptime; ps aux"}], b, r
        ),
    ),
    AttackClass(
        "host facts",
        "sql",
        lambda s, b, r: host_facts_attack(
            s,
            [{"query": "SELECT date('now'), CURRENT_TIMESTAMP, julianday(), datetime(0, 'unixepoch', 'localtime')"}],
            b,
            r,
        ),
    ),
    AttackClass("protocol", "terminal", lambda s, b, r: protocol_attack(s, r)),
    AttackClass("connections", "terminal", lambda s, b, r: connections_attack(s, r)),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="repetitions of each class's attack")
    args = p.parse_args()

    servers = {env: Server(env) for env in ("terminal", "sql")}
    try:
        baseline = {}
        for env, server in servers.items():  # a fresh worker's peak after its reset: the per-session baseline
            s = Session(server)
            baseline[env] = peak_mb(s.worker) if s.worker else 0.0
            s.close()
        results: dict[str, Result] = {}
        for cls in CLASSES:
            server = servers[cls.env]
            r = results.setdefault(cls.name, Result())
            main_before, disk_before = server.main_rss_mb(), server.disk_bytes()
            bystander = Bystander(server)
            bystander.start()
            try:
                for _ in range(args.rounds):
                    cls.run(server, baseline[cls.env], r)
            finally:
                bystander.stopped.set()
                bystander.join(30)
                bystander.session.close()
            main_growth = max(0.0, server.main_rss_mb() - main_before)
            r.rss_growth_mb = max(r.rss_growth_mb, 0.0) + main_growth
            r.disk_growth_mb = max(r.disk_growth_mb, (server.disk_bytes() - disk_before) / 2**20)
            r.bystander_p99_ms = max(r.bystander_p99_ms, bystander.p99_ms())
            if server.proc.poll() is not None:
                raise RuntimeError(f"the {cls.env} server died during {cls.name}")
        header = f"{'class':12s} {'worst step s':>12s} {'RSS +MB/session':>16s} {'disk +MB':>9s} {'host facts':>10s} {'HTTP 5xx':>8s} {'bystander p99 ms':>17s}"
        print(header)
        for name, r in results.items():
            print(
                f"{name:12s} {r.worst_step_s:12.2f} {r.rss_growth_mb:16.1f} {r.disk_growth_mb:9.1f} {r.host_facts:10d} "
                f"{r.http_5xx:8d} {r.bystander_p99_ms:17.1f}"
                + (f"  ({'; '.join(sorted(set(r.notes)))})" if r.notes else "")
            )
            print(json.dumps({"class": name, **{k: v for k, v in vars(r).items() if k != "notes"}}), file=sys.stderr)
        worst = {k: max(getattr(r, k) for r in results.values()) for k in TARGETS}
        facts = sum(r.host_facts for r in results.values())
        errors = sum(r.http_5xx for r in results.values())
        checks = [f"{k} {worst[k]:.1f} <= {t:g}: {'ok' if worst[k] <= t else 'FAIL'}" for k, t in TARGETS.items()]
        checks += [f"host facts {facts} == 0: {'ok' if facts == 0 else 'FAIL'}"]
        checks += [f"HTTP 5xx {errors} == 0: {'ok' if errors == 0 else 'FAIL'}"]
        checks += [
            f"servers never restarted: {'ok' if all(s.proc.poll() is None for s in servers.values()) else 'FAIL'}"
        ]
        ok = all(c.endswith("ok") for c in checks)
        print(f"verdict: {'PASS' if ok else 'FAIL'} ({'; '.join(checks)})")
    finally:
        for s in servers.values():
            s.stop()


if __name__ == "__main__":
    main()
