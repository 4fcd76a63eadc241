"""Planting an incident: each kind leaves a consistent trail of evidence across the machine.

An incident changes service state (systemd), the culprit's log and journal, nginx's access/error logs, configs,
kernel messages, disks, processes or listeners, the way the real failure would. The evidence is what a triager
reads; the kind and the culprit service are what the verifier checks.
"""

from __future__ import annotations

from collections.abc import Callable

from . import catalog as C
from .machine_state import Incident, Listener, Process
from .timefmt import iso_ms
from .vfs import LazyText
from .world_builder import AppState, Builder, Request, splitmix


def plant_incident(b: Builder, kind: str, a: AppState) -> None:
    PLANTERS[kind](b, a)
    b.incident = Incident(
        kind=kind,
        service=a.name,
        alert=_alert(b, kind, a),
        started=b.incident_t,
        details=dict(b.incident_details),
    )


def _alert(b: Builder, kind: str, a: AppState) -> str:
    r = b.rng
    if a.spec.role == "api":
        return f"[FIRING] {b.hostname}: HTTP 5xx ratio on nginx above 5% for 10m (current {r.uniform(8, 60):.1f}%)"
    return (
        f"[FIRING] {b.hostname}: queue '{a.spec.resource}' backlog {r.randrange(8_000, 90_000)} messages, "
        f"oldest {r.randrange(12, 90)}m (threshold 10m)"
    )


# -- shared effects ---------------------------------------------------------------------------------------
def _upstream(b: Builder, a: AppState) -> str:
    return f"{'https' if a.tls else 'http'}://127.0.0.1:{a.port}"


def _break_requests(b: Builder, a: AppState, after: float, status: int, error: str | None, share: float = 1.0) -> None:
    """Requests nginx routes to ``a`` after ``after`` fail with ``status`` (a ``share`` of them); nginx logs
    ``error`` for each failed one. A few extra requests make the symptom visible even on a quiet host."""
    r = b.rng
    for t in b.times(r.randrange(12, 25), after, b.now):
        m = r.choice(("GET", "GET", "POST"))
        path = f"/api/{a.spec.resource}" + ("" if m == "POST" else f"/{r.randrange(1000, 99999)}")
        b.requests.append(Request(t, b.client_ip(), m, path, 200, 0, r.choice(C.CLIENT_AGENTS[2:5]), a.name, 0.0))
    for q in b.requests:
        if q.app != a.name or q.ts < after or r.random() >= share:
            continue
        q.status, q.size = status, {502: 166, 503: 190, 504: 176, 500: 186}.get(status, 170)
        q.rt = 60.0 if status == 504 else r.uniform(0.0, 0.004)
        if error:
            worker = r.choice(b.nginx_pids[1:] or b.nginx_pids)
            b.nginx_errors.append(
                (
                    q.ts,
                    f"[error] {worker}#{worker}: *{r.randrange(10_000, 999_999)} {error}"
                    f', client: {q.client}, server: _, request: "{q.method} {q.path} '
                    f'HTTP/1.1", upstream: "{_upstream(b, a)}{q.path}", host: '
                    f'"{b.hostname}.{b.domain}"',
                )
            )


def _service_down(
    b: Builder, a: AppState, t: float, *, result: str, status: str, looping: bool, stderr: list[str]
) -> None:
    """The culprit's process is gone at ``t``: systemd records it, nginx gets connection refused."""
    svc = b.services[a.name]
    a.alive = False
    a.cut_log_after(t)
    for i, line in enumerate(stderr):
        b.jlog(t + 0.01 * i, a.name, a.pid, line, unit=a.name, prio=3)
    code = "killed" if result == "oom-kill" else "exited"
    b.jlog(
        t + 0.2,
        "systemd",
        1,
        f"{a.name}.service: Main process exited, code={code}, status={status}",
        unit=a.name,
        prio=4 if code == "exited" else 3,
    )
    b.jlog(t + 0.2, "systemd", 1, f"{a.name}.service: Failed with result '{result}'.", unit=a.name, prio=4)
    b.jlog(
        t + 0.2,
        "systemd",
        1,
        f"{a.name}.service: Consumed {int(a.cpu_s // 60)}min {a.cpu_s % 60:.3f}s CPU time.",
        unit=a.name,
    )
    svc.exit_status = f"(code={code}, status={status})"
    svc.result = result
    svc.memory_kb, svc.tasks = 0, 0
    svc.active, svc.sub, svc.since = "failed", "failed", int(t + 0.2)
    if looping:  # Restart=on-failure, RestartSec=10, StartLimitBurst=5 within 300 s: five retries, then give up
        last = t
        for i in range(1, 6):
            last = t + i * 10.3
            pid = b.pid((3, 60))
            b.jlog(
                last - 0.3,
                "systemd",
                1,
                f"{a.name}.service: Scheduled restart job, restart counter is at {i}.",
                unit=a.name,
            )
            b.jlog(last - 0.25, "systemd", 1, f"Stopped {a.spec.description}.", unit=a.name)
            b.jlog(last - 0.2, "systemd", 1, f"Started {a.spec.description}.", unit=a.name)
            b.jlog(last, a.name, pid, stderr[-1], unit=a.name, prio=3)
            b.jlog(
                last + 0.05,
                "systemd",
                1,
                f"{a.name}.service: Main process exited, code=exited, status={status}",
                unit=a.name,
                prio=4,
            )
            b.jlog(last + 0.05, "systemd", 1, f"{a.name}.service: Failed with result '{result}'.", unit=a.name, prio=4)
            svc.pid = pid
        svc.restarts = 5
        b.jlog(
            last + 10.3, "systemd", 1, f"{a.name}.service: Scheduled restart job, restart counter is at 6.", unit=a.name
        )
        b.jlog(last + 10.3, "systemd", 1, f"Stopped {a.spec.description}.", unit=a.name)
        b.jlog(last + 10.3, "systemd", 1, f"{a.name}.service: Start request repeated too quickly.", unit=a.name, prio=4)
        b.jlog(last + 10.3, "systemd", 1, f"{a.name}.service: Failed with result '{result}'.", unit=a.name, prio=4)
        b.jlog(last + 10.3, "systemd", 1, f"Failed to start {a.spec.description}.", unit=a.name, prio=3)
        svc.since = int(last + 10.3)
    else:
        svc.pid = a.pid
    if a.spec.role == "api":
        _break_requests(b, a, t, 502, "connect() failed (111: Connection refused) while connecting to upstream")


def _stderr_exc(a: AppState, kind: str, **kw: str) -> str:
    rt = a.spec.runtime
    texts = {
        "enospc": {
            "node": "Error: ENOSPC: no space left on device, write",
            "python": "OSError: [Errno 28] No space left on device",
            "java": "java.io.IOException: No space left on device",
            "go": f"write {kw.get('path', '')}: no space left on device",
        },
        "eaddrinuse": {
            "node": f"Error: listen EADDRINUSE: address already in use 127.0.0.1:{a.port}",
            "python": "OSError: [Errno 98] Address already in use",
            "java": f"Web server failed to start. Port {a.port} was already in use.",
            "go": f"listen tcp 127.0.0.1:{a.port}: bind: address already in use",
        },
        "dns": {
            "node": f"getaddrinfo EAI_AGAIN {kw.get('host')}",
            "python": f"socket.gaierror: [Errno -3] Temporary failure in name resolution ({kw.get('host')})",
            "java": f"java.net.UnknownHostException: {kw.get('host')}: Temporary failure in name resolution",
            "go": f"dial tcp: lookup {kw.get('host')} on {kw.get('ns')}:53: read udp {kw.get('ip')}:"
            f"{kw.get('sport')}->{kw.get('ns')}:53: i/o timeout",
        },
    }
    return texts[kind][rt]


# -- the kinds ----------------------------------------------------------------------------------------------
def disk_full(b: Builder, a: AppState) -> None:
    r = b.rng
    t = b.incident_t
    var = b.mount("/var")
    debug_log = f"/var/log/{a.name}/{a.name}-debug.log"
    a.config["logging"]["log_level"] = "debug"
    a.config["logging"]["debug_log"] = debug_log
    a.config_mtime = a.since - r.randrange(300, 3000)
    width = 118
    free_kb = var.size_kb - var.used_kb - var.reserved_kb
    count = max((free_kb * 1024 + var.used_kb * 1024 // 2) // (width + 1), 1_000_000)
    var.used_kb = var.size_kb - var.reserved_kb  # 100%: what root may still write is the reserve
    start_ms = int(a.since * 1000)
    span_ms = int((t - a.since) * 1000)
    seed = b.seed * 7919 + 17
    keys = ("user", "cart", "sku", "sess", "rate", "tok")

    stamp = [-1, ""]  # (second, formatted second): many consecutive lines share a second

    def line(i: int) -> str:
        h = splitmix(seed + i)
        ts = start_ms + span_ms * i // count
        sec = ts // 1000
        if stamp[0] != sec:
            stamp[0], stamp[1] = sec, iso_ms(sec * 1000)[:-5]
        s = (
            f"{stamp[1]}.{ts % 1000:03d}Z DEBUG [worker-{h % 8}] cache lookup "
            f"key={keys[(h >> 3) % 6]}:{(h >> 8) % 10**8:08d} "
            f"hit={'true ' if (h >> 40) % 3 else 'false'} shard={(h >> 44) % 64:02d} took={(h >> 50) % 10000:04d}us"
        )
        return s.ljust(width)[:width]

    b.lazy_files[debug_log] = LazyText(count=count, width=width, line=line)
    b.incident_details = {"file": debug_log, "mount": "/var"}
    for i in range(r.randrange(2, 5)):
        a.log(t - 40 + 9 * i, "ERROR", f"failed to write to {debug_log}: no space left on device")
    _service_down(
        b,
        a,
        t,
        result="exit-code",
        status="1/FAILURE",
        looping=False,
        stderr=[_stderr_exc(a, "enospc", path=debug_log), "fatal: cannot write log output, exiting"],
    )
    b.jlog(
        t + 30,
        "rsyslogd",
        b.services["rsyslog"].pid,
        "file '/var/log/syslog': write error - see "
        "https://www.rsyslog.com/solving-rsyslog-write-errors/ for "
        "help OS error: No space left on device [v8.2112.0]",
        unit="rsyslog",
        prio=3,
    )


def oom_killed(b: Builder, a: AppState) -> None:
    r = b.rng
    t = b.incident_t
    limit_mb = b.mem_total_kb // 1024
    rss_mb = a.rss_kb // 1024
    for i, tt in enumerate(b.times(r.randrange(5, 9), t - 40 * 60, t - 20)):
        rss_mb = int(rss_mb + (limit_mb * 0.95 - rss_mb) * (i + 1) / 9)
        a.log(tt, "WARN", f"memory usage high: rss={rss_mb}MB ({rss_mb * 100 // limit_mb}% of host memory)")
    uptime = t - b.boot
    anon = int(b.mem_total_kb * r.uniform(0.86, 0.93))
    uid = 990 + b.apps.index(a)
    kmsgs = [
        f"{a.comm} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
        f"CPU: {r.randrange(b.ncpu)} PID: {a.pid} Comm: {a.comm} Not tainted {b.kernel} #1-Ubuntu",
        "Mem-Info:",
        f"active_anon:{anon // 4} inactive_anon:{r.randrange(1000, 9000)} isolated_anon:0 active_file:"
        f"{r.randrange(100, 900)} inactive_file:{r.randrange(100, 900)} free:{r.randrange(20000, 30000)}",
        f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
        f"task_memcg=/system.slice/{a.name}.service,task={a.comm},pid={a.pid},uid={uid}",
        f"Out of memory: Killed process {a.pid} ({a.comm}) total-vm:{a.vsz_kb + anon}kB, anon-rss:{anon}kB, "
        f"file-rss:{r.randrange(1000, 9000)}kB, shmem-rss:0kB, UID:{uid} pgtables:{anon // 500}kB oom_score_adj:0",
        f"oom_reaper: reaped process {a.pid} ({a.comm}), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    ]
    for i, m in enumerate(kmsgs):
        b.jlog(t + 0.001 * i, "kernel", None, m, prio=3 if "Killed" in m else 4)
    b.jlog(
        t + 0.1,
        "systemd",
        1,
        f"{a.name}.service: A process of this unit has been killed by the OOM killer.",
        unit=a.name,
        prio=4,
    )
    b.incident_details = {"uptime_at_kill": f"{uptime:.0f}"}
    _service_down(b, a, t, result="oom-kill", status="9/KILL", looping=False, stderr=[])


BAD_VALUES: tuple[tuple[str, str, str, str], ...] = (
    ("server", "listen_port", "{p}0", "listen_port={v} out of range (1-65535)"),
    ("server", "workers", "-4", "workers must be a positive integer, got -4"),
    ("database", "db_timeout_ms", "5s", "db_timeout_ms: invalid integer '5s'"),
    ("logging", "log_level", "verbose", "log_level: unknown level 'verbose' (expected debug, info, warn, error)"),
    ("database", "db_pool_size", "0", "db_pool_size must be >= 1, got 0"),
    ("database", "db_port", "54321a", "db_port: invalid port '54321a'"),
)


def bad_config(b: Builder, a: AppState) -> None:
    r = b.rng
    t = b.incident_t
    section, key, value, why = r.choice(BAD_VALUES)
    value = value.format(p=a.port)
    good = a.config[section][key]
    a.config[section][key] = value
    eng = b.engineers[1]
    edit_t = t - r.randrange(60, 600)
    a.config_mtime = int(edit_t + r.randrange(20, 50))
    b.extra_files[a.config_path + ".orig"] = {"section": section, "key": key, "value": good}
    sudo_pid = r.randrange(20_000, 60_000)
    b.auth += [
        (
            edit_t,
            "sudo",
            None,
            f"{eng} : TTY=pts/1 ; PWD=/home/{eng} ; USER=root ; COMMAND=/usr/bin/vim {a.config_path}",
        ),
        (edit_t, "sudo", sudo_pid, f"pam_unix(sudo:session): session opened for user root(uid=0) by {eng}(uid=1001)"),
        (
            t - 2,
            "sudo",
            None,
            f"{eng} : TTY=pts/1 ; PWD=/home/{eng} ; USER=root ; COMMAND=/usr/bin/systemctl restart {a.name}",
        ),
    ]
    b.history[eng] = [
        f"cd /etc/{a.name}",
        f"sudo cp {a.config_path} {a.config_path}.orig",
        f"sudo vim {a.config_path}",
        f"sudo systemctl restart {a.name}",
        f"systemctl status {a.name}",
        "exit",
    ]
    b.jlog(t - 1.5, "systemd", 1, f"Stopping {a.spec.description}...", unit=a.name)
    b.jlog(t - 0.5, "systemd", 1, f"{a.name}.service: Deactivated successfully.", unit=a.name)
    b.jlog(t - 0.5, "systemd", 1, f"Stopped {a.spec.description}.", unit=a.name)
    b.jlog(t - 0.4, "systemd", 1, f"Started {a.spec.description}.", unit=a.name)
    a.cut_log_after(t - 2)
    a.log(t - 1.5, "INFO", "received SIGTERM, shutting down gracefully")
    a.pid = b.pid((20, 200))
    a.log(t - 0.2, "INFO", f"starting {a.name} v{a.version} (pid {a.pid})")
    fatal = f"FATAL invalid configuration {a.config_path}: {why.format(v=value)}"
    a.log(t - 0.1, "FATAL", fatal[6:])
    b.incident_details = {"key": key, "value": value, "good": good}
    _service_down(b, a, t, result="exit-code", status="78/CONFIG", looping=True, stderr=[fatal])


def cert_expired(b: Builder, a: AppState) -> None:
    r = b.rng
    t = b.incident_t
    had_tls = a.tls
    b._enable_tls(a, not_after=t)
    crt = a.config["tls"]["cert_file"]
    if not had_tls:
        a.log(a.since + 1.6, "INFO", f"loaded TLS certificate {crt}")
        a.events = [
            (ts, lvl, m.replace("listening on http://", "listening on https://"), x, pid)
            for ts, lvl, m, x, pid in a.events
        ]
    for days in (3, 2, 1):
        if t - days * 3600 > b.window:
            a.log(
                t - days * 3600,
                "WARN",
                f"TLS certificate {crt} expires in {days}h (notAfter {iso_ms(int(t * 1000))[:19]}Z)",
            )
    for tt in b.times(r.randrange(14, 26), t, b.now):
        a.log(
            tt,
            "ERROR",
            f"TLS handshake failed with client {b.client_ip()}:{r.randrange(30000, 65000)}: "
            f"remote error: tls: expired certificate",
        )
    if a.spec.role == "api":
        _break_requests(
            b,
            a,
            t,
            502,
            "SSL_do_handshake() failed (SSL: error:0A000086:SSL routines::certificate "
            "verify failed) while SSL handshaking to upstream",
        )
    b.incident_details = {"cert": crt}


def db_pool_exhausted(b: Builder, a: AppState) -> None:
    r = b.rng
    t = b.incident_t
    mx = a.pool_max
    tout = a.config["database"]["db_timeout_ms"]
    a.events = [e for e in a.events if not (e[2].startswith("db pool stats") and e[0] >= (t - 1800) * 1000)]
    tt: float = t - 1800
    step = 0
    while tt < b.now:
        active = min(mx, max(2, int(mx * (0.4 + 0.2 * step)))) if tt < t else mx
        waiting = 0 if active < mx else (r.randrange(5, 30) if tt < t else r.randrange(40, 400))
        a.log(
            tt,
            "WARN" if active == mx else "INFO",
            f"db pool stats: active={active} idle={mx - active} max={mx} waiting={waiting}",
        )
        tt += 300
        step += 1
    for tt in b.times(r.randrange(3, 6), t - 1500, t):
        a.log(
            tt,
            "WARN",
            f"connection held for {r.randrange(300, 1500)}s by request {r.getrandbits(32):08x} (possible leak)",
        )
    for tt in b.times(r.randrange(18, 32), t, b.now):
        a.log(
            tt,
            "ERROR",
            f"timeout acquiring connection from pool after {tout}ms (active={mx}, idle=0, "
            f"waiting={r.randrange(40, 400)})",
        )
    if a.spec.role == "api":
        _break_requests(
            b,
            a,
            t,
            504,
            "upstream timed out (110: Connection timed out) while reading response header from upstream",
            share=0.85,
        )
    b.incident_details = {"pool_size": str(mx)}


def dns_misconfig(b: Builder, a: AppState) -> None:
    r = b.rng
    t = b.incident_t
    a.config["database"]["db_host"] = b.db_host
    bad_ns = r.choice((f"{b.subnet}.0.253", "192.168.1.1", f"{b.subnet}.200.2", "10.255.255.1"))
    b.resolv_ns = bad_ns
    b.resolv_mtime = int(t - r.randrange(30, 200))
    eng = b.engineers[2]
    b.auth.append(
        (
            b.resolv_mtime - 15,
            "sudo",
            None,
            f"{eng} : TTY=pts/2 ; PWD=/home/{eng} ; USER=root ; COMMAND=/usr/bin/vim /etc/resolv.conf",
        )
    )
    b.history[eng] = ["cat /etc/resolv.conf", "sudo vim /etc/resolv.conf", "dig +short google.com", "exit"]
    for tt in b.times(r.randrange(16, 30), t, b.now):
        err = _stderr_exc(a, "dns", host=b.db_host, ns=bad_ns, ip=b.ip, sport=str(r.randrange(30000, 65000)))
        a.log(tt, "ERROR", f"database connection failed: {err}")
    if a.spec.role == "api":
        _break_requests(b, a, t, 503, None, share=0.9)
    b.incident_details = {"nameserver": bad_ns, "good": b.resolver}


def port_conflict(b: Builder, a: AppState) -> None:
    r = b.rng
    t = b.incident_t
    eng = b.engineers[1]
    start = t - r.randrange(300, 3000)
    pid = b.pid((100, 900))
    if r.random() < 0.5:
        cmd, comm = f"python3 -m http.server {a.port} --bind 127.0.0.1", "python3"
    else:
        cmd, comm = f"node /home/{eng}/debug-proxy.js --port {a.port}", "node"
    b.extra_procs.append(
        Process(
            eng,
            pid,
            1,
            0.0,
            r.randrange(9_000, 40_000),
            r.randrange(30_000, 900_000),
            "?",
            "S",
            int(start),
            r.uniform(0, 3),
            cmd,
            comm,
        )
    )
    b.extra_listeners.append(Listener("tcp", "127.0.0.1", a.port, pid, comm, 3))
    b.history[eng] = [f"cd /home/{eng}", f"nohup {cmd} > /dev/null 2>&1 &", "exit"]
    b.auth.append(
        (
            t - 3,
            "sudo",
            None,
            f"{b.engineers[0]} : TTY=pts/1 ; PWD=/srv/deploy ; USER=root ; COMMAND=/usr/bin/systemctl restart {a.name}",
        )
    )
    b.jlog(t - 1.5, "systemd", 1, f"Stopping {a.spec.description}...", unit=a.name)
    b.jlog(t - 0.5, "systemd", 1, f"Stopped {a.spec.description}.", unit=a.name)
    b.jlog(t - 0.4, "systemd", 1, f"Started {a.spec.description}.", unit=a.name)
    a.cut_log_after(t - 2)
    a.log(t - 1.5, "INFO", "received SIGTERM, shutting down gracefully")
    a.pid = b.pid((20, 200))
    a.log(t - 0.2, "INFO", f"starting {a.name} v{a.version} (pid {a.pid})")
    err = _stderr_exc(a, "eaddrinuse")
    a.log(t - 0.1, "FATAL", err)
    b.incident_details = {"holder_pid": str(pid), "holder": cmd}
    _service_down(b, a, t, result="exit-code", status="1/FAILURE", looping=True, stderr=[err])


PLANTERS: dict[str, Callable[[Builder, AppState], None]] = {
    "disk_full": disk_full,
    "oom_killed": oom_killed,
    "bad_config": bad_config,
    "cert_expired": cert_expired,
    "db_pool_exhausted": db_pool_exhausted,
    "dns_misconfig": dns_misconfig,
    "port_conflict": port_conflict,
}
