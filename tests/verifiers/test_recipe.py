"""The prime-rl recipe (``examples/trainers/prime-rl/train.py``) run as an author would: a subprocess with its own
env server and generate stand-in. It trains, prints per-step metrics, and the ce component's gradient reaches the
env-output predictions (exactly λ in total: every ce weight is λ, divided by their count) only when
``world_model_coeff`` is positive, never warnings, template tokens or padding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _recipe(tmp_path: Path, coeff: float, steps: int, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"prime_rl_{coeff}.json"
    cmd = [sys.executable, str(ROOT / "examples" / "trainers" / "prime-rl" / "train.py"), "--steps", str(steps)]
    cmd += ["--world-model-coeff", str(coeff), "--group-size", "2", "--probe", "--json", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("step ")]
    assert len(lines) == steps, proc.stdout[-2000:]  # one metrics line per step
    print("\n".join(lines))
    return json.loads(out.read_text())


@pytest.mark.trainer
def test_prime_rl_recipe_ce_gradient_reaches_env_output_only_when_coeff_positive(tmp_path: Path) -> None:
    on = _recipe(tmp_path, 0.05, 2)
    for step in on["steps"]:
        g = step["grad"]
        assert step["samples"] == 4 and step["ce_tokens"] > 0 and step["tito_gap"] < 1e-4
        assert g["env_output"] == pytest.approx(0.05, rel=1e-4) and g["action"] > 0
        assert g["warning"] == g["context"] == g.get("padding", 0.0) == 0.0
    # λ = 0, with a model and tokenizer loaded from a directory (the --model path a user takes)
    from transformers import AutoTokenizer

    from openenv_echo.adapters.verifiers import offline_renderer_tokenizer
    from openenv_echo.testing.recipes import tiny_causal_lm

    saved = tmp_path / "model"
    tokenizer = AutoTokenizer.from_pretrained(offline_renderer_tokenizer())
    tokenizer.save_pretrained(saved)
    tiny_causal_lm(tokenizer, seed=1).save_pretrained(saved)
    off = _recipe(tmp_path, 0.0, 1, "--model", str(saved))
    [step] = off["steps"]
    assert step["ce_tokens"] == 0 and step["grad"]["env_output"] == 0.0 and step["grad"]["action"] > 0
    assert step["grad"]["warning"] == step["grad"]["context"] == 0.0
