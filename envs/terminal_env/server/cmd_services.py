"""systemd views: ``systemctl`` (status, list-units, is-active, cat, ...) and ``journalctl`` (systemd 249 style)."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator

from .machine_state import JournalEntry, Service
from .opts import OptError, digits, getopt, has, last
from .shell import IO, Refused, Shell
from .timefmt import ago, journal_ts, systemd_ts, utc
from .vfs import File

Out = Generator[str, None, int]
_STATE_CHANGING = {
    "start",
    "stop",
    "restart",
    "reload",
    "try-restart",
    "reload-or-restart",
    "enable",
    "disable",
    "mask",
    "unmask",
    "kill",
    "reset-failed",
    "daemon-reload",
    "isolate",
    "reboot",
    "poweroff",
    "halt",
    "edit",
    "set-property",
    "revert",
    "link",
    "preset",
}


def _unit(arg: str) -> str:
    return arg[:-8] if arg.endswith(".service") else arg


def _mem(kb: int) -> str:
    v = kb * 1024.0
    for u in ("B", "K", "M", "G", "T"):
        if v < 1024 or u == "T":
            return f"{v:.1f}{u}" if u != "B" else f"{int(v)}B"
        v /= 1024
    return f"{v:.1f}T"


def _cpu(s: float) -> str:
    if s < 1:
        return f"{int(s * 1000)}ms"
    if s < 60:
        return f"{s:.3f}s"
    if s < 3600:
        return f"{int(s // 60)}min {s % 60:.3f}s"
    return f"{int(s // 3600)}h {int(s % 3600 // 60)}min {s % 60:.3f}s"


def _journal_line(sh: Shell, e: JournalEntry, short_cat: bool = False) -> str:
    if short_cat:
        return e.message + "\n"
    tag = "kernel" if e.kernel else (f"{e.ident}[{e.pid}]" if e.pid is not None else e.ident)
    return f"{journal_ts(e.ts)} {sh.m.hostname} {tag}: {e.message}\n"


def _status_lines(sh: Shell, svc: Service) -> list[str]:
    now = sh.now
    dot = {"failed": "×", "active": "●", "activating": "●"}.get(svc.active, "○")
    vendor = "enabled"
    out = [
        f"{dot} {svc.name}.service - {svc.description}\n",
        f"     Loaded: loaded ({svc.unit_path}; {'enabled' if svc.enabled else 'disabled'}; vendor preset: {vendor})\n",
    ]
    if svc.active == "failed":
        out.append(
            f"     Active: failed (Result: {svc.result}) since {systemd_ts(svc.since)}; {ago(now - svc.since)} ago\n"
        )
    elif svc.oneshot:
        out.append(f"     Active: active (exited) since {systemd_ts(svc.since)}; {ago(now - svc.since)} ago\n")
    else:
        out.append(f"     Active: {svc.active} ({svc.sub}) since {systemd_ts(svc.since)}; {ago(now - svc.since)} ago\n")
    if svc.name == "nginx":
        out.append("       Docs: man:nginx(8)\n")
    if svc.active == "failed" and svc.exit_status:
        shown = svc.exit_status.replace("status=9/KILL", "signal=KILL")
        out.append(f"    Process: {svc.pid} ExecStart={svc.exec_start} {shown}\n")
        out.append(f"   Main PID: {svc.pid} {shown}\n")
        out.append(f"        CPU: {_cpu(svc.cpu_s)}\n")
    elif svc.oneshot:
        out.append(f"   Main PID: {svc.pid or 0} (code=exited, status=0/SUCCESS)\n" if svc.pid else "")
        out.append("        CPU: 12ms\n")
    else:
        out.append(f"   Main PID: {svc.pid} ({svc.comm})\n")
        out.append(f"      Tasks: {svc.tasks} (limit: {sh.m.mem_total_kb // 1024 * 2 // 3})\n")
        out.append(f"     Memory: {_mem(svc.memory_kb)}\n")
        out.append(f"        CPU: {_cpu(svc.cpu_s)}\n")
        out.append(f"     CGroup: /system.slice/{svc.name}.service\n")
        procs = [p for p in sh.m.processes if p.pid == svc.pid or (svc.name == "nginx" and p.comm == "nginx")]
        for i, p in enumerate(procs):
            branch = "└─" if i == len(procs) - 1 else "├─"
            cmd = f'"{p.cmd}"' if " " in p.cmd and p.cmd.startswith("nginx:") else p.cmd
            out.append(f"             {branch}{p.pid} {cmd}\n")
    entries = [e for e in sh.m.journal if e.unit == svc.name][-10:]
    if entries:
        out.append("\n")
        out.extend(_journal_line(sh, e) for e in entries)
    return out


def systemctl(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "systemctl",
            argv[1:],
            flags="alqf",
            valued="tnp",
            longs={
                "all": False,
                "type": True,
                "state": True,
                "failed": False,
                "no-pager": False,
                "quiet": False,
                "full": False,
                "lines": True,
                "no-legend": False,
                "plain": False,
                "property": True,
                "value": False,
                "user": False,
                "system": False,
            },
        )
    except OptError as e:
        io.err(str(e).replace("Try 'systemctl --help' for more information.\n", ""))
        return 1
    verb = ops[0] if ops else "list-units"
    units = [_unit(x) for x in ops[1:]]
    if verb in _STATE_CHANGING:
        raise Refused(
            f"`systemctl {verb}` changes the system; this is a read-only triage session (diagnose, then submit)"
        )
    if verb == "status":
        return (yield from _status(sh, io, units))
    if verb in ("is-active", "is-failed", "is-enabled"):
        return (yield from _is_state(sh, io, verb, units, opts))
    if verb == "cat":
        return (yield from _cat(sh, io, units))
    if verb == "show":
        return (yield from _show(sh, opts, units))
    if verb in ("list-units", "list-unit-files", "--failed") or has(opts, "--failed"):
        return (yield from _list(sh, verb, opts))
    io.err(f"Unknown command verb {verb}.\n")
    return 1


def _status(sh: Shell, io: IO, units: list[str]) -> Out:
    """``systemctl status [UNIT...]``: the host's summary, or each unit's status block (exit 3 when one is not
    active, 4 when one is missing)."""
    m = sh.m
    if not units:
        failed = sum(s.active == "failed" for s in m.services.values())
        yield (
            f"● {m.hostname}\n    State: {'degraded' if failed else 'running'}\n     Jobs: 0 queued\n"
            f"   Failed: {failed} units\n    Since: {systemd_ts(m.boot)}; {ago(sh.now - m.boot)} ago\n"
            f"   CGroup: /\n"
        )
        return 0
    status = 0
    for i, u in enumerate(units):
        svc = m.services.get(u)
        if svc is None:
            io.err(f"Unit {u}.service could not be found.\n")
            status = 4
            continue
        if i:
            yield "\n"
        for line in _status_lines(sh, svc):
            sh.work.charge()
            yield line
        if svc.active != "active" and status == 0:
            status = 3
    return status


def _is_state(sh: Shell, io: IO, verb: str, units: list[str], opts: list[tuple[str, str | None]]) -> Out:
    """``is-active``/``is-failed``/``is-enabled``: one state per unit (with -q, only the exit status)."""
    m = sh.m
    if not units:
        io.err("Too few arguments.\n")
        return 1
    ok = False
    for u in units:
        svc = m.services.get(u)
        if verb == "is-enabled":
            if svc is None:
                io.err(f"Failed to get unit file state for {u}.service: No such file or directory\n")
                continue
            yield "enabled\n" if svc.enabled else "disabled\n"
            ok = ok or svc.enabled
            continue
        state = "inactive" if svc is None else svc.active
        if not has(opts, "-q", "--quiet"):
            yield state + "\n"
        ok = ok or (state == "active" if verb == "is-active" else state == "failed")
    return 0 if ok else (1 if verb != "is-active" else 3)


def _cat(sh: Shell, io: IO, units: list[str]) -> Out:
    """``systemctl cat UNIT...``: each unit's file, headed by its path."""
    m = sh.m
    status = 0
    for u in units:
        svc = m.services.get(u)
        node = m.fs.get(svc.unit_path) if svc else None
        if svc is None:
            io.err(f"No files found for {u}.service.\n")
            status = 1
            continue
        yield f"# {svc.unit_path}\n"
        if isinstance(node, File) and node.text:
            yield from node.text.splitlines(keepends=True)
        else:
            yield (
                f"[Unit]\nDescription={svc.description}\n\n[Service]\nExecStart={svc.exec_start}\n\n"
                f"[Install]\nWantedBy=multi-user.target\n"
            )
    return status


def _show(sh: Shell, opts: list[tuple[str, str | None]], units: list[str]) -> Out:
    """``systemctl show [UNIT...]``: properties as ``Key=value`` (-p picks, --value drops the keys)."""
    m = sh.m
    props = [p for o, v in opts if o in ("-p", "--property") for p in (v or "").split(",")]
    for u in units or ["nginx"]:
        svc = m.services.get(u)
        if svc is None:
            continue
        allp = {
            "Id": f"{u}.service",
            "Description": svc.description,
            "MainPID": str(svc.pid or 0),
            "ActiveState": svc.active,
            "SubState": svc.sub,
            "Result": svc.result or "success",
            "NRestarts": str(svc.restarts),
            "FragmentPath": svc.unit_path,
            "ExecMainPID": str(svc.pid or 0),
            "MemoryCurrent": str(svc.memory_kb * 1024) if svc.memory_kb else "[not set]",
            "ActiveEnterTimestamp": systemd_ts(svc.since),
        }
        for k, v in allp.items():
            if not props or k in props:
                yield (v if has(opts, "--value") else f"{k}={v}") + "\n"
    return 0


def _list(sh: Shell, verb: str, opts: list[tuple[str, str | None]]) -> Out:
    """``list-units``/``list-unit-files``/``--failed``: the unit table, filtered by --state/--failed, with systemd's
    legend unless --no-legend."""
    m = sh.m
    want_state = last(opts, "--state")
    failed_only = has(opts, "--failed") or want_state == "failed"
    rows: list[tuple[str, ...]] = []
    for s in m.services.values():
        if failed_only and s.active != "failed":
            continue
        if want_state and want_state not in ("failed",) and want_state not in (s.active, s.sub):
            continue
        if verb == "list-unit-files":
            rows.append((f"{s.name}.service", "enabled" if s.enabled else "disabled", "enabled"))
        else:
            rows.append((f"{s.name}.service", "loaded", s.active, s.sub, s.description))
    legend = not has(opts, "--no-legend")
    if verb == "list-unit-files":
        width = max([len(r[0]) for r in rows] + [9])
        if legend:
            yield f"{'UNIT FILE':<{width}} STATE   VENDOR PRESET\n"
        for r in rows:
            yield f"{r[0]:<{width}} {r[1]:<7} {r[2]}\n"
        if legend:
            yield f"\n{len(rows)} unit files listed.\n"
        return 0
    w = [max([len(r[i]) for r in rows] + [len(h)]) for i, h in enumerate(("UNIT", "LOAD", "ACTIVE", "SUB"))]
    if legend:
        yield f"  {'UNIT':<{w[0]}} {'LOAD':<{w[1]}} {'ACTIVE':<{w[2]}} {'SUB':<{w[3]}} DESCRIPTION\n"
    for r in rows:
        mark = "●" if r[2] == "failed" else " "
        yield f"{mark} {r[0]:<{w[0]}} {r[1]:<{w[1]}} {r[2]:<{w[2]}} {r[3]:<{w[3]}} {r[4]}\n"
    if legend and not rows:
        yield "0 loaded units listed.\n"
    elif legend:
        yield (
            "\nLOAD   = Reflects whether the unit definition was properly loaded.\n"
            "ACTIVE = The high-level unit activation state, i.e. generalization of SUB.\n"
            "SUB    = The low-level unit activation state, values depend on unit type.\n"
            f"{len(rows)} loaded units listed."
            + (
                " Pass --all to see loaded but inactive units, too.\nTo show all installed unit files use "
                "'systemctl list-unit-files'.\n"
                if not failed_only
                else "\n"
            )
        )
    return 0


_PRIO = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warning": 4, "notice": 5, "info": 6, "debug": 7}


def _parse_time(sh: Shell, text: str) -> float | None:
    t = text.strip().lower()
    now = sh.now
    if t == "now":
        return now
    if t in ("today", "yesterday"):
        day = now - now % 86400
        return day - (86400 if t == "yesterday" else 0)
    m = re.fullmatch(r"-(\d+)\s*(s|sec|m|min|h|hour|hours|d|day|days)", t) or re.fullmatch(
        r"(\d+)\s*(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hour|hours|d|day|days) ago", t
    )
    if m:
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)[0]]
        return now - int(m.group(1)) * mult
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})(?:[ t](\d{2}):(\d{2})(?::(\d{2}))?)?", t)
    if m:
        import calendar

        y, mo, d, hh, mm, ss = (int(x) if x else 0 for x in m.groups())
        try:
            return calendar.timegm((y, mo, d, hh, mm, ss, 0, 0, 0))
        except (ValueError, OverflowError):
            return None
    m = re.fullmatch(r"(\d{2}):(\d{2})(?::(\d{2}))?", t)
    if m:
        day = now - now % 86400
        return day + int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3) or 0)
    return None


def journalctl(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, _ops = getopt(
            "journalctl",
            argv[1:],
            flags="xekbrfaqm",
            valued="unpoSUt",
            longs={
                "unit": True,
                "lines": True,
                "priority": True,
                "output": True,
                "since": True,
                "until": True,
                "no-pager": False,
                "dmesg": False,
                "boot": False,
                "reverse": False,
                "follow": False,
                "pager-end": False,
                "catalog": False,
                "identifier": True,
                "no-hostname": False,
                "utc": False,
                "quiet": False,
                "all": False,
                "merge": False,
                "system": False,
            },
        )
    except OptError as e:
        io.err(str(e).replace("Try 'journalctl --help' for more information.\n", ""))
        return 1
    m = sh.m
    entries = list(m.journal)
    units = [_unit(v or "") for o, v in opts if o in ("-u", "--unit")]
    if units:  # an unknown unit simply has no entries, as with journalctl
        entries = [e for e in entries if e.unit in units]
    idents = [v for o, v in opts if o in ("-t", "--identifier")]
    if idents:
        entries = [e for e in entries if e.ident in idents]
    if has(opts, "-k", "--dmesg"):
        entries = [e for e in entries if e.kernel]
    p = last(opts, "-p", "--priority")
    if p is not None:
        top = p.split("..")[-1]
        level = _PRIO.get(top, int(top) if digits(top) and int(top) < 8 else None)
        if level is None:
            io.err(f"Failed to parse priority value: {p}\n")
            return 1
        entries = [e for e in entries if e.priority <= level]
    for name in ("--since", "-S", "--until", "-U"):
        v = last(opts, name)
        if v is None:
            continue
        t = _parse_time(sh, v)
        if t is None:
            io.err(f"Failed to parse timestamp: {v}\n")
            return 1
        entries = [e for e in entries if (e.ts >= t if name in ("--since", "-S") else e.ts <= t)]
    n = last(opts, "-n", "--lines")
    if has(opts, "-e", "--pager-end") and n is None:
        n = "1000"
    if has(opts, "-f", "--follow") and n is None:
        n = "10"
    if n is not None:
        if not digits(n):
            io.err(f"Failed to parse lines '{n}'\n")
            return 1
        entries = entries[-int(n) :] if int(n) else []
    if has(opts, "-r", "--reverse"):
        entries = entries[::-1]
    out_mode = last(opts, "-o", "--output") or "short"
    if out_mode not in ("short", "cat", "short-precise", "short-iso"):
        io.err(f"Unknown output format '{out_mode}'.\n")
        return 1
    if not entries:
        yield "-- No entries --\n"
        return 0
    first, lastt = m.journal[0].ts, m.journal[-1].ts
    yield f"-- Logs begin at {systemd_ts(first)}, end at {systemd_ts(lastt)}. --\n"
    for entry in entries:
        sh.work.charge()
        if out_mode == "short-iso":
            d = utc(entry.ts)
            tag = (
                "kernel" if entry.kernel else (f"{entry.ident}[{entry.pid}]" if entry.pid is not None else entry.ident)
            )
            yield f"{d:%Y-%m-%dT%H:%M:%S}+0000 {m.hostname} {tag}: {entry.message}\n"
        else:
            yield _journal_line(sh, entry, short_cat=out_mode == "cat")
    if has(opts, "-f", "--follow"):
        sh.notices.append(
            "[harness: `journalctl -f` never exits; the sandbox stopped following after printing "
            "the current end of the journal]\n"
        )
    return 0
