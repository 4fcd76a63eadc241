"""System views: ps, top -b, df, free, uptime, date, hostname, uname, whoami, id, dmesg, env, which, history."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from typing import Any

from .machine_state import Mount, Process
from .opts import OptError, digits, getopt, has
from .shell import IO, Refused, Shell
from .timefmt import DAYS, MONTHS, cpu_time, date_cmd, human, ps_start, uptime_text, utc
from .vfs import File

Out = Generator[str, None, int]


def _user(u: str) -> str:
    return u if len(u) <= 8 else u[:7] + "+"


def _procs(sh: Shell, self_cmd: str) -> list[Process]:
    me = Process(
        "root",
        sh.next_pid(),
        sh.m.shell_pid,
        0.0,
        3_300,
        10_072,
        "pts/0",
        "R+",
        sh.now,
        0.0,
        self_cmd,
        self_cmd.split()[0],
    )
    return [*sh.m.processes, me]


def _mem_pct(sh: Shell, p: Process) -> float:
    return round(p.rss_kb * 100 / sh.m.mem_total_kb, 1)


_Field = tuple[str, Callable[[Shell, Process], str], str]  # header, cell, alignment
_FIELDS: dict[str, _Field] = {
    "pid": ("PID", lambda sh, p: str(p.pid), ">"),
    "ppid": ("PPID", lambda sh, p: str(p.ppid), ">"),
    "user": ("USER", lambda sh, p: _user(p.user), "<"),
    "comm": ("COMMAND", lambda sh, p: p.comm, "<"),
    "args": ("COMMAND", lambda sh, p: p.cmd, "<"),
    "cmd": ("CMD", lambda sh, p: p.cmd, "<"),
    "command": ("COMMAND", lambda sh, p: p.cmd, "<"),
    "%cpu": ("%CPU", lambda sh, p: f"{p.cpu:.1f}", ">"),
    "pcpu": ("%CPU", lambda sh, p: f"{p.cpu:.1f}", ">"),
    "%mem": ("%MEM", lambda sh, p: f"{_mem_pct(sh, p):.1f}", ">"),
    "pmem": ("%MEM", lambda sh, p: f"{_mem_pct(sh, p):.1f}", ">"),
    "rss": ("RSS", lambda sh, p: str(p.rss_kb), ">"),
    "vsz": ("VSZ", lambda sh, p: str(p.vsz_kb), ">"),
    "stat": ("STAT", lambda sh, p: p.stat, "<"),
    "tty": ("TT", lambda sh, p: p.tty, "<"),
    "time": ("TIME", lambda sh, p: _hms(p.cpu_s), ">"),
    "start": ("STARTED", lambda sh, p: ps_start(p.start, sh.now), ">"),
    "etime": ("ELAPSED", lambda sh, p: _etime(sh.now - p.start), ">"),
}
_SORT: dict[str, Callable[[Shell, Process], Any]] = {
    "pid": lambda sh, p: p.pid,
    "%mem": lambda sh, p: p.rss_kb,
    "pmem": lambda sh, p: p.rss_kb,
    "rss": lambda sh, p: p.rss_kb,
    "%cpu": lambda sh, p: p.cpu,
    "pcpu": lambda sh, p: p.cpu,
    "vsz": lambda sh, p: p.vsz_kb,
    "start_time": lambda sh, p: p.start,
    "time": lambda sh, p: p.cpu_s,
    "user": lambda sh, p: p.user,
    "comm": lambda sh, p: p.comm,
    "ppid": lambda sh, p: p.ppid,
}


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _etime(s: float) -> str:
    s = int(s)
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    return (f"{d}-" if d else "") + (f"{h:02d}:" if d or h else "") + f"{m:02d}:{sec:02d}"


def ps(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    args = argv[1:]
    bsd = set()
    fmt: list[str] | None = None
    sort_keys: list[str] = []
    pids: list[int] | None = None
    users: list[str] | None = None
    comms: list[str] | None = None
    every = full = False
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--sort"):
            val = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            i += 0 if "=" in a else 1
            sort_keys = [k for k in val.split(",") if k]
        elif a in ("-o", "o", "--format") or (a.startswith("-o") and len(a) > 2):
            val = a[2:] if a.startswith("-o") and len(a) > 2 else (args[i + 1] if i + 1 < len(args) else "")
            i += 0 if a.startswith("-o") and len(a) > 2 else 1
            fmt = (fmt or []) + [f.split("=")[0] for f in val.split(",") if f]
        elif a in ("-p", "p", "--pid", "-q"):
            val = args[i + 1] if i + 1 < len(args) else ""
            i += 1
            try:
                pids = [int(x) for x in val.split(",") if x]
            except ValueError:
                io.err(
                    "error: process ID list syntax error\n\nUsage:\n ps [options]\n\n Try 'ps --help <simple|"
                    "list|output|threads|misc|all>'\n  or 'ps --help <s|l|o|t|m|a>'\n for additional help "
                    "text.\n\nFor more details see ps(1).\n"
                )
                return 1
        elif a in ("-u", "-U", "--user"):
            users = (args[i + 1] if i + 1 < len(args) else "").split(",")
            i += 1
        elif a in ("-C",):
            comms = (args[i + 1] if i + 1 < len(args) else "").split(",")
            i += 1
        elif a.startswith("-") and not a.startswith("--"):
            for k, ch in enumerate(a[1:], 1):
                if ch in "op":  # -eo FMT / -ep PID: the rest of the word or the next word is the value
                    val = a[k + 1 :] or (args[i + 1] if i + 1 < len(args) else "")
                    if not a[k + 1 :]:
                        i += 1
                    if ch == "o":
                        fmt = (fmt or []) + [f.split("=")[0] for f in val.split(",") if f]
                    else:
                        try:
                            pids = [int(x) for x in val.split(",") if x]
                        except ValueError:
                            pids = []
                    break
                if ch in "eA":
                    every = True
                elif ch == "f":
                    full = True
                elif ch in "aux":  # `ps -aux` behaves like `ps aux`
                    bsd.add(ch)
                elif ch in "wlHFyjLT":
                    pass
                else:
                    io.err(
                        "error: unsupported SysV option\n\nUsage:\n ps [options]\n\n Try 'ps --help <simple|"
                        "list|output|threads|misc|all>'\n  or 'ps --help <s|l|o|t|m|a>'\n for additional help "
                        "text.\n\nFor more details see ps(1).\n"
                    )
                    return 1
        elif not a.startswith("-"):
            if digits(a.replace(",", "")) and a.strip(","):
                pids = (pids or []) + [int(x) for x in a.split(",") if x]
                i += 1
                continue
            for ch in a:
                if ch in "auxfwce":
                    bsd.add(ch)
                else:
                    io.err(
                        "error: unsupported option (BSD syntax)\n\nUsage:\n ps [options]\n\nFor more details "
                        "see ps(1).\n"
                    )
                    return 1
        else:
            io.err("error: unknown gnu long option\n\nUsage:\n ps [options]\n\nFor more details see ps(1).\n")
            return 1
        i += 1
    procs = _procs(sh, "ps " + " ".join(args) if args else "ps")
    if pids is not None:
        procs = [p for p in procs if p.pid in pids]
    elif users is not None:
        procs = [p for p in procs if p.user in users]
    elif comms is not None:
        procs = [p for p in procs if p.comm in comms]
    elif not (every or "a" in bsd or "x" in bsd):
        procs = [p for p in procs if p.tty == "pts/0" and p.user == "root"]
    for key in reversed(sort_keys):
        desc = key.startswith("-")
        fn = _SORT.get(key.lstrip("+-"))
        if fn is None:
            io.err("error: unknown sort specifier\n\nUsage:\n ps [options]\n\nFor more details see ps(1).\n")
            return 1
        procs.sort(key=lambda p: fn(sh, p), reverse=desc)
    if fmt is not None:
        bad = [f for f in fmt if f not in _FIELDS]
        if bad:
            io.err(
                f'error: unknown user-defined format specifier "{bad[0]}"\n\nUsage:\n ps [options]\n\n'
                f"For more details see ps(1).\n"
            )
            return 1
        cols = [_FIELDS[f] for f in fmt]
        table = [[c[1](sh, p) for c in cols] for p in procs]
        widths = [max([len(c[0])] + [len(r[j]) for r in table]) for j, c in enumerate(cols)]
        rows = [[c[0] for c in cols], *table]
        for r in rows:
            cells = []
            for j, (cell, c) in enumerate(zip(r, cols, strict=True)):
                last_col = j == len(cols) - 1
                cells.append(
                    cell
                    if last_col and c[2] == "<"
                    else (f"{cell:>{widths[j]}}" if c[2] == ">" else f"{cell:<{widths[j]}}")
                )
            yield " ".join(cells).rstrip() + "\n"
        return 0 if procs else 1
    if "u" in bsd:
        yield f"{'USER':<8} {'PID':>7} %CPU %MEM {'VSZ':>6} {'RSS':>5} {'TTY':<8} STAT START   TIME COMMAND\n"
        for p in procs:
            sh.work.charge()
            yield (
                f"{_user(p.user):<8} {p.pid:>7} {p.cpu:>4.1f} {_mem_pct(sh, p):>4.1f} {p.vsz_kb:>6} "
                f"{p.rss_kb:>5} {p.tty:<8} {p.stat:<4} {ps_start(p.start, sh.now):>5} {cpu_time(p.cpu_s):>6} "
                f"{p.cmd}\n"
            )
    elif full:
        yield f"{'UID':<8} {'PID':>7} {'PPID':>7}  C STIME TTY          TIME CMD\n"
        for p in procs:
            sh.work.charge()
            yield (
                f"{_user(p.user):<8} {p.pid:>7} {p.ppid:>7} {int(p.cpu):>2} {ps_start(p.start, sh.now):<5} "
                f"{p.tty:<8} {_hms(p.cpu_s):>8} {p.cmd}\n"
            )
    elif bsd & {"a", "x"}:
        yield f"{'PID':>7} {'TTY':<8} STAT   TIME COMMAND\n"
        for p in procs:
            yield f"{p.pid:>7} {p.tty:<8} {p.stat:<4} {cpu_time(p.cpu_s):>6} {p.cmd}\n"
    else:
        yield f"{'PID':>7} {'TTY':<8} {'TIME':>8} CMD\n"
        for p in procs:
            yield f"{p.pid:>7} {p.tty:<8} {_hms(p.cpu_s):>8} {p.comm}\n"
    return 0 if procs else 1


def top(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    flat = "".join(a.lstrip("-") for a in argv[1:] if a.startswith("-"))
    if "b" not in flat:
        raise Refused("`top` is interactive; use `top -b -n 1` (batch mode) or `ps aux`")
    m = sh.m
    procs = _procs(sh, "top")
    procs[-1].comm, procs[-1].cmd = "top", "top"
    running = 1
    used = m.mem_used_kb / 1024
    total = m.mem_total_kb / 1024
    cache = m.mem_buffcache_kb / 1024
    free = total - used - cache
    users = 1
    la = m.loadavg
    yield (
        f"top - {utc(sh.now):%H:%M:%S} up {uptime_text(sh.now - m.boot)},  {users} user,  load average: "
        f"{la[0]:.2f}, {la[1]:.2f}, {la[2]:.2f}\n"
    )
    yield (
        f"Tasks: {len(procs):>3} total, {running:>3} running, {len(procs) - running:>3} sleeping,   0 stopped,   "
        f"0 zombie\n"
    )
    busy = min(sum(p.cpu for p in procs) / m.ncpu, 99.0)
    yield (
        f"%Cpu(s): {busy * 0.7:4.1f} us, {busy * 0.3:4.1f} sy,  0.0 ni, {100 - busy - 0.2:4.1f} id,  0.2 wa,  "
        f"0.0 hi,  0.0 si,  0.0 st\n"
    )
    yield (f"MiB Mem : {total:8.1f} total, {free:8.1f} free, {used:8.1f} used, {cache:8.1f} buff/cache\n")
    yield (f"MiB Swap:      0.0 total,      0.0 free,      0.0 used. {free + cache - 90:8.1f} avail Mem\n\n")
    yield "    PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND\n"
    for p in sorted(procs, key=lambda p: (-p.cpu, p.pid)):
        sh.work.charge()
        t = p.cpu_s
        yield (
            f"{p.pid:>7} {_user(p.user):<8}  20   0 {p.vsz_kb:>7} {p.rss_kb:>6} {p.rss_kb // 6:>6} "
            f"{p.stat[0]}  {p.cpu:4.1f}  {_mem_pct(sh, p):4.1f} {int(t // 60):>5}:{t % 60:05.2f} {p.comm}\n"
        )
    return 0


def _df_rows(sh: Shell, paths: list[str], io: IO) -> tuple[list[Mount], int]:
    mounts = sh.m.mounts
    if not paths:
        return list(mounts), 0
    rows: list[Mount] = []
    status = 0
    for p in paths:
        path, node, errno = sh.lookup(p)
        if node is None:
            io.err(f"df: {p}: {errno}\n")
            status = 1
            continue
        best = max(
            (mt for mt in mounts if path == mt.mountpoint or path.startswith(mt.mountpoint.rstrip("/") + "/")),
            key=lambda mt: len(mt.mountpoint),
        )
        rows.append(best)
    return rows, status


def df(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "df",
            argv[1:],
            flags="hHTiklaPx",
            valued="t",
            longs={
                "human-readable": False,
                "print-type": False,
                "inodes": False,
                "all": False,
                "local": False,
                "portability": False,
                "type": True,
                "exclude-type": True,
                "total": False,
                "si": False,
            },
        )
    except OptError as e:
        io.err(str(e))
        return 1
    rows, status = _df_rows(sh, ops, io)
    hum = has(opts, "-h", "--human-readable", "-H", "--si")
    typ = has(opts, "-T", "--print-type")
    inodes = has(opts, "-i", "--inodes")
    if not rows:
        return status
    table = []
    for mt in rows:
        if inodes:
            itotal = mt.size_kb // 16 if mt.fstype == "ext4" else mt.size_kb // 4
            iused = int(itotal * (mt.used_kb / max(mt.size_kb, 1)) * 0.08) + (11 if mt.fstype == "ext4" else 1)
            vals = [
                str(itotal) if not hum else human(itotal).replace(".0", ""),
                str(iused) if not hum else human(iused),
                str(itotal - iused) if not hum else human(itotal - iused),
            ]
            pct = f"{math.ceil(iused * 100 / itotal)}%" if itotal else "-"
        else:
            denom = mt.used_kb + mt.avail_kb
            pct = f"{math.ceil(mt.used_kb * 100 / denom)}%" if denom else "-"
            if hum:
                vals = [
                    human(mt.size_kb * 1024),
                    human(mt.used_kb * 1024) if mt.used_kb else "0",
                    human(mt.avail_kb * 1024) if mt.avail_kb else "0",
                ]
            else:
                vals = [str(mt.size_kb), str(mt.used_kb), str(mt.avail_kb)]
        table.append([mt.source, mt.fstype, *vals, pct, mt.mountpoint])
    heads = ["Filesystem", "Type"] + (
        ["Inodes", "IUsed", "IFree", "IUse%"]
        if inodes
        else (["Size", "Used", "Avail", "Use%"] if hum else ["1K-blocks", "Used", "Available", "Use%"])
    )
    mins = (14, 4, 5, 5, 5, 4)  # GNU df's minimum column widths
    w = [max(mins[j], len(heads[j]), *(len(r[j]) for r in table)) for j in range(6)]

    def line(cells: list[str]) -> str:
        parts = [f"{cells[0]:<{w[0]}}"] + ([f"{cells[1]:<{w[1]}}"] if typ else [])
        parts += [f"{cells[j]:>{w[j]}}" for j in (2, 3, 4, 5)]
        return " ".join(parts) + " " + cells[6] + "\n"

    yield line([*heads, "Mounted on"])
    for r in table:
        yield line(r)
    return status


def free(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, _ = getopt(
            "free",
            argv[1:],
            flags="hbkmgtwl",
            longs={"human": False, "mega": False, "giga": False, "kilo": False, "wide": False, "si": False},
        )
    except OptError as e:
        io.err(str(e).replace("Try 'free --help' for more information.\n", "\nUsage:\n free [options]\n"))
        return 1
    m = sh.m
    total, used, cache = m.mem_total_kb, m.mem_used_kb, m.mem_buffcache_kb
    freekb = total - used - cache
    shared = 2_340
    avail = freekb + cache - 90_000
    vals = [total, used, freekb, shared, cache, avail]

    def fmt(kb: int) -> str:
        if has(opts, "-h", "--human"):
            if kb == 0:
                return "0B"
            v = kb * 1024.0
            for u in ("B", "Ki", "Mi", "Gi", "Ti"):
                if v < 1024 or u == "Ti":
                    return (f"{v:.1f}{u}" if v < 10 else f"{round(v)}{u}") if u != "B" else f"{int(v)}B"
                v /= 1024
        div = 1024 if has(opts, "-m", "--mega") else 1024**2 if has(opts, "-g", "--giga") else 1
        return str(kb // div)

    yield f"{'':<7}{'total':>13}{'used':>12}{'free':>12}{'shared':>12}{'buff/cache':>12}{'available':>12}\n"
    yield f"{'Mem:':<7}{fmt(vals[0]):>13}" + "".join(f"{fmt(v):>12}" for v in vals[1:]) + "\n"
    yield f"{'Swap:':<7}{fmt(0):>13}{fmt(0):>12}{fmt(0):>12}\n"
    return 0


def uptime(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    m = sh.m
    if "-p" in argv[1:] or "--pretty" in argv[1:]:
        s = sh.now - m.boot
        w, rem = divmod(s, 604800)
        d, rem = divmod(rem, 86400)
        h, rem = divmod(rem, 3600)
        mi = rem // 60
        parts = [
            f"{v} {u}{'s' if v != 1 else ''}" for v, u in ((w, "week"), (d, "day"), (h, "hour"), (mi, "minute")) if v
        ]
        yield "up " + ", ".join(parts) + "\n"
        return 0
    if "-s" in argv[1:] or "--since" in argv[1:]:
        yield f"{utc(m.boot):%Y-%m-%d %H:%M:%S}\n"
        return 0
    la = m.loadavg
    yield (
        f" {utc(sh.now):%H:%M:%S} up {uptime_text(sh.now - m.boot)},  1 user,  load average: {la[0]:.2f}, "
        f"{la[1]:.2f}, {la[2]:.2f}\n"
    )
    return 0


_STRF = {
    "Y": "%Y",
    "m": "%m",
    "d": "%d",
    "H": "%H",
    "M": "%M",
    "S": "%S",
    "F": "%Y-%m-%d",
    "T": "%H:%M:%S",
    "y": "%y",
    "j": "%j",
    "p": "%p",
    "I": "%I",
    "D": "%m/%d/%y",
    "R": "%H:%M",
    "u": "%u",
    "w": "%w",
}


def date(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    args = [a for a in argv[1:] if a not in ("-u", "--utc", "--universal")]
    t = sh.now
    d = utc(t)
    if not args:
        yield date_cmd(t) + "\n"
        return 0
    if args[0] in ("-R", "--rfc-email"):
        yield f"{DAYS[d.weekday()]}, {d.day:02d} {MONTHS[d.month - 1]} {d.year} {d:%H:%M:%S} +0000\n"
        return 0
    if args[0].startswith("-I") or args[0].startswith("--iso-8601"):
        yield f"{d:%Y-%m-%d}\n" if args[0] in ("-I", "--iso-8601", "-Idate") else f"{d:%Y-%m-%dT%H:%M:%S}+00:00\n"
        return 0
    if args[0].startswith("+"):
        out = []
        f = args[0][1:]
        i = 0
        while i < len(f):
            if f[i] == "%" and i + 1 < len(f):
                c = f[i + 1]
                out.append(
                    {
                        "s": str(t),
                        "Z": "UTC",
                        "z": "+0000",
                        "a": DAYS[d.weekday()],
                        "b": MONTHS[d.month - 1],
                        "h": MONTHS[d.month - 1],
                        "e": f"{d.day:2d}",
                        "n": "\n",
                        "t": "\t",
                        "%": "%",
                        "A": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")[
                            d.weekday()
                        ],
                    }.get(c, d.strftime(_STRF[c]) if c in _STRF else "%" + c)
                )
                i += 2
            else:
                out.append(f[i])
                i += 1
        yield "".join(out) + "\n"
        return 0
    if args[0] in ("-d", "--date") or args[0].startswith("--date="):
        raise Refused("date -d is not supported by this sandbox's date")
    if args[0].startswith("-"):
        io.err(f"date: invalid option -- '{args[0][1:2]}'\nTry 'date --help' for more information.\n")
        return 1
    io.err(f"date: cannot set date: Operation not permitted\n{date_cmd(t)}\n")
    return 1


def hostname(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    a = argv[1:]
    m = sh.m
    if not a or a[0] in ("-s", "--short"):
        yield m.hostname + "\n"
    elif a[0] in ("-f", "--fqdn", "--long", "-A", "--all-fqdns"):
        yield m.fqdn + (" \n" if a[0] in ("-A", "--all-fqdns") else "\n")
    elif a[0] in ("-i", "--ip-address"):
        yield m.ip + "\n"
    elif a[0] in ("-I", "--all-ip-addresses"):
        yield m.ip + " \n"
    elif a[0] in ("-d", "--domain"):
        yield m.fqdn.split(".", 1)[1] + "\n"
    elif a[0].startswith("-"):
        io.err(
            f"hostname: invalid option -- '{a[0][1:2]}'\nUsage: hostname [-b] {{hostname|-F file}}         set "
            f"host name (from file)\n"
        )
        return 1
    else:
        raise Refused("changing the host name is disabled in this read-only triage session")
    return 0


def uname(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, _ = getopt("uname", argv[1:], flags="asnrvmpio", longs={"all": False, "kernel-release": False})
    except OptError as e:
        io.err(str(e))
        return 1
    m = sh.m
    b = utc(m.boot - 86400 * 40)
    version = (
        f"#{sum(map(ord, m.kernel)) % 60 + 60}-Ubuntu SMP {DAYS[b.weekday()]} {MONTHS[b.month - 1]} "
        f"{b.day} {b:%H:%M:%S} UTC {b.year}"
    )
    fields = {
        "s": "Linux",
        "n": m.hostname,
        "r": m.kernel,
        "v": version,
        "m": "x86_64",
        "p": "x86_64",
        "i": "x86_64",
        "o": "GNU/Linux",
    }
    flags = [o[1:] for o, _ in opts if len(o) == 2]
    if has(opts, "-a", "--all"):
        flags = list("snrvmpio")
    if has(opts, "--kernel-release"):
        flags.append("r")
    flags = flags or ["s"]
    yield " ".join(fields[f] for f in "snrvmpio" if f in flags) + "\n"
    return 0


def whoami(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    if len(argv) > 1:
        io.err(f"whoami: extra operand ‘{argv[1]}’\nTry 'whoami --help' for more information.\n")
        return 1
    yield "root\n"
    return 0


def id_(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    target = [a for a in argv[1:] if not a.startswith("-")]
    if not target:
        yield "uid=0(root) gid=0(root) groups=0(root)\n"
        return 0
    node = sh.m.fs.get("/etc/passwd")
    for line in (node.text or "").splitlines() if isinstance(node, File) else []:
        f = line.split(":")
        if f[0] == target[0]:
            yield f"uid={f[2]}({f[0]}) gid={f[3]}({f[0]}) groups={f[3]}({f[0]})\n"
            return 0
    io.err(f"id: ‘{target[0]}’: no such user\n")
    return 1


def dmesg(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, _ = getopt(
            "dmesg",
            argv[1:],
            flags="TxLHkr",
            valued="l",
            longs={
                "ctime": False,
                "human": False,
                "level": True,
                "kernel": False,
                "color": True,
                "nopager": False,
                "decode": False,
            },
        )
    except OptError as e:
        io.err(
            str(e).replace("Try 'dmesg --help' for more information.\n", "Try 'dmesg --help' for more information.\n")
        )
        return 1
    levels = None
    lv = [v for o, v in opts if o in ("-l", "--level")]
    if lv:
        names = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warn": 4, "notice": 5, "info": 6, "debug": 7}
        levels = set()
        for item in ",".join(x or "" for x in lv).split(","):
            if item not in names:
                io.err(f"dmesg: unknown level '{item}'\n")
                return 1
            levels.add(names[item])
    ctime = has(opts, "-T", "--ctime")
    for entry in sh.m.journal:
        if not entry.kernel or (levels is not None and entry.priority not in levels):
            continue
        sh.work.charge()
        if ctime:
            d = utc(entry.ts)
            stamp = f"[{DAYS[d.weekday()]} {MONTHS[d.month - 1]} {d.day:2d} {d:%H:%M:%S} {d.year}]"
        else:
            stamp = f"[{entry.ts - sh.m.boot:12.6f}]"
        yield f"{stamp} {entry.message}\n"
    return 0


def env(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    vars_ = {k: v for k, v in sh.env.items() if k != "$$"}
    vars_["PWD"] = sh.cwd
    if argv[0] == "printenv" and len(argv) > 1:
        found = False
        for name in argv[1:]:
            if name in vars_:
                found = True
                yield vars_[name] + "\n"
        return 0 if found else 1
    if argv[0] == "env" and len(argv) > 1:
        raise Refused("`env COMMAND` is not supported; run the command directly")
    for k, v in vars_.items():
        yield f"{k}={v}\n"
    return 0


def which(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    from .catalog import BIN_TOOLS

    status = 0
    for name in [a for a in argv[1:] if not a.startswith("-")]:
        if name in BIN_TOOLS or (name in sh.commands and name not in ("cd", "history", "submit", "help", "exit")):
            sbin = name in ("nginx", "sshd", "cron", "rsyslogd")
            yield f"/usr/{'sbin' if sbin else 'bin'}/{name}\n"
        else:
            status = 1
    return status


def history(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    for i, cmd in enumerate(sh.history, 1):
        yield f"{i:5d}  {cmd}\n"
    return 0


def noop(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    return 1 if argv[0] == "false" else 0
    yield  # pragma: no cover


def sleep(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    if len(argv) < 2:
        io.err("sleep: missing operand\nTry 'sleep --help' for more information.\n")
        return 1
    try:
        secs = sum(float(a.rstrip("smhd")) * {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(a[-1], 1) for a in argv[1:])
    except ValueError:
        io.err(f"sleep: invalid time interval ‘{argv[1]}’\nTry 'sleep --help' for more information.\n")
        return 1
    if secs > 10:
        raise Refused("sleeping longer than 10 s is not allowed in this sandbox")
    return 0
    yield  # pragma: no cover


def sudo(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    args = argv[1:]
    while args and args[0].startswith("-"):
        if args[0] in ("-i", "-s", "-su"):
            return 0
        if args[0] in ("-u", "-g"):
            args = args[2:]
            continue
        args = args[1:]
    if not args:
        io.err(
            "usage: sudo -h | -K | -k | -V\nusage: sudo [-AbEHknPS] [-C num] [-D directory] [-g group] [-h host] "
            "[-p prompt] [-R directory] [-T timeout] [-u user] [VAR=value] [-i|-s] [<command>]\n"
        )
        return 1
    return (yield from sh._command(io, args, stdin))


def less(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    """``less``/``more`` print like ``cat`` when stdout is not an interactive pager (the sandbox has none)."""
    from .cmd_files import cat

    files = [a for a in argv[1:] if not a.startswith("-") and not a.startswith("+")]
    if not files and stdin is None:
        io.err('Missing filename ("less --help" for help)\n')
        return 1
    return (yield from cat(sh, io, ["cat", *files], stdin))
