"""Functions a reader can hold: none over 150 lines (``scripts/long_functions.py`` lists them) in the library and
the env packages' servers."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 150
SPLIT = ["openenv_echo", "envs/terminal_env/server", "envs/sql_env/server", "envs/shell_env/server"]

_spec = importlib.util.spec_from_file_location("long_functions", ROOT / "scripts" / "long_functions.py")
assert _spec is not None and _spec.loader is not None
long_functions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(long_functions)


@pytest.mark.parametrize("folder", SPLIT)
def test_no_function_over_the_limit(folder: str) -> None:
    rows = long_functions.long_functions(ROOT / folder, LIMIT)
    assert [where for _, where in rows] == []


def test_the_lister_measures_def_to_last_line_nested_and_methods_included(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    source = textwrap.dedent(
        """
        @decorated
        def short():
            return 1

        class Holder:
            def method(self):
        {body}
                def inner():
        {inner}
        """
    ).format(body=textwrap.indent(body, "    "), inner=textwrap.indent(body, "        "))
    (tmp_path / "m.py").write_text(source)
    rows = long_functions.long_functions(tmp_path, 4)
    assert [(size, where.split()[-1]) for size, where in rows] == [(12, "Holder.method"), (6, "Holder.method.inner")]
