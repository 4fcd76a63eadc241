"""What a generated machine is made of: the application catalog, name pools and per-runtime log formats.

The catalog is fixed; a seed picks from it (which apps, ports, pids, users, hostnames, message parameters), so
worlds share a predictable *shape* (a Go service logs ``time=... level=ERROR msg=...``) while their *content*
(which service, which pid, which timestamps) has to be read off the machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .timefmt import iso_ms, space_ms


@dataclass(frozen=True)
class AppSpec:
    """An application service that may be installed on a machine."""

    name: str
    description: str
    runtime: str  # node | python | java | go
    role: str  # api (behind nginx) | worker (queue consumer, health port only)
    resource: str  # what it handles: used in routes, queue names, log messages
    db_name: str
    user: str


APPS: tuple[AppSpec, ...] = (
    AppSpec("orders-api", "Orders REST API", "node", "api", "orders", "orders", "orders"),
    AppSpec("auth-service", "Authentication and token service", "java", "api", "tokens", "auth", "auth"),
    AppSpec("inventory-svc", "Inventory service", "go", "api", "items", "inventory", "inventory"),
    AppSpec("catalog-api", "Product catalog API", "python", "api", "products", "catalog", "catalog"),
    AppSpec("payments-gateway", "Payments gateway", "go", "api", "payments", "payments", "payments"),
    AppSpec("billing-worker", "Billing queue worker", "python", "worker", "invoices", "billing", "billing"),
    AppSpec(
        "notification-svc", "Email and SMS notification sender", "node", "worker", "notifications", "notify", "notify"
    ),
    AppSpec("search-indexer", "Search indexer", "java", "worker", "documents", "search", "search"),
)

RUNTIME_EXEC = {
    "node": ("node", "/usr/bin/node /opt/{name}/dist/server.js"),
    "python": ("python3", "/opt/{name}/venv/bin/python3 -m {module}"),
    "java": ("java", "/usr/bin/java -Xms256m -Xmx{xmx}m -jar /opt/{name}/{name}.jar"),
    "go": ("{name}", "/opt/{name}/bin/{name} --config /etc/{name}/config.yaml"),
}
"""(process comm, ExecStart template) per runtime."""

RUNTIME_VSZ_KB = {"node": 1_180_000, "python": 420_000, "java": 3_900_000, "go": 1_260_000}

HOST_PREFIXES = ("prod", "prd", "live", "prod-eu", "prod-us")
HOST_ROLES = ("app", "web", "api", "svc", "backend", "core")
OPS_USERS = ("ops", "deploy", "sre", "admin")
ENGINEERS = ("alice", "bob", "carol", "dmitri", "eve", "farah", "gus", "hana", "ivan", "jun", "kofi", "lena")
DB_HOST_NAMES = ("db-main", "pg-primary", "postgres-01", "db-core")
DOMAINS = ("internal", "prod.internal", "corp.internal", "svc.internal")
PARTNER_HOSTS = ("api.partner-pay.example", "hooks.shipco.example", "sso.idp-cloud.example", "tax.rates-api.example")
CLIENT_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_3) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.3 "
    "Safari/605.1.15",
    "okhttp/4.12.0",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
    "kube-probe/1.28",
    "curl/8.5.0",
)
CRON_JOBS = (
    ("root", "cd / && run-parts --report /etc/cron.hourly", 17 * 60, 3600),
    ("root", "/usr/local/bin/backup-configs.sh >/dev/null 2>&1", 5 * 60, 6 * 3600),
    ("root", "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )", 25 * 60 + 6 * 3600, 86400),
    ("root", "/usr/lib/sysstat/debian-sa1 1 1", 0, 600),
)
LEVELS = ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")


def log_line(
    runtime: str, ts_ms: int, level: str, msg: str, *, pid: int, logger: str, extra: dict[str, Any] | None = None
) -> str:
    """One application log line in the style of the service's runtime."""
    if runtime == "node":
        obj = {"level": level.lower(), "time": iso_ms(ts_ms), "pid": pid, "msg": msg}
        if extra:
            obj.update(extra)
        return json.dumps(obj, separators=(",", ":"))
    if runtime == "python":
        lvl = {"WARN": "WARNING", "FATAL": "CRITICAL"}.get(level, level)
        return f"{space_ms(ts_ms)} {lvl} {logger}: {msg}"
    if runtime == "java":
        lvl = {"FATAL": "ERROR"}.get(level, level)
        thread = (extra or {}).get("thread", "main")
        return f"{space_ms(ts_ms, '.')} {lvl:>5} {pid} --- [{thread:>15}] {logger:<40.40} : {msg}"
    # go / slog text handler
    lvl = {"FATAL": "ERROR"}.get(level, level)
    kv = "".join(f" {k}={_slog_value(v)}" for k, v in (extra or {}).items())
    return f"time={iso_ms(ts_ms)} level={lvl} msg={_slog_value(msg)}{kv}"


def _slog_value(v: object) -> str:
    s = str(v)
    if s and all(c.isalnum() or c in "-_./:@" for c in s):
        return s
    return json.dumps(s)


def java_logger(app: AppSpec, part: str) -> str:
    pkg = app.name.replace("-", "")
    return f"c.example.{pkg}.{part}"


def python_logger(app: AppSpec, part: str) -> str:
    return f"{app.name.replace('-', '_')}.{part}"


def module_name(app: AppSpec) -> str:
    return app.name.replace("-", "_") + (".worker" if app.role == "worker" else ".app")


PASSWD_SYSTEM = (
    "root:x:0:0:root:/root:/bin/bash",
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin",
    "bin:x:2:2:bin:/bin:/usr/sbin/nologin",
    "sys:x:3:3:sys:/dev:/usr/sbin/nologin",
    "sync:x:4:65534:sync:/bin:/bin/sync",
    "man:x:6:12:man:/var/cache/man:/usr/sbin/nologin",
    "www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin",
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
    "systemd-network:x:100:102:systemd Network Management,,,:/run/systemd:/usr/sbin/nologin",
    "systemd-resolve:x:101:103:systemd Resolver,,,:/run/systemd:/usr/sbin/nologin",
    "messagebus:x:102:105::/nonexistent:/usr/sbin/nologin",
    "syslog:x:104:111::/home/syslog:/usr/sbin/nologin",
    "sshd:x:106:65534::/run/sshd:/usr/sbin/nologin",
    "redis:x:112:119::/var/lib/redis:/usr/sbin/nologin",
)

BIN_TOOLS = (
    "awk",
    "bash",
    "cat",
    "cp",
    "curl",
    "cut",
    "date",
    "df",
    "du",
    "echo",
    "find",
    "free",
    "grep",
    "head",
    "hostname",
    "id",
    "journalctl",
    "less",
    "ls",
    "mkdir",
    "more",
    "mv",
    "openssl",
    "ps",
    "pwd",
    "python3",
    "rm",
    "sed",
    "sort",
    "ss",
    "sudo",
    "systemctl",
    "tail",
    "top",
    "uniq",
    "uptime",
    "vim",
    "wc",
    "which",
    "whoami",
    "yes",
)
