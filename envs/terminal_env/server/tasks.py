"""The triage task: its statement (context), the answer format and the verifier.

Answer: ``submit <kind> <service>``. ``<kind>`` is one of ``INCIDENT_KINDS``; ``<service>`` is the systemd unit at
the centre of the incident (the one that fails or misbehaves because of the root cause), without ``.service``.

Reward (only on the final step; every other step gets 0.0): 1.0 when kind and service are both right, 0.5 when the
kind is right but the service is wrong, 0.0 otherwise (also 0.0 when the step limit ends the episode unanswered).
"""

from __future__ import annotations

from dataclasses import dataclass

from .machine import INCIDENT_KINDS
from .machine_state import Machine
from .timefmt import syslog_ts, utc

USAGE = (
    f"usage: submit <kind> <service>  (kind: {', '.join(INCIDENT_KINDS)}; service: the systemd service at "
    f"the centre of the incident, e.g. `submit disk_full nginx`)"
)


def task_text(m: Machine, max_steps: int) -> str:
    return (
        f"You are the on-call engineer. You are logged in as root on {m.hostname} ({m.ip}) through a read-only "
        f"triage shell.\n\n"
        f"Alert: {m.incident.alert}\n\n"
        f"Find the root cause of the incident. When you know it, answer with\n"
        f"    submit <kind> <service>\n"
        f"where <kind> is one of: {', '.join(INCIDENT_KINDS)}\n"
        f"and <service> is the systemd service at the centre of the incident (the one that fails or misbehaves "
        f'because of the root cause), without ".service".\n'
        f"Send one shell command line per step; nothing on the machine can be changed. You have {max_steps} steps, "
        f"the answer included.\n"
    )


def login_banner(m: Machine, now: int) -> str:
    """What the machine printed when the session started (Ubuntu's MOTD and last-login line)."""
    root = next(x for x in m.mounts if x.mountpoint == "/")
    d = utc(now)
    return (
        f"Welcome to {m.os_name} (GNU/Linux {m.kernel} x86_64)\n\n"
        f"  System information as of {d:%a %b} {d.day:2d} {d:%H:%M:%S} UTC {d.year}\n\n"
        f"  System load:  {m.loadavg[0]:<18.2f}Processes:             {len(m.processes) + 90}\n"
        f"  Usage of /:   {root.used_kb * 100 / root.size_kb:.1f}% of {root.size_kb / 1024 / 1024:.2f}GB"
        f"{'':<4}Users logged in:       1\n"
        f"  Memory usage: {m.mem_used_kb * 100 // m.mem_total_kb}%{'':<16}IPv4 address for ens5: {m.ip}\n"
        f"  Swap usage:   0%\n\n"
        f"Last login: {syslog_ts(now - 86400 - 3600 * 5)[:15]} {d.year} from {m.login_ip}\n"
    )


@dataclass(frozen=True)
class Verdict:
    score: float
    kind_ok: bool
    service_ok: bool

    def text(self) -> str:
        if self.score == 1.0:
            return "correct"
        if self.kind_ok:
            return "right kind, wrong service"
        return "wrong"


def parse_submit(args: list[str]) -> tuple[str, str] | str:
    """``(kind, service)`` or the harness's format message."""
    if len(args) != 2:
        return f"submit needs exactly two words ({len(args)} given); {USAGE}"
    kind = args[0].strip().lower().replace("-", "_")
    if kind not in INCIDENT_KINDS:
        return f"unknown incident kind {args[0]!r}; {USAGE}"
    service = args[1].strip()
    if service.endswith(".service"):
        service = service[: -len(".service")]
    return kind, service


def verify(m: Machine, kind: str, service: str) -> Verdict:
    kind_ok = kind == m.incident.kind
    service_ok = service == m.incident.service
    return Verdict(
        score=1.0 if kind_ok and service_ok else 0.5 if kind_ok else 0.0, kind_ok=kind_ok, service_ok=service_ok
    )
