"""The runnable recipes under ``examples/trainers/<trainer>/train.py``, run as an author would (a subprocess, its own
env server, a tiny offline model): they train, print per-step metrics, and the world term's gradient reaches the
env-output predictions only when ``world_model_coeff`` is positive (never the warnings, scaffold or padding)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _recipe(trainer: str, tmp_path: Path, coeff: float, steps: int, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"{trainer}_{coeff}.json"
    cmd = [sys.executable, str(ROOT / "examples" / "trainers" / trainer / "train.py"), "--steps", str(steps)]
    cmd += ["--world-model-coeff", str(coeff), "--probe", "--json", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("step ")]
    assert len(lines) == steps, proc.stdout[-2000:]  # one metrics line per step
    return json.loads(out.read_text())


@pytest.mark.trainer
@pytest.mark.parametrize(
    ("trainer", "steps"),
    [("trl", 2), ("torchrl", 2)],  # skyrl, tinker: tests/trainers312 (Python 3.12, SkyRL's Tinker-API server)
)
def test_recipe_world_gradient_reaches_env_output_only_when_coeff_positive(
    trainer: str, steps: int, tmp_path: Path
) -> None:
    on = _recipe(trainer, tmp_path, 0.05, steps, "--group-size", "2")
    off = _recipe(trainer, tmp_path, 0.0, 1, "--group-size", "2")
    assert len(on["steps"]) == steps and len(off["steps"]) == 1
    for step in on["steps"]:
        g = step["grad"]
        assert g["env_output"] > 0 and g["action"] > 0
        assert g["warning"] == g["context"] == g.get("padding", 0.0) == 0.0
    g0 = off["steps"][0]["grad"]
    assert g0["env_output"] == 0.0 and g0["action"] > 0  # the policy term still trains the actions
    assert g0["warning"] == g0["context"] == 0.0
