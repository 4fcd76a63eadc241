"""The world builder: a healthy Linux host as structured state (apps, services, processes, disks, log events).

``machine.generate_machine(seed)`` drives it. Every choice is drawn from one ``random.Random(seed)`` and
timestamps come from a seeded virtual clock, so the same seed gives byte-identical worlds on every host and
different seeds give different hostnames, services, ports, pids, timestamps, file contents and incidents. The
builder lays down a healthy machine as structured events (application log events, journal entries, nginx
requests); ``incidents`` then plants the incident into them and ``world_files`` writes the files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from . import catalog as C
from .machine_state import Cert, Incident, JournalEntry, Listener, Mount, Process, Service
from .vfs import LazyText

INCIDENT_KINDS: tuple[str, ...] = (
    "disk_full",
    "oom_killed",
    "bad_config",
    "cert_expired",
    "db_pool_exhausted",
    "dns_misconfig",
    "port_conflict",
)
"""The root-cause categories an incident can have (the ``<kind>`` of ``submit <kind> <service>``)."""

EPOCH_2024 = 1_704_067_200
WINDOW_S = 6 * 3600  # how far back the live logs go


@dataclass
class AppState:
    """An application service while the world is being built."""

    spec: C.AppSpec
    port: int
    pid: int
    since: int
    version: str
    config: dict[str, dict[str, str]]
    config_path: str
    config_fmt: str
    config_mtime: int
    log_path: str
    pool_max: int
    rss_kb: int
    vsz_kb: int
    cpu_s: float
    tls: bool = False
    alive: bool = True
    events: list[tuple[int, str, str, dict[str, Any] | None, int]] = field(
        default_factory=list
    )  # ts_ms, level, msg, extra, pid

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def comm(self) -> str:
        return C.RUNTIME_EXEC[self.spec.runtime][0].format(name=self.name)[:15]

    def log(self, ts: float, level: str, msg: str, extra: dict[str, Any] | None = None) -> None:
        self.events.append((int(ts * 1000), level, msg, extra, self.pid))

    def cut_log_after(self, ts: float) -> None:
        self.events = [e for e in self.events if e[0] <= ts * 1000]


@dataclass
class Request:
    ts: float
    client: str
    method: str
    path: str
    status: int
    size: int
    agent: str
    app: str | None
    rt: float


class Builder:
    """Builds a healthy machine, lets an incident modify it, then renders it."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        r = self.rng
        self.now = EPOCH_2024 + r.randrange(0, 640) * 86400 + r.randrange(3 * 3600, 86400)
        self.boot = self.now - r.randrange(2, 75) * 86400 - r.randrange(86400)
        self.window = self.now - WINDOW_S
        self.incident_t = self.now - r.randrange(14 * 60, 95 * 60)
        env = r.choice(C.HOST_PREFIXES)
        self.hostname = f"{env}-{r.choice(C.HOST_ROLES)}-{r.randrange(1, 40):02d}"
        self.domain = r.choice(C.DOMAINS)
        subnet = r.randrange(0, 16)
        self.subnet = f"10.{r.randrange(0, 40)}"
        self.ip = f"{self.subnet}.{subnet}.{r.randrange(10, 250)}"
        self.resolver = f"{self.subnet}.0.2"
        self.db_ip = f"{self.subnet}.{r.randrange(16, 32)}.{r.randrange(10, 250)}"
        self.db_host = f"{r.choice(C.DB_HOST_NAMES)}.{self.domain}"
        self.ops_user = r.choice(C.OPS_USERS)
        self.engineers = r.sample(C.ENGINEERS, 3)
        self.ncpu = r.choice((2, 4, 4, 8))
        self.mem_total_kb = r.choice((8, 16, 16, 32)) * 1024 * 1024 - r.randrange(200_000, 400_000)
        self.kernel = f"5.15.0-{r.randrange(80, 120)}-generic"
        self.journal: list[JournalEntry] = []
        self.requests: list[Request] = []
        self.nginx_errors: list[tuple[float, str]] = []
        self.auth: list[tuple[float, str, int | None, str]] = []  # (ts, ident, pid, msg)
        self.extra_files: dict[str, dict[str, str]] = {}
        self.extra_procs: list[Process] = []
        self.extra_listeners: list[Listener] = []
        self.history: dict[str, list[str]] = {}
        self.certs: dict[str, Cert] = {}
        self.next_pid = r.randrange(300, 420)
        self.services: dict[str, Service] = {}
        self.mounts: list[Mount] = []
        self.apps: list[AppState] = []
        self.nginx_pids: list[int] = []
        self.lazy_files: dict[str, LazyText] = {}
        self.incident: Incident | None = None
        self.incident_details: dict[str, str] = {}  # what the planted incident changed (``Incident.details``)
        self.resolv_ns = self.resolver
        self.resolv_mtime = self.boot
        self.has_redis = r.random() < 0.6

    # -- small helpers ---------------------------------------------------------------------------------
    def pid(self, gap: tuple[int, int] = (1, 40)) -> int:
        self.next_pid += self.rng.randrange(*gap)
        return self.next_pid

    def client_ip(self) -> str:
        return f"{self.subnet}.{self.rng.randrange(0, 8)}.{self.rng.randrange(2, 250)}"

    def times(self, n: int, start: float, end: float) -> list[float]:
        return sorted(self.rng.uniform(start, end) for _ in range(n))

    def jlog(self, ts: float, ident: str, pid: int | None, msg: str, unit: str | None = None, prio: int = 6) -> None:
        self.journal.append(JournalEntry(ts=ts, ident=ident, pid=pid, message=msg, unit=unit, priority=prio))

    def app(self, name: str) -> AppState:
        return next(a for a in self.apps if a.name == name)

    # -- the healthy machine ---------------------------------------------------------------------------
    def build_base(self) -> None:
        r = self.rng
        specs = list(C.APPS)
        apis = [s for s in specs if s.role == "api"]
        chosen = r.sample(apis, 2) + r.sample([s for s in specs if s not in apis] + apis, r.randrange(1, 3))
        seen: list[C.AppSpec] = []
        for s in chosen:
            if s not in seen:
                seen.append(s)
        self._system_services()
        base_port = r.choice((3000, 5000, 8000, 8080, 9000))
        ports = r.sample(range(base_port, base_port + 40), len(seen))
        for spec, port in zip(seen, ports, strict=True):
            self._add_app(spec, port)
        self._nginx()
        self._cron_and_sessions()
        self._mounts()

    def _system_services(self) -> None:
        r = self.rng
        boot = self.boot
        sysd = [
            ("systemd-journald", "Journal Service", "/lib/systemd/systemd-journald", "root", 48_000),
            (
                "systemd-udevd",
                "Rule-based Manager for Device Events and Files",
                "/lib/systemd/systemd-udevd",
                "root",
                6_200,
            ),
            ("systemd-networkd", "Network Configuration", "/lib/systemd/systemd-networkd", "systemd-network", 7_900),
            ("systemd-resolved", "Network Name Resolution", "/lib/systemd/systemd-resolved", "systemd-resolve", 12_400),
            ("cron", "Regular background program processing daemon", "/usr/sbin/cron -f -P", "root", 2_700),
            (
                "dbus",
                "D-Bus System Message Bus",
                "@dbus-daemon /usr/bin/dbus-daemon --system --address=systemd: --nofork --nopidfile "
                "--systemd-activation --syslog-only",
                "messagebus",
                4_800,
            ),
            ("rsyslog", "System Logging Service", "/usr/sbin/rsyslogd -n -iNONE", "syslog", 5_900),
            (
                "ssh",
                "OpenBSD Secure Shell server",
                "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups",
                "root",
                7_600,
            ),
        ]
        if self.has_redis:
            sysd.append(
                (
                    "redis-server",
                    "Advanced key-value store",
                    "/usr/bin/redis-server 127.0.0.1:6379",
                    "redis",
                    r.randrange(9_000, 80_000),
                )
            )
        for name, desc, cmd, user, rss in sysd:
            pid = self.pid()
            comm = {"ssh": "sshd", "dbus": "dbus-daemon", "rsyslog": "rsyslogd", "redis-server": "redis-server"}.get(
                name, name.split("/")[-1][:15]
            )
            exec_start = "/usr/sbin/sshd -D $SSHD_OPTS" if name == "ssh" else cmd.lstrip("@")
            self.services[name] = Service(
                name=name,
                description=desc,
                exec_start=exec_start,
                since=boot + r.randrange(2, 9),
                pid=pid,
                comm=comm,
                memory_kb=rss + r.randrange(0, 3000),
                cpu_s=r.uniform(5, 900),
                tasks=r.randrange(1, 5),
                unit_path=f"/lib/systemd/system/{name}.service",
            )
            self.extra_procs.append(
                Process(
                    user,
                    pid,
                    1,
                    round(r.uniform(0, 0.3), 1),
                    rss,
                    rss * 3 + 9000,
                    "?",
                    "Ss",
                    boot + 3,
                    r.uniform(1, 300),
                    cmd.lstrip("@"),
                    comm,
                )
            )
        for name, desc in (
            ("systemd-tmpfiles-setup", "Create Volatile Files and Directories"),
            ("systemd-sysctl", "Apply Kernel Variables"),
            ("ufw", "Uncomplicated firewall"),
        ):
            self.services[name] = Service(
                name=name,
                description=desc,
                exec_start=f"/lib/systemd/{name}",
                active="active",
                sub="exited",
                since=boot + 2,
                oneshot=True,
                unit_path=f"/lib/systemd/system/{name}.service",
            )
        self.extra_listeners += [
            Listener("tcp", "0.0.0.0", 22, self.services["ssh"].pid or 0, "sshd", 3),
            Listener("tcp", "127.0.0.53%lo", 53, self.services["systemd-resolved"].pid or 0, "systemd-resolve", 14),
            Listener("udp", "127.0.0.53%lo", 53, self.services["systemd-resolved"].pid or 0, "systemd-resolve", 13),
        ]
        if self.has_redis:
            self.extra_listeners.append(
                Listener("tcp", "127.0.0.1", 6379, self.services["redis-server"].pid or 0, "redis-server", 6)
            )
        # boot messages (journal and dmesg)
        for off, msg in (
            (
                0.0,
                f"Linux version {self.kernel} (buildd@lcy02-amd64-0{r.randrange(10, 99)}) (gcc (Ubuntu "
                f"11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #{r.randrange(80, 130)}"
                f"-Ubuntu SMP",
            ),
            (
                0.0,
                f"Command line: BOOT_IMAGE=/boot/vmlinuz-{self.kernel} root=PARTUUID="
                f"{r.randrange(16**8):08x}-01 ro console=tty1 console=ttyS0 nvme_core.io_timeout=4294967295",
            ),
            (0.4, f"Memory: {self.mem_total_kb - 180_000}K/{self.mem_total_kb + 60_000}K available"),
            (1.2, "EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Quota mode: none."),
            (2.3, "EXT4-fs (nvme1n1): mounted filesystem with ordered data mode. Quota mode: none."),
            (3.1, "ena 0000:00:05.0 ens5: renamed from eth0"),
        ):
            self.jlog(boot + off, "kernel", None, msg)
        for name, svc in self.services.items():
            self.jlog(svc.since, "systemd", 1, f"Started {svc.description}.", unit=name)

    def _add_app(self, spec: C.AppSpec, port: int) -> None:
        r = self.rng
        recent_deploy = r.random() < 0.55
        since = self.now - r.randrange(WINDOW_S + 600, 5 * 86400) if recent_deploy else self.boot + r.randrange(15, 40)
        since = max(since, self.boot + 15)
        pid = self.pid((40, 4000)) if recent_deploy else self.pid()
        version = f"{r.randrange(1, 5)}.{r.randrange(0, 30)}.{r.randrange(0, 12)}"
        pool = r.choice((10, 16, 20, 25, 32))
        fmt = "yaml" if spec.runtime == "go" else "ini"
        cfg_path = f"/etc/{spec.name}/config.yaml" if fmt == "yaml" else f"/etc/{spec.name}/{spec.name}.conf"
        config = {
            "server": {
                "listen_port": str(port),
                "bind_address": "127.0.0.1" if spec.role == "api" else "0.0.0.0",
                "workers": str(r.choice((2, 4, 4, 8))),
                "request_timeout_ms": str(r.choice((15000, 30000))),
            },
            "logging": {"log_level": "info", "log_file": f"/var/log/{spec.name}/{spec.name}.log"},
            "database": {
                "db_host": self.db_ip,
                "db_port": "5432",
                "db_name": spec.db_name,
                "db_user": spec.user,
                "db_pool_size": str(pool),
                "db_timeout_ms": str(r.choice((3000, 5000, 10000))),
            },
        }
        if self.has_redis and r.random() < 0.6:
            config["cache"] = {"redis_url": "redis://127.0.0.1:6379/0", "ttl_s": str(r.choice((60, 300, 900)))}
        runtime_rss = {
            "node": (140_000, 420_000),
            "python": (90_000, 300_000),
            "java": (500_000, 1_400_000),
            "go": (40_000, 160_000),
        }[spec.runtime]
        a = AppState(
            spec=spec,
            port=port,
            pid=pid,
            since=since,
            version=version,
            config=config,
            config_path=cfg_path,
            config_fmt=fmt,
            config_mtime=since - r.randrange(60, 86400),
            log_path=f"/var/log/{spec.name}/{spec.name}.log",
            pool_max=pool,
            rss_kb=r.randrange(*runtime_rss),
            vsz_kb=C.RUNTIME_VSZ_KB[spec.runtime] + r.randrange(0, 90000),
            cpu_s=r.uniform(30, 4000),
            tls=r.random() < 0.3,
        )
        if a.tls:
            self._enable_tls(a, not_after=self.now + r.randrange(20, 300) * 86400)
        self.apps.append(a)
        self._startup_lines(a, since)
        self._normal_traffic(a)
        self.services[spec.name] = Service(
            name=spec.name,
            description=spec.description,
            exec_start=self.exec_start(a),
            since=since,
            pid=pid,
            comm=a.comm,
            memory_kb=a.rss_kb,
            cpu_s=a.cpu_s,
            tasks=r.randrange(6, 40),
            app=True,
            port=port,
            unit_path=f"/etc/systemd/system/{spec.name}.service",
        )
        self.jlog(since, "systemd", 1, f"Started {spec.description}.", unit=spec.name)

    def _enable_tls(self, a: AppState, not_after: int) -> None:
        a.tls = True
        crt = f"/etc/{a.name}/tls/{a.name}.crt"
        a.config["tls"] = {"cert_file": crt, "key_file": f"/etc/{a.name}/tls/{a.name}.key", "min_version": "1.2"}
        days = self.rng.choice((90, 365))
        self.certs[crt] = {
            "subject": f"CN = {a.name}.{self.domain}",
            "issuer": f"C = US, O = Example Corp, CN = Example Internal CA R{self.rng.randrange(2, 6)}",
            "not_before": not_after - days * 86400,
            "not_after": not_after,
            "serial": f"{self.rng.getrandbits(64):016X}",
        }

    def exec_start(self, a: AppState) -> str:
        tmpl = C.RUNTIME_EXEC[a.spec.runtime][1]
        return tmpl.format(name=a.name, module=C.module_name(a.spec), xmx=self.rng.choice((512, 1024, 2048)))

    def _startup_lines(self, a: AppState, ts: float) -> None:
        r = self.rng
        a.log(
            ts + 0.05,
            "INFO",
            f"starting {a.name} v{a.version} (pid {a.pid})",
            {"thread": "main"} if a.spec.runtime == "java" else None,
        )
        a.log(ts + 0.09, "INFO", f"loaded configuration from {a.config_path}")
        db = a.config["database"]
        a.log(
            ts + r.uniform(0.3, 1.5),
            "INFO",
            f"connected to postgres {db['db_host']}:{db['db_port']}/{db['db_name']} (pool size {db['db_pool_size']})",
        )
        if a.tls:
            a.log(ts + 1.6, "INFO", f"loaded TLS certificate {a.config['tls']['cert_file']}")
        where = a.config["server"]["bind_address"]
        a.log(ts + r.uniform(1.6, 2.5), "INFO", f"listening on {'https' if a.tls else 'http'}://{where}:{a.port}")

    def _normal_traffic(self, a: AppState) -> None:
        r = self.rng
        res = a.spec.resource
        start = max(self.window, a.since + 5)
        for t in self.times(r.randrange(26, 48), start, self.now):
            x = r.random()
            if a.spec.role == "api":
                if x < 0.55:
                    m = r.choice(("GET", "GET", "GET", "POST", "PUT"))
                    code = {"GET": 200, "POST": 201, "PUT": 200}[m]
                    path = f"/api/{res}" + ("" if m == "POST" else f"/{r.randrange(1000, 99999)}")
                    a.log(
                        t,
                        "INFO",
                        f"{m} {path} {code} {r.randrange(3, 180)}ms",
                        {"thread": f"http-nio-{a.port}-exec-{r.randrange(1, 10)}"},
                    )
                elif x < 0.7:
                    msg = f"slow request: GET /api/{res}/{r.randrange(1000, 99999)} took {r.randrange(1200, 4800)}ms"
                    a.log(t, "WARN", msg, {"thread": f"http-nio-{a.port}-exec-{r.randrange(1, 10)}"})
                elif x < 0.8:
                    a.log(t, "INFO", f"GET /api/{res}/{r.randrange(1000, 99999)} 404 {r.randrange(2, 20)}ms")
                else:
                    a.log(t, "INFO", f"cache hit ratio {r.randrange(70, 99)}% over last 60s")
            else:
                if x < 0.6:
                    a.log(t, "INFO", f"processed {res} job {r.randrange(10**6, 10**7)} in {r.randrange(20, 900)}ms")
                elif x < 0.75:
                    a.log(
                        t,
                        "WARN",
                        f"job {r.randrange(10**6, 10**7)} failed (attempt 1/5): upstream returned 503; retrying in 30s",
                    )
                else:
                    a.log(t, "INFO", f"queue {res}: depth={r.randrange(0, 40)} lag={r.randrange(0, 6)}s")
        # periodic pool statistics every 10 minutes
        t = start - (start % 600) + 600
        while t < self.now:
            active = r.randrange(1, max(2, a.pool_max // 3))
            a.log(t, "INFO", f"db pool stats: active={active} idle={a.pool_max - active} max={a.pool_max} waiting=0")
            t += 600
        if a.spec.role == "api":
            for t in self.times(r.randrange(90, 160), self.window, self.now):
                m = r.choice(("GET", "GET", "GET", "POST"))
                path = f"/api/{res}" + ("" if m == "POST" else f"/{r.randrange(1000, 99999)}")
                status = 200 if m == "GET" else 201
                if r.random() < 0.04:
                    status = 404
                self.requests.append(
                    Request(
                        t,
                        self.client_ip(),
                        m,
                        path,
                        status,
                        r.randrange(90, 4200),
                        r.choice(C.CLIENT_AGENTS),
                        a.name,
                        r.uniform(0.003, 0.2),
                    )
                )

    def _nginx(self) -> None:
        r = self.rng
        since = self.boot + r.randrange(10, 20)
        master = self.pid()
        workers = [self.pid((1, 3)) for _ in range(min(self.ncpu, 4))]
        self.nginx_pids = [master, *workers]
        self.services["nginx"] = Service(
            name="nginx",
            description="A high performance web server and a reverse proxy server",
            exec_start="/usr/sbin/nginx -g daemon on; master_process on;",
            since=since,
            pid=master,
            comm="nginx",
            memory_kb=r.randrange(9_000, 30_000),
            cpu_s=r.uniform(60, 2000),
            tasks=1 + len(workers),
            unit_path="/lib/systemd/system/nginx.service",
        )
        self.jlog(
            since, "systemd", 1, "Started A high performance web server and a reverse proxy server.", unit="nginx"
        )
        self.extra_procs.append(
            Process(
                "root",
                master,
                1,
                0.0,
                2_300,
                55_300,
                "?",
                "Ss",
                since,
                0.0,
                "nginx: master process /usr/sbin/nginx -g daemon on; master_process on;",
                "nginx",
            )
        )
        for w in workers:
            self.extra_procs.append(
                Process(
                    "www-data",
                    w,
                    master,
                    round(r.uniform(0, 1.5), 1),
                    r.randrange(5_000, 14_000),
                    56_900,
                    "?",
                    "S",
                    since,
                    r.uniform(10, 400),
                    "nginx: worker process",
                    "nginx",
                )
            )
        for port, fd in ((80, 6), (443, 7)):
            self.extra_listeners.append(Listener("tcp", "0.0.0.0", port, master, "nginx", fd))
        for t in self.times(r.randrange(60, 110), self.window, self.now):
            path = r.choice(
                (
                    "/",
                    "/favicon.ico",
                    "/static/app.js",
                    "/static/app.css",
                    "/robots.txt",
                    "/healthz",
                    "/static/logo.svg",
                    "/.env",
                    "/wp-login.php",
                )
            )
            status = 404 if path in ("/.env", "/wp-login.php", "/favicon.ico") else (304 if r.random() < 0.2 else 200)
            self.requests.append(
                Request(
                    t,
                    self.client_ip()
                    if path != "/.env"
                    else f"{r.randrange(30, 220)}.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}",
                    "GET",
                    path,
                    status,
                    r.randrange(150, 40000) if status == 200 else 162,
                    r.choice(C.CLIENT_AGENTS),
                    None,
                    r.uniform(0.0, 0.01),
                )
            )

    def _cron_and_sessions(self) -> None:
        r = self.rng
        for user, cmd, offset, period in C.CRON_JOBS:
            t: float = self.window - (self.window % period) + offset
            while t < self.now:
                if t >= self.window:
                    pid = r.randrange(20_000, 60_000)
                    self.jlog(t, "CRON", pid, f"({user}) CMD ({cmd})", unit="cron")
                    self.auth.append(
                        (t, "CRON", pid, "pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)")
                    )
                    self.auth.append((t + 1, "CRON", pid, "pam_unix(cron:session): session closed for user root"))
                t += period
        for t in self.times(2, self.window, self.now - 3600):
            self.jlog(t, "systemd", 1, "Starting Cleanup of Temporary Directories...")
            self.jlog(t + 0.4, "systemd", 1, "systemd-tmpfiles-clean.service: Deactivated successfully.")
        # the on-call engineer's current session (this shell)
        login = self.now - r.randrange(90, 400)
        ssh_pid = r.randrange(60_000, 90_000)
        self.login_ip = f"{self.subnet}.{r.randrange(100, 120)}.{r.randrange(2, 250)}"
        key = "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(43))
        self.auth += [
            (
                login,
                "sshd",
                ssh_pid,
                f"Accepted publickey for {self.ops_user} from {self.login_ip} port "
                f"{r.randrange(40000, 65000)} ssh2: ED25519 SHA256:{key}",
            ),
            (
                login,
                "sshd",
                ssh_pid,
                f"pam_unix(sshd:session): session opened for user {self.ops_user}(uid=1000) by (uid=0)",
            ),
            (
                login + 1,
                "systemd-logind",
                self.services["systemd-journald"].pid or 400,
                f"New session {r.randrange(100, 900)} of user {self.ops_user}.",
            ),
            (
                login + r.randrange(5, 40),
                "sudo",
                None,
                f"{self.ops_user} : TTY=pts/0 ; PWD=/home/{self.ops_user} ; USER=root ; COMMAND=/bin/bash",
            ),
        ]
        self.login_t = login
        self.ssh_pid = ssh_pid
        self.shell_pid = ssh_pid + r.randrange(20, 80)
        self.extra_procs += [
            Process(
                "root",
                ssh_pid,
                self.services["ssh"].pid or 1,
                0.0,
                11_200,
                17_100,
                "?",
                "Ss",
                login,
                0.0,
                f"sshd: {self.ops_user} [priv]",
                "sshd",
            ),
            Process(
                self.ops_user,
                ssh_pid + 12,
                ssh_pid,
                0.0,
                7_800,
                17_400,
                "?",
                "S",
                login,
                0.0,
                f"sshd: {self.ops_user}@pts/0",
                "sshd",
            ),
            Process(
                self.ops_user, ssh_pid + 13, ssh_pid + 12, 0.0, 5_200, 8_900, "pts/0", "Ss", login, 0.0, "-bash", "bash"
            ),
            Process(
                "root",
                self.shell_pid - 2,
                ssh_pid + 13,
                0.0,
                6_900,
                11_400,
                "pts/0",
                "S",
                login + 6,
                0.0,
                "sudo -i",
                "sudo",
            ),
            Process(
                "root",
                self.shell_pid,
                self.shell_pid - 2,
                0.0,
                5_100,
                8_700,
                "pts/0",
                "S",
                login + 6,
                0.0,
                "-bash",
                "bash",
            ),
        ]
        # an earlier, unrelated session by a colleague
        eng = self.engineers[0]
        t = self.window + r.randrange(600, 3600)
        src = f"{self.subnet}.{r.randrange(100, 120)}.{r.randrange(2, 250)}"
        self.auth.append(
            (
                t,
                "sshd",
                r.randrange(20_000, 60_000),
                f"Accepted publickey for {eng} from {src} port "
                f"{r.randrange(40000, 65000)} ssh2: ED25519 "
                f"SHA256:{key[::-1]}",
            )
        )
        self.auth.append(
            (
                t + r.randrange(300, 1800),
                "sshd",
                r.randrange(20_000, 60_000),
                f"pam_unix(sshd:session): session closed for user {eng}",
            )
        )
        for t in self.times(r.randrange(2, 6), self.window, self.now):
            bad_ip = f"{r.randrange(30, 220)}.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}"
            who = r.choice(("admin", "test", "ubuntu", "oracle", "postgres", "git"))
            self.auth.append(
                (
                    t,
                    "sshd",
                    r.randrange(20_000, 60_000),
                    f"Invalid user {who} from {bad_ip} port {r.randrange(30000, 65000)}",
                )
            )

    def _mounts(self) -> None:
        r = self.rng
        gb = 1024 * 1024
        root_size = r.choice((29, 48, 97)) * gb + r.randrange(0, gb // 2)
        var_size = r.choice((20, 30, 50, 100)) * gb - r.randrange(0, gb // 3)
        run_size = self.mem_total_kb // 10
        self.mounts = [
            Mount("tmpfs", "tmpfs", run_size, r.randrange(900, 1500), "/run"),
            Mount(
                "/dev/nvme0n1p1",
                "ext4",
                root_size,
                int(root_size * r.uniform(0.25, 0.6)),
                "/",
                reserved_kb=int(root_size * 0.05),
            ),
            Mount("tmpfs", "tmpfs", self.mem_total_kb // 2, 0, "/dev/shm"),
            Mount("tmpfs", "tmpfs", 5120, 0, "/run/lock"),
            Mount("/dev/nvme0n1p15", "vfat", 106_832, 6_186, "/boot/efi"),
            Mount(
                "/dev/nvme1n1",
                "ext4",
                var_size,
                int(var_size * r.uniform(0.2, 0.65)),
                "/var",
                reserved_kb=int(var_size * 0.05),
            ),
            Mount("tmpfs", "tmpfs", run_size, 4, "/run/user/1000"),
        ]

    def mount(self, point: str) -> Mount:
        return next(m for m in self.mounts if m.mountpoint == point)


def splitmix(x: int) -> int:
    """A fast, well-mixed 64-bit hash (SplitMix64 finalizer) for lazily generated lines."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)
