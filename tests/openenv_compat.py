"""Drive OpenEnv's own validator against servers already running on loopback (no Docker engine needed).

``LoopbackProvider`` satisfies ``openenv.validation.providers.ValidationProvider``: its "build" is a no-op and
its "start" hands back the URL of a server the test already started, so ``run_validation`` exercises the real
runtime graders (observation schema, reward, state contract) over the real WebSocket.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPENENV_CLI = str(Path(sys.executable).with_name("openenv"))
RUNTIME_CHECKS = ("runtime.observation_schema", "runtime.reward_well_formed", "runtime.state_contract")


@dataclass
class _Subject:
    base_url: str

    def inspect(self) -> dict:
        return {"base_url": self.base_url}

    def logs(self, max_bytes: int = 65536) -> str:
        return ""

    def exec(self, argv: list[str], timeout_s: float) -> Any:
        raise NotImplementedError("exec is not a capability of the loopback provider")

    def stop(self) -> None:
        pass


class LoopbackProvider:
    name = "loopback"
    supported_network_modes = frozenset({"public"})

    def __init__(self, base_url: str) -> None:
        from openenv.validation.types import ProviderCapability

        self.capabilities = frozenset({ProviderCapability.IMAGE_BUILD})
        self.base_url = base_url

    def build(self, root: Path, execution: Any) -> str:
        return "sha256:" + hashlib.sha256(self.base_url.encode()).hexdigest()

    def start(self, spec: Any) -> _Subject:
        return _Subject(self.base_url)


def validate_url(base_url: str) -> tuple[int, dict]:
    """``openenv validate --url URL --json``: exit code and report."""
    proc = subprocess.run(
        [OPENENV_CLI, "validate", "--url", base_url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "*", "HOME": "/tmp"},
    )
    return proc.returncode, json.loads(proc.stdout)


def runtime_results(package_dir: Path, base_url: str) -> dict[str, str]:
    """Check id -> status from ``run_validation`` at runtime level through the loopback provider."""
    from openenv.validation.runner import run_validation
    from openenv.validation.types import Level

    report = run_validation(package_dir, max_level=Level.RUNTIME, provider=LoopbackProvider(base_url))
    data = json.loads(report.model_dump_json()) if hasattr(report, "model_dump_json") else report.to_dict()
    return {r["check_id"]: str(r["status"]).lower() for r in data["results"]}


def write_package(root: Path, name: str, actions: list[dict], reward_range: tuple[float, float] = (0.0, 1.0)) -> Path:
    """A minimal OpenEnv package (openenv.yaml + runtime plan) describing a server under test."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "validation").mkdir(exist_ok=True)
    (root / "Dockerfile").write_text("FROM scratch\n")
    (root / "openenv.yaml").write_text(
        f"""spec_version: 1
name: {name}
version: 0.1.0
type: space
runtime: fastapi
app: server.app:app
port: 8000
validation:
  reward:
    range: [{reward_range[0]}, {reward_range[1]}]
    floor_margin: 0.1
  resources:
    cpu: 1
    memory_mb: 512
    disk_mb: 256
    episode_timeout_s: 60
  capabilities:
    verifier:
      kind: reward_channel
  types:
    tags: [test]
  execution:
    kind: openenv_ws
    probe_path: validation/runtime.json
    dockerfile: Dockerfile
    context: .
"""
    )
    plan = {
        "plan_schema_version": "1",
        "reset": {"episode_id": "validate-ep-1", "seed": 7, "options": {}},
        "actions": actions,
    }
    (root / "validation" / "runtime.json").write_text(json.dumps(plan))
    return root
