"""The shell env's example and its trainer recipe run as an author runs them (subprocesses, a real engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openenv_echo.tokenization import read_jsonl

from .conftest import ROOT

pytestmark = pytest.mark.docker


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_example_records_reference_episodes_and_shows_their_masks(
    shell_task_images: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "episodes"
    script = str(ROOT / "examples" / "shell_episodes" / "run.py")
    proc = _run([script, "--tasks", "count-word,broken-service", "--out", str(out)], tmp_path)
    assert "⟦env_output⟧" in proc.stdout and "tokens per role (reference episodes)" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("│ count-word", "│ broken-service"))]
    assert len(rows) == 2 and all(row.split("│")[2].strip() == "1" for row in rows), rows  # reward 1 each
    tokenized = read_jsonl(out / "tokenized.jsonl")
    assert len(tokenized) == 2 and all(set(t.role_ids.tolist()) == {0, 1, 2, 3} for t in tokenized)
    assert "env_output" in (out / "masks.html").read_text()


def test_torchrl_recipe_trains_on_the_shell_env(shell_task_images: dict[str, str], tmp_path: Path) -> None:
    recipe = str(ROOT / "examples" / "trainers" / "torchrl" / "train.py")
    args = ["--env", "shell", "--steps", "1", "--groups", "1", "--group-size", "2", "--max-turns", "2", "--probe"]
    _run([recipe, *args, "--json", str(tmp_path / "metrics.json")], tmp_path)
    (step,) = json.loads((tmp_path / "metrics.json").read_text())["steps"]
    assert step["world_model_tokens"] > 0 and step["grad"]["env_output"] > 0 and step["grad"]["action"] > 0
    assert step["grad"]["warning"] == step["grad"]["context"] == 0.0
