"""Result tables in psql's aligned format (text left, numbers right, NULL empty, ``(N rows)`` footer)."""

from __future__ import annotations

MAX_CELL = 400


def cell(v: object) -> str:
    """One value as psql shows it; values longer than ``MAX_CELL`` characters are cut (see ``long_cells``)."""
    if v is None:
        return ""
    if isinstance(v, float):
        s = f"{v:.15g}"
        return s + ".0" if s.lstrip("-").isdigit() else s
    if isinstance(v, bytes):
        s = "\\x" + v.hex()
    else:
        s = str(v).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return s if len(s) <= MAX_CELL else s[:MAX_CELL] + "…"


def long_cells(rows: list[tuple[object, ...]]) -> bool:
    return any(
        isinstance(v, (str, bytes)) and len(v) > MAX_CELL // 2 and len(cell(v)) > MAX_CELL for r in rows for v in r
    )


def table_lines(columns: list[str], rows: list[tuple[object, ...]]) -> list[str]:
    """Header, separator and one line per row (each with its newline); no footer."""
    cells = [[cell(v) for v in row] for row in rows]
    numeric = [
        bool(rows) and all(isinstance(r[j], (int, float)) or r[j] is None for r in rows) for j in range(len(columns))
    ]
    widths = [max([len(c)] + [len(r[j]) for r in cells]) for j, c in enumerate(columns)]
    out = [
        " " + " | ".join(c.center(widths[j]) for j, c in enumerate(columns)).rstrip() + "\n",
        "-" + "-+-".join("-" * w for w in widths) + "-\n",
    ]
    for r in cells:
        parts = [r[j].rjust(widths[j]) if numeric[j] else r[j].ljust(widths[j]) for j in range(len(columns))]
        out.append((" " + " | ".join(parts)).rstrip() + "\n")
    return out


def footer(n: int) -> str:
    return f"({n} row{'s' if n != 1 else ''})\n"
