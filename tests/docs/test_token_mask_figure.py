"""The token-masks guide's picture is what its script draws today from a real episode and tokenizer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "docs" / "token_mask_figure.py"
FIGURE = ROOT / "docs" / "assets" / "token-masks.svg"


def test_the_committed_figure_is_the_scripts_output(tmp_path: Path) -> None:
    out = tmp_path / "figure.svg"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    drawn = out.read_text(encoding="utf-8")
    # every role is in the picture, the action's end-of-turn is an action token, the echo prefix a warning one
    for role in ("context", "action", "env_output", "warning"):
        assert f"<title>{role}: " in drawn, role
    assert "<title>action: '&lt;|im_end|&gt;'</title>" in drawn
    assert drawn == FIGURE.read_text(encoding="utf-8"), f"stale figure: run python {SCRIPT.relative_to(ROOT)}"
