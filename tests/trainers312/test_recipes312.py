"""The SkyRL and Tinker recipes, run as an author would (a subprocess, its own env server and, for Tinker, SkyRL's
local Tinker-API server): 2 steps at λ = 0.05 and at λ = 0, per-step metrics printed, the gradient probe, and for
Tinker the loss the server reports equal to the one computed locally from the same datums and log-probs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 2


def _recipe(trainer: str, tmp_path: Path, coeff: float) -> dict[str, Any]:
    out = tmp_path / f"{trainer}_{coeff}.json"
    cmd = [sys.executable, str(ROOT / "examples" / "trainers" / trainer / "train.py"), "--steps", str(STEPS)]
    cmd += ["--world-model-coeff", str(coeff), "--probe", "--json", str(out), "--group-size", "2"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("step ")]
    print(f"{trainer} recipe, world_model_coeff={coeff}:", *lines, sep="\n  ")  # the per-step metrics, in the log
    assert len(lines) == STEPS, proc.stdout[-2000:]
    result: dict[str, Any] = json.loads(out.read_text())
    assert len(result["steps"]) == STEPS
    return result


@pytest.mark.trainer
@pytest.mark.parametrize("trainer", ["skyrl", "tinker"])
def test_recipe_trains_env_output_only_when_coeff_positive(trainer: str, tmp_path: Path) -> None:
    on, off = _recipe(trainer, tmp_path, 0.05), _recipe(trainer, tmp_path, 0.0)
    for step in on["steps"]:
        g = step["grad"]
        assert g["env_output"] > 0 and g["action"] > 0
        assert g["warning"] == g["context"] == g.get("padding", 0.0) == 0.0
    for step in off["steps"]:
        g = step["grad"]
        assert g["env_output"] == 0.0 and g["action"] > 0  # the policy term still trains the actions
        assert g["warning"] == g["context"] == 0.0
    if trainer == "tinker":
        for step in on["steps"] + off["steps"]:
            assert step["server_loss"] == pytest.approx(step["reference_loss"], rel=1e-5, abs=1e-6)
        assert all(step["world_loss"] > 0 for step in on["steps"])
        assert all(step["world_loss"] == 0.0 for step in off["steps"])
    else:
        assert all(step["loss_type"] == "echo_regular" for step in on["steps"] + off["steps"])
        assert all(step["world_loss"] > 0 for step in on["steps"])
        assert all(step["world_loss"] == 0.0 for step in off["steps"])
