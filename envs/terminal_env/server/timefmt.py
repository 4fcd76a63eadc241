"""Deterministic time and size formatting in the styles of syslog, ls, systemd, ps and GNU ``-h``.

Every timestamp of the virtual machine is an integer epoch (UTC) derived from the seed; nothing here reads the
wall clock, so the same world renders to the same bytes on every host.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def syslog_ts(ts: float) -> str:
    """``Mar  4 06:12:01`` (day padded to width 2, as rsyslog writes it)."""
    d = utc(ts)
    return f"{MONTHS[d.month - 1]} {d.day:2d} {d:%H:%M:%S}"


def journal_ts(ts: float) -> str:
    """``Mar 04 06:12:01`` (journalctl's short format pads the day with a zero)."""
    d = utc(ts)
    return f"{MONTHS[d.month - 1]} {d.day:02d} {d:%H:%M:%S}"


def iso_ms(ts_ms: int) -> str:
    """``2024-03-14T06:12:01.123Z``."""
    d = utc(ts_ms // 1000)
    return f"{d:%Y-%m-%dT%H:%M:%S}.{ts_ms % 1000:03d}Z"


def space_ms(ts_ms: int, sep: str = ",") -> str:
    """``2024-03-14 06:12:01,123`` (Python logging) or with ``.`` (Spring Boot)."""
    d = utc(ts_ms // 1000)
    return f"{d:%Y-%m-%d %H:%M:%S}{sep}{ts_ms % 1000:03d}"


def clf_ts(ts: float) -> str:
    """Common Log Format: ``14/Mar/2024:06:12:01 +0000``."""
    d = utc(ts)
    return f"{d.day:02d}/{MONTHS[d.month - 1]}/{d.year}:{d:%H:%M:%S} +0000"


def nginx_error_ts(ts: float) -> str:
    d = utc(ts)
    return f"{d:%Y/%m/%d %H:%M:%S}"


def ls_ts(ts: float, now: float) -> str:
    """``Mar 14 06:12`` for recent files, ``Mar 14  2023`` for files older than six months or in the future."""
    d = utc(ts)
    if now - 15_778_476 < ts <= now + 60:
        return f"{MONTHS[d.month - 1]} {d.day:2d} {d:%H:%M}"
    return f"{MONTHS[d.month - 1]} {d.day:2d}  {d.year}"


def systemd_ts(ts: float) -> str:
    """``Thu 2024-03-14 06:12:01 UTC``."""
    d = utc(ts)
    return f"{DAYS[d.weekday()]} {d:%Y-%m-%d %H:%M:%S} UTC"


def date_cmd(ts: float) -> str:
    """GNU ``date`` default output: ``Thu Mar 14 06:12:01 UTC 2024``."""
    d = utc(ts)
    return f"{DAYS[d.weekday()]} {MONTHS[d.month - 1]} {d.day:2d} {d:%H:%M:%S} UTC {d.year}"


def openssl_ts(ts: float) -> str:
    """``Mar 14 06:12:01 2024 GMT`` (``openssl x509 -enddate``)."""
    d = utc(ts)
    return f"{MONTHS[d.month - 1]} {d.day:2d} {d:%H:%M:%S} {d.year} GMT"


def ago(seconds: float) -> str:
    """systemd's relative time (``format_timestamp_relative``) without the trailing ``ago``."""
    s = int(max(seconds, 0))
    year, month, week, day, hour, minute = 31_557_600, 2_629_800, 604_800, 86_400, 3600, 60

    def n(v: int, unit: str) -> str:
        return f"{v} {unit}{'' if v == 1 else 's'}"

    if s >= year:
        return f"{n(s // year, 'year')} {n((s % year) // month, 'month')}"
    if s >= month:
        return f"{n(s // month, 'month')} {n((s % month) // day, 'day')}"
    if s >= week:
        rest = (s % week) // day
        return n(s // week, "week") + (f" {n(rest, 'day')}" if rest else "")
    if s >= 2 * day:
        return f"{s // day} days"
    if s >= 25 * hour:
        return f"1 day {(s - day) // hour}h"
    if s >= 6 * hour:
        return f"{s // hour}h"
    if s >= hour:
        return f"{s // hour}h {(s % hour) // minute}min"
    if s >= 5 * minute:
        return f"{s // minute}min"
    if s >= minute:
        return f"{s // minute}min {s % minute}s"
    return f"{s}s"


def uptime_text(seconds: float) -> str:
    """The ``up ...`` part of ``uptime``: ``12 days,  3:04`` or ``3:04`` or ``42 min``."""
    s = int(seconds)
    days, rem = divmod(s, 86400)
    h, m = divmod(rem // 60, 60)
    hm = f"{h:2d}:{m:02d}" if h else f"{m} min"
    if days:
        return f"{days} day{'s' if days != 1 else ''}, {hm}"
    return hm


def ps_start(ts: float, now: float) -> str:
    """ps START column: ``06:12`` today, ``Mar02`` this year, ``2023`` before."""
    d, n = utc(ts), utc(now)
    if d.date() == n.date():
        return f"{d:%H:%M}"
    if d.year == n.year:
        return f"{MONTHS[d.month - 1]}{d.day:02d}"
    return str(d.year)


def cpu_time(seconds: float) -> str:
    """ps TIME column: ``M:SS``."""
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d}"


def human(n: float, *, unit_suffix: bool = True) -> str:
    """GNU ``-h`` sizes (powers of 1024, rounded up, one decimal below 10): ``512``, ``4.0K``, ``18G``."""
    if n < 1024:
        return str(int(n))
    units = "KMGTPE"
    v = float(n)
    for u in units:
        v /= 1024.0
        if v < 10:
            r = math.ceil(v * 10 - 1e-9) / 10
            if r < 10:
                return f"{r:.1f}{u}"
            return f"{int(r)}{u}"
        r = math.ceil(v - 1e-9)
        if r < 1024:
            return f"{r}{u}"
    return f"{int(v)}E"
