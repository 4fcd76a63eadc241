"""Our task suite under Harbor's own CLI: ``harbor run --agent oracle --env docker`` on a shipped task scores 1.0.

Harbor (Python >= 3.12, Compose v2) lives beside the project, set up by scripts/harbor/setup-harbor-cli.sh into
``$HARBOR_HOME`` (default /tmp/openenv-echo-harbor). Without it this test SKIPs with that instruction, unless
``OPENENV_ECHO_REQUIRE_HARBOR=1`` makes that a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from openenv_echo.envs.shell.tasks import SUITE_DIR

pytestmark = pytest.mark.docker

HARBOR_HOME = Path(os.environ.get("HARBOR_HOME", "/tmp/openenv-echo-harbor"))
HARBOR = HARBOR_HOME / "venv" / "bin" / "harbor"
DOCKER_CONFIG = HARBOR_HOME / "docker"


def _harbor_env() -> dict[str, str]:
    if not HARBOR.exists() or not (DOCKER_CONFIG / "cli-plugins" / "docker-compose").exists():
        reason = f"HARBOR CLI NOT SET UP in {HARBOR_HOME}: run scripts/harbor/setup-harbor-cli.sh"
        if os.environ.get("OPENENV_ECHO_REQUIRE_HARBOR") == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return {**os.environ, "DOCKER_CONFIG": str(DOCKER_CONFIG)}


@pytest.mark.parametrize("task", ["sort-inbox", "broken-service"])
def test_harbor_oracle_run_scores_1(docker_engine: Any, tmp_path: Path, task: str) -> None:
    env = _harbor_env()
    cmd = [str(HARBOR), "run", "-p", str(SUITE_DIR / task), "-a", "oracle", "-e", "docker", "-o", str(tmp_path)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    finally:  # Harbor removes its containers; an image it built may stay behind (untagged): remove ours
        for image in docker_engine.images.list(all=True, filters={"label": "com.docker.compose.service=main"}):
            if image.labels.get("com.docker.compose.project", "").startswith(f"{task}__"):
                docker_engine.images.remove(image.id, force=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = tmp_path.glob("*/result.json")
    stats = json.loads(result.read_text())["stats"]
    assert stats["n_completed_trials"] == 1 and stats["n_errored_trials"] == 0, stats
    (evals,) = stats["evals"].values()
    assert evals["metrics"] == [{"mean": 1.0}], evals
    assert list(evals["reward_stats"]["reward"]) == ["1.0"], evals
