"""Schemathesis against every server's own /openapi.json: no 5xx, no response violating the schema, and no
request the schema allows being refused (or the reverse)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from openenv_echo.envs import ENVIRONMENTS

ST = str(Path(sys.executable).with_name("st"))


# the shell env is left out: each fuzzed reset would start a container (its validation paths are the shared server's,
# fuzzed here through the other envs; tests/containers/test_shell_env.py covers its own bad inputs)
@pytest.mark.parametrize("env", sorted(n for n, s in ENVIRONMENTS.items() if not s.needs_docker))
def test_openapi_fuzz(running_server, env: str, tmp_path: Path) -> None:
    url = running_server(env)
    proc = subprocess.run(
        [
            ST,
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            "60",
            "--seed",
            "20261121",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "NO_PROXY": "*"},
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "passed" in proc.stdout
