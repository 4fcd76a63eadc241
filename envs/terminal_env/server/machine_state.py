"""The machine's state as plain dataclasses: services, processes, mounts, listeners, journal, incident.

``machine.py`` builds one of these from a seed; the shell only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from .vfs import VFS


class Cert(TypedDict):
    """A TLS certificate as ``openssl x509`` shows it (times are epoch seconds)."""

    subject: str
    issuer: str
    not_before: int
    not_after: int
    serial: str


@dataclass
class Service:
    """A systemd unit as ``systemctl status`` shows it."""

    name: str  # unit name without ``.service``
    description: str
    exec_start: str
    active: str = "active"  # active | failed | activating | inactive
    sub: str = "running"  # running | exited | dead | auto-restart | failed
    result: str | None = None  # exit-code | oom-kill | ... (when not running)
    since: int = 0
    pid: int | None = None
    comm: str = ""
    memory_kb: int = 0
    cpu_s: float = 0.0
    tasks: int = 1
    enabled: bool = True
    unit_path: str = ""
    exit_status: str | None = None  # "(code=exited, status=1/FAILURE)"
    restarts: int = 0
    app: bool = False
    port: int | None = None
    oneshot: bool = False


@dataclass
class Process:
    user: str
    pid: int
    ppid: int
    cpu: float
    rss_kb: int
    vsz_kb: int
    tty: str
    stat: str
    start: int
    cpu_s: float
    cmd: str
    comm: str


@dataclass
class Mount:
    source: str
    fstype: str
    size_kb: int
    used_kb: int
    mountpoint: str
    reserved_kb: int = 0

    @property
    def avail_kb(self) -> int:
        return max(self.size_kb - self.used_kb - self.reserved_kb, 0)


@dataclass
class Listener:
    proto: str  # tcp | udp
    addr: str
    port: int
    pid: int
    comm: str
    fd: int


@dataclass
class JournalEntry:
    ts: float
    ident: str  # syslog identifier: "kernel", "systemd", "orders-api", "CRON", "sshd"
    pid: int | None
    message: str
    unit: str | None = None  # "orders-api" for journalctl -u
    priority: int = 6  # 3 err, 4 warning, 6 info

    @property
    def kernel(self) -> bool:
        return self.ident == "kernel"


@dataclass
class Incident:
    kind: str
    service: str
    alert: str
    started: int
    details: dict[str, str] = field(default_factory=dict)


@dataclass
class Machine:
    """Everything the shell can observe about one generated host."""

    seed: int
    hostname: str
    fqdn: str
    ip: str
    now: int
    boot: int
    fs: VFS
    services: dict[str, Service]
    processes: list[Process]
    mounts: list[Mount]
    listeners: list[Listener]
    journal: list[JournalEntry]
    incident: Incident
    mem_total_kb: int
    mem_used_kb: int
    mem_buffcache_kb: int
    loadavg: tuple[float, float, float]
    ncpu: int
    kernel: str
    os_name: str
    ops_user: str
    shell_pid: int
    env: dict[str, str]
    certs: dict[str, Cert]  # path -> certificate
    apps: list[str]
    login_ip: str = ""
    nameserver: str = ""
    resolver_ok: bool = True
    dns: dict[str, str] = field(default_factory=dict)  # name -> address the real DNS would answer
