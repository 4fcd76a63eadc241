"""Read-only, bounded query execution over a generated SQLite database.

Layers, each enough on its own for what it covers:

* ``PRAGMA query_only = ON`` and an authorizer (``set_authorizer``) that allows only reads: SELECT, reading
  columns, functions (minus ``load_extension``), recursive CTEs and a whitelist of read-only PRAGMAs. Writes,
  DDL, ATTACH/DETACH, transactions, PRAGMA changes, ANALYZE/REINDEX are denied (and the denial is reported);
* extension loading off (``enable_load_extension(False)`` when the build has it, plus the authorizer);
* ``setlimit``: no attached databases, 1 MB strings/blobs, short SQL text, bounded expression depth;
* a progress handler counting SQLite virtual-machine instructions, to which every call of a function written
  here (dates, printf, random) adds its own cost (a fixed charge plus its arguments' bytes): a query that exceeds
  its budget is interrupted. The budget is counted in steps, not seconds, so interruption is deterministic;
* memory: ``PRAGMA hard_heap_limit`` caps SQLite's heap (the worker process holds one session), temp storage is
  in memory only (nothing spills to the host's disk), at most ``max_columns`` result columns, and fetched values
  are cut to what can be shown as they are fetched;
* host facts: every date/time built-in is replaced and evaluates at the world's own fixed time, whatever form
  'now' takes (text in any case, a blob, an expression, a table's value; ``now`` is the day after the last order,
  UTC; ``localtime`` is UTC), ``random()``/``randomblob()`` are seeded, and the build's version and options
  (``sqlite_version()``, ``PRAGMA compile_options``, ...) are not available, so the same queries give the same
  bytes on every host.
"""

from __future__ import annotations

import random
import re
import sqlite3
import sys
from dataclasses import dataclass

_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_READ_PRAGMAS = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "database_list",
    "collation_list",
}
_DENIED_FUNCTIONS = {
    "load_extension",
    "sqlite_offset",
    "fts3_tokenizer",
    "readfile",
    "writefile",
    "edit",
    # facts about the host's SQLite build, not about the world
    "sqlite_version",
    "sqlite_source_id",
    "sqlite_compileoption_get",
    "sqlite_compileoption_used",
}
_ACTION_NAMES = {
    sqlite3.SQLITE_INSERT: "INSERT",
    sqlite3.SQLITE_UPDATE: "UPDATE",
    sqlite3.SQLITE_DELETE: "DELETE",
    sqlite3.SQLITE_CREATE_TABLE: "CREATE TABLE",
    sqlite3.SQLITE_CREATE_INDEX: "CREATE INDEX",
    sqlite3.SQLITE_CREATE_VIEW: "CREATE VIEW",
    sqlite3.SQLITE_CREATE_TRIGGER: "CREATE TRIGGER",
    sqlite3.SQLITE_CREATE_TEMP_TABLE: "CREATE TEMP TABLE",
    sqlite3.SQLITE_CREATE_TEMP_VIEW: "CREATE TEMP VIEW",
    sqlite3.SQLITE_CREATE_TEMP_INDEX: "CREATE TEMP INDEX",
    sqlite3.SQLITE_CREATE_TEMP_TRIGGER: "CREATE TEMP TRIGGER",
    sqlite3.SQLITE_DROP_TABLE: "DROP TABLE",
    sqlite3.SQLITE_DROP_INDEX: "DROP INDEX",
    sqlite3.SQLITE_DROP_VIEW: "DROP VIEW",
    sqlite3.SQLITE_DROP_TRIGGER: "DROP TRIGGER",
    sqlite3.SQLITE_DROP_TEMP_TABLE: "DROP TEMP TABLE",
    sqlite3.SQLITE_DROP_TEMP_VIEW: "DROP TEMP VIEW",
    sqlite3.SQLITE_DROP_TEMP_INDEX: "DROP TEMP INDEX",
    sqlite3.SQLITE_DROP_TEMP_TRIGGER: "DROP TEMP TRIGGER",
    sqlite3.SQLITE_ATTACH: "ATTACH",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_TRANSACTION: "transactions",
    sqlite3.SQLITE_ALTER_TABLE: "ALTER TABLE",
    sqlite3.SQLITE_REINDEX: "REINDEX",
    sqlite3.SQLITE_ANALYZE: "ANALYZE",
    sqlite3.SQLITE_CREATE_VTABLE: "CREATE VIRTUAL TABLE",
    sqlite3.SQLITE_DROP_VTABLE: "DROP VIRTUAL TABLE",
    sqlite3.SQLITE_SAVEPOINT: "SAVEPOINT",
}
_SPEC = re.compile(r"%[-+ 0#,!]*(\d+|\*)?(?:\.(\d+|\*))?[a-zA-Z%]")
_WRITE_WORDS = {
    "INSERT",
    "UPDATE",
    "DELETE",
    "REPLACE",
    "CREATE",
    "DROP",
    "ALTER",
    "ATTACH",
    "DETACH",
    "BEGIN",
    "COMMIT",
    "END",
    "ROLLBACK",
    "SAVEPOINT",
    "RELEASE",
    "VACUUM",
    "REINDEX",
    "ANALYZE",
}
_DATE_FUNCS = ("date", "time", "datetime", "julianday", "strftime", "unixepoch")


@dataclass
class GuardLimits:
    max_vm_steps: int = 5_000_000  # SQLite VM instructions per query (function calls charged in the same unit)
    check_every: int = 1_000  # progress-handler granularity (VM instructions)
    max_length: int = 1_000_000  # longest string or blob a query may build
    max_sql_chars: int = 4_000
    heap_bytes: int = 48 << 20  # SQLite's whole heap, the database included (PRAGMA hard_heap_limit)
    max_columns: int = 100  # result columns (and columns of anything a query builds)
    udf_call_steps: int = 200  # VM-step charge of one call of a function written here, plus its bytes / 16
    keep_chars: int = 401  # characters of a value kept when fetched (formatting shows at most 400)


class Refusal(Exception):
    """The guard refused or stopped a query; ``str(e)`` is the harness's explanation."""


class Guard:
    """Installs the read-only limits on ``conn`` and runs one query at a time under them."""

    def __init__(self, conn: sqlite3.Connection, seed: int, limits: GuardLimits | None = None) -> None:
        self.conn = conn
        self.limits = limits or GuardLimits()
        self.denied: str | None = None
        self.udf_error: str | None = None
        self._steps = 0
        self._rng = random.Random(seed ^ 0x5EED)
        self._helper = sqlite3.connect(":memory:", check_same_thread=False)  # evaluates date functions without 'now'
        conn.execute("PRAGMA temp_store = MEMORY")  # sorts and temp tables never touch the host's disk
        conn.execute(f"PRAGMA hard_heap_limit = {self.limits.heap_bytes}")  # allocation beyond fails: SQLITE_NOMEM
        self.world_now = _world_now(conn)
        conn.execute("PRAGMA query_only = ON")
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        lim = self.limits
        for name, value in (
            ("SQLITE_LIMIT_ATTACHED", 0),
            ("SQLITE_LIMIT_LENGTH", lim.max_length),
            ("SQLITE_LIMIT_SQL_LENGTH", lim.max_sql_chars * 4),
            ("SQLITE_LIMIT_EXPR_DEPTH", 200),
            ("SQLITE_LIMIT_COMPOUND_SELECT", 50),
            ("SQLITE_LIMIT_LIKE_PATTERN_LENGTH", 1000),
            ("SQLITE_LIMIT_FUNCTION_ARG", 32),
            ("SQLITE_LIMIT_TRIGGER_DEPTH", 1),
            ("SQLITE_LIMIT_COLUMN", lim.max_columns),
        ):
            if hasattr(conn, "setlimit") and hasattr(sqlite3, name):
                conn.setlimit(getattr(sqlite3, name), value)
        for fn in _NATIVE_DATE_FUNCS:
            conn.create_function(fn, -1, self._date_func(fn), deterministic=True)
        now_date, now_time = self.world_now.split(" ")
        for clock_fn, clock_value in (
            ("current_timestamp", self.world_now),
            ("current_date", now_date),
            ("current_time", now_time),
        ):
            conn.create_function(clock_fn, 0, self._constant(clock_value), deterministic=True)
        conn.create_function("random", 0, self._random)
        for fn in ("printf", "format"):
            conn.create_function(fn, -1, self._printf(fn), deterministic=True)
        if sys.version_info >= (3, 11):  # Connection.setlimit is new in 3.11; 3.10 keeps SQLite's built-in cap
            self._helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.limits.max_length)
        conn.create_function("randomblob", 1, self._randomblob)
        conn.set_authorizer(self._authorize)
        conn.set_progress_handler(self._progress, lim.check_every)

    # -- callbacks --------------------------------------------------------------------------------------
    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None) -> int:
        if action in _ALLOWED:
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
                self._deny(f"the function {arg2}() is not available in this sandbox")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            if (arg1 or "").lower() in _READ_PRAGMAS:
                return sqlite3.SQLITE_OK
            self._deny(
                f"PRAGMA {arg1}"
                + (f" = {arg2}" if arg2 is not None else "")
                + " is not allowed: only read-only schema PRAGMAs (table_info, index_list, "
                "foreign_key_list, ...) may be used"
            )
            return sqlite3.SQLITE_DENY
        what = _ACTION_NAMES.get(action, f"operation #{action}")
        self._deny(f"{what} is not allowed: this database is read-only (SELECT queries only)")
        return sqlite3.SQLITE_DENY

    def _deny(self, reason: str) -> None:
        if self.denied is None:  # the first denial names the statement (DROP TABLE before its DELETE)
            self.denied = reason

    def _progress(self) -> int:
        self._steps += self.limits.check_every
        return 1 if self._steps > self.limits.max_vm_steps else 0

    def _charge(self, args: tuple[object, ...]) -> None:
        """Charge one call of a function written here (before it runs): a fixed cost plus its arguments' size."""
        size = sum(len(a) for a in args if isinstance(a, (str, bytes)))
        self._steps += self.limits.udf_call_steps + size // 16
        if self._steps > self.limits.max_vm_steps:
            self.udf_error = self._work_limit_message()
            raise ValueError(self.udf_error)

    def _work_limit_message(self) -> str:
        return (
            f"query stopped: it exceeded the work limit of {self.limits.max_vm_steps:,} SQLite virtual-machine "
            "steps (function calls included)"
        )

    def _memory_message(self) -> str:
        return f"query stopped: it needed more than this sandbox's {self.limits.heap_bytes >> 20} MB of database memory"

    def _constant(self, value: str):  # type: ignore[no-untyped-def]
        def fn() -> str:
            self._charge(())
            return value

        return fn

    def _random(self) -> int:
        self._charge(())
        return self._rng.getrandbits(64) - 2**63

    def _date_func(self, name: str):  # type: ignore[no-untyped-def]
        """``name`` evaluated at the world's time: 'now' (and no time value) is ``world_now``, zones are UTC."""
        helper, now = self._helper, self.world_now

        def fn(*args: object) -> object:
            self._charge(args)
            first = 1 if name == "strftime" else 0
            values = [now if _reads_as_now(a) else a for a in args]
            if len(values) <= first:
                values.append(now)
            values = values[: first + 1] + [a for a in values[first + 1 :] if not _is_zone_modifier(a)]
            return helper.execute(f"SELECT {name}({','.join('?' * len(values))})", values).fetchone()[0]

        return fn

    def _printf(self, name: str):  # type: ignore[no-untyped-def]
        """printf/format whose field widths cannot exceed the string limit (SQLite pads before checking)."""
        helper, cap = self._helper, self.limits.max_length

        def fn(*args: object) -> object:
            self._charge(args)
            if args and isinstance(args[0], str):
                k = 1
                for m in _SPEC.finditer(args[0]):
                    for part in (m.group(1), m.group(2)):
                        if part == "*":
                            v = args[k] if k < len(args) else 0
                            k += 1
                            if isinstance(v, (int, float)) and abs(v) > cap:
                                self.udf_error = "string or blob too big"
                                raise ValueError(self.udf_error)
                        elif part is not None and int(part) > cap:
                            self.udf_error = "string or blob too big"
                            raise ValueError(self.udf_error)
                    if not m.group(0).endswith("%"):
                        k += 1
            return helper.execute(f"SELECT {name}({','.join('?' * len(args))})", args).fetchone()[0]

        return fn

    def _randomblob(self, n: object) -> bytes:
        size = max(1, int(n)) if isinstance(n, (int, float)) else 1
        self._charge((b"",))
        self._steps += min(size, self.limits.max_length) // 16
        if size > self.limits.max_length:
            self.udf_error = "string or blob too big"
            raise ValueError(self.udf_error)
        return self._rng.randbytes(size)

    # -- running ----------------------------------------------------------------------------------------
    def run(self, sql: str, max_rows: int) -> tuple[list[str], list[tuple[object, ...]], bool]:
        """Execute one query: ``(columns, first rows, more_rows_exist)``. Raises ``Refusal`` (harness reasons)
        or ``sqlite3.Error`` (the engine's own error, e.g. a syntax error)."""
        if len(sql) > self.limits.max_sql_chars:
            raise Refusal(
                f"query rejected: {len(sql)} characters exceeds the {self.limits.max_sql_chars}-character limit"
            )
        if "\x00" in sql:
            raise Refusal("query rejected: it contains a NUL character")
        self.denied = None
        self.udf_error = None
        self._steps = 0
        try:
            cur = self.conn.execute(sql)
            keep = self.limits.keep_chars
            rows = []
            for row in cur:  # each value cut to what can be shown as it arrives: bytes held ~ rows x columns
                rows.append(tuple(v[:keep] if isinstance(v, (str, bytes)) and len(v) > keep else v for v in row))
                if len(rows) > max_rows:
                    break
            cols = [d[0] for d in cur.description] if cur.description else []
            cur.close()
        except sqlite3.ProgrammingError as e:
            if "one statement" in str(e):
                raise Refusal("only one SQL statement per query") from None
            raise
        except sqlite3.Error as e:
            if self.denied is not None:
                words = sql.strip().split(None, 2)
                first = words[0].upper().rstrip(";") if words else ""
                if first in _WRITE_WORDS:
                    stmt = " ".join(words[:2]).upper() if first in ("CREATE", "DROP") and len(words) > 1 else first
                    raise Refusal(f"{stmt} is not allowed: this database is read-only (SELECT queries only)") from None
                raise Refusal(self.denied) from None
            if self.udf_error == "string or blob too big":
                raise sqlite3.DataError(self.udf_error) from None  # same words as the engine's own limit
            if self.udf_error is not None:
                raise Refusal(self.udf_error) from None
            if str(e) == "interrupted" and self._steps > self.limits.max_vm_steps:
                raise Refusal(self._work_limit_message()) from None
            if str(e) == "out of memory":
                raise Refusal(self._memory_message()) from None
            raise
        except OverflowError as e:
            raise sqlite3.DataError(str(e)) from None
        except MemoryError:
            raise Refusal(self._memory_message()) from None
        return cols, rows[:max_rows], len(rows) > max_rows

    def close(self) -> None:
        self._helper.close()


_ZONE_MODIFIERS = {"localtime", "utc"}


def _sqlite_text(value: object) -> str | None:
    """How SQLite's date functions read ``value`` as text: a blob as its bytes, up to the first NUL (None: a number)."""
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", "replace")
    if isinstance(value, str):
        return value.split("\0", 1)[0]
    return None


def _reads_as_now(value: object) -> bool:
    """Whether SQLite would take ``value`` as the time value 'now' and read the host clock (any type or ASCII case;
    surrounding spaces count here too)."""
    text = _sqlite_text(value)
    return text is not None and text.strip().lower() == "now"


def _is_zone_modifier(value: object) -> bool:
    """'localtime' / 'utc' in any type or case: they would read the host's time zone."""
    text = _sqlite_text(value)
    return text is not None and text.strip().lower() in _ZONE_MODIFIERS


def _native_date_funcs() -> tuple[str, ...]:
    """The date/time built-ins this SQLite has (``timediff`` is new in 3.43): every one is replaced, none added."""
    probe = sqlite3.connect(":memory:")
    try:
        present = []
        for name in (*_DATE_FUNCS, "timediff"):
            try:
                probe.execute(f"SELECT {name}('2000-01-01', '2000-01-01')")
                present.append(name)
            except sqlite3.OperationalError:
                pass
        return tuple(present)
    finally:
        probe.close()


def _world_now(conn: sqlite3.Connection) -> str:
    """The world's fixed 'now': midnight UTC after its last order (a function of the seed only)."""
    last = conn.execute("SELECT max(order_date) FROM orders").fetchone()[0] or "2024-01-01"
    return str(conn.execute("SELECT datetime(?, '+1 day', 'start of day')", (last,)).fetchone()[0])


_NATIVE_DATE_FUNCS = _native_date_funcs()
