"""List the functions longer than a limit (150 lines unless given), longest first: ``python scripts/long_functions.py
[ROOT] [--over N]``. A function's length runs from its ``def`` (decorators excluded) to its last line; a nested
function counts inside its parent and on its own. Exits 0 either way: a list for planning a split, not a gate."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def long_functions(root: Path, over: int) -> list[tuple[int, str]]:
    """``(lines, "path:line qualified.name")`` for every function in ``root`` (a .py file, or the .py files below a folder) over ``over`` lines."""
    found: list[tuple[int, str]] = []
    for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found += [(size, f"{path}:{line} {name}") for size, line, name in _functions(tree, "") if size > over]
    return sorted(found, key=lambda item: (-item[0], item[1]))


def _functions(node: ast.AST, prefix: str) -> list[tuple[int, int, str]]:
    """``(lines, first line, qualified name)`` of every function below ``node``, nested ones included."""
    out: list[tuple[int, int, str]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            out.append(((child.end_lineno or child.lineno) - child.lineno + 1, child.lineno, name))
            out += _functions(child, name + ".")
        elif isinstance(child, ast.ClassDef):
            out += _functions(child, prefix + child.name + ".")
        else:
            out += _functions(child, prefix)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", nargs="?", default="openenv_echo", type=Path)
    parser.add_argument("--over", type=int, default=150, help="list functions longer than this many lines")
    args = parser.parse_args()
    rows = long_functions(args.root, args.over)
    for size, where in rows:
        print(f"{size:5d}  {where}")
    print(f"{len(rows)} function(s) over {args.over} lines under {args.root}")


if __name__ == "__main__":
    main()
