"""Scripted policies for demos and warm starts: an expert triager and a few non-experts.

``expert_actions(seed)`` is a reasonable triage sequence for the machine of ``seed``: look at failed units,
disks and nginx errors, then the evidence specific to the incident, then the correct ``submit``. It reads the
generated world (it is scripted, not a solver), so its episodes are demonstrations of what good triage
*observes*. The non-experts explore plausibly but answer badly.
"""

from __future__ import annotations

import random

from .machine import INCIDENT_KINDS, generate_machine
from .machine_state import Machine


def _survey() -> list[str]:
    return ["systemctl list-units --type=service --state=failed", "df -h", "tail -n 5 /var/log/nginx/error.log"]


def expert_actions(seed: int, incident: str | None = None) -> list[dict[str, str]]:
    m = generate_machine(seed, incident)
    kind, svc = m.incident.kind, m.incident.service
    log = f"/var/log/{svc}/{svc}.log"
    specific = {
        "disk_full": ["du -sh /var/log/*", f"ls -lh /var/log/{svc}", f"systemctl status {svc}"],
        "oom_killed": [
            f"systemctl status {svc}",
            "grep -i 'out of memory' /var/log/kern.log",
            f"grep -c 'memory usage high' {log}",
        ],
        "bad_config": [f"systemctl status {svc}", f"journalctl -u {svc} -n 5 --no-pager", f"cat {_config(m, svc)}"],
        "cert_expired": [
            f"grep -i certificate {log} | tail -n 3",
            f"openssl x509 -in /etc/{svc}/tls/{svc}.crt -noout -enddate",
            "date",
        ],
        "db_pool_exhausted": [f"grep -c 'timeout acquiring connection' {log}", f"grep 'pool stats' {log} | tail -n 3"],
        "dns_misconfig": [f"tail -n 3 {log}", "cat /etc/resolv.conf", f"getent hosts {_db_host(m)}"],
        "port_conflict": [f"systemctl status {svc}", "ss -tlnp"],
    }[kind]
    return [{"command": c} for c in [*_survey(), *specific, f"submit {kind} {svc}"]]


def _config(m: Machine, svc: str) -> str:
    for path in (f"/etc/{svc}/{svc}.conf", f"/etc/{svc}/config.yaml"):
        if m.fs.get(path) is not None:
            return path
    return f"/etc/{svc}"


def _db_host(m: Machine) -> str:
    return next(name for name, ip in m.dns.items() if ip != m.ip)


def random_commands(seed: int, n: int = 8) -> list[dict[str, str]]:
    """A wandering non-expert: plausible commands picked at random, then a random answer."""
    m = generate_machine(seed)
    r = random.Random(seed * 31 + 7)
    pool = [
        "ls",
        "ls -la /var/log",
        "uptime",
        "free -h",
        "ps aux",
        "cat /etc/hosts",
        "whoami",
        "df -h",
        "tail /var/log/syslog",
        "cat /var/log/nginx/access.log",
        "systemctl status nginx",
        "pwd",
        "cd /etc",
        "ls /opt",
        f"tail -n 20 /var/log/{r.choice(m.apps)}/{r.choice(m.apps)}.log",
        "top",
        "vim /etc/hosts",
        "cat /var/log/auth.log | grep sshd",
        "find / -name '*.conf'",
        "echo $HOSTNAME",
    ]
    cmds = [r.choice(pool) for _ in range(n)]
    return [{"command": c} for c in [*cmds, f"submit {r.choice(INCIDENT_KINDS)} {r.choice(m.apps)}"]]


def hasty_guess(seed: int) -> list[dict[str, str]]:
    """Answers at once without looking: almost always wrong."""
    m = generate_machine(seed)
    r = random.Random(seed * 131 + 3)
    return [{"command": f"submit {r.choice(INCIDENT_KINDS)} {r.choice([*m.apps, 'nginx'])}"}]


def nginx_blamer(seed: int) -> list[dict[str, str]]:
    """Sees the 5xx alert, reads nginx's logs and blames nginx: right symptoms, wrong service."""
    m = generate_machine(seed)
    return [
        {"command": c}
        for c in [
            "systemctl status nginx",
            "tail -n 20 /var/log/nginx/error.log",
            "grep -c ' 50[234] ' /var/log/nginx/access.log",
            f"submit {m.incident.kind if seed % 2 else 'bad_config'} nginx",
        ]
    ]


NON_EXPERTS = {"random": random_commands, "hasty": hasty_guess, "nginx_blamer": nginx_blamer}
