"""Code blocks fit the site's code box: no line of a fenced block in the README, the RFCs or the docs is wider than
80 columns, what Material's code box shows in a 1280 px wide window (measured in Chromium: 656 px of 13.6 px
monospace, 8.18 px a character), so an explaining comment goes above its line, not off the edge."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 80
DOCS = [ROOT / "README.md", *sorted((ROOT / "rfcs").glob("*.md")), *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^\s*(```|~~~)")


def wide_lines(path: Path, root: Path = ROOT) -> list[str]:
    out, inside = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            inside = not inside
        elif inside and len(line) > WIDTH:
            out.append(f"{path.relative_to(root)}:{n} ({len(line)} columns)")
    return out


def test_code_lines_fit_the_code_box() -> None:
    assert len(DOCS) >= 25
    wide = [w for p in DOCS for w in wide_lines(p)]
    assert not wide, f"code lines wider than {WIDTH} columns (move the comment above the line): {wide}"


def test_the_check_sees_a_wide_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text " * 40 + "\n```python\nx = 1\n" + "y = 2  # " + "z" * 90 + "\n```\n")
    assert wide_lines(page, tmp_path) == ["page.md:4 (99 columns)"]
