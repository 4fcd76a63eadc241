"""The GPU check (``scripts/gpu/check_objective.py``) at toy size on CPU, on an interpreter where the project's server
dependencies (and pydantic) are hidden as if not installed; and its pydantic stand-in against the real pydantic."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from openenv_echo.objective import EchoConfig, conformance

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "gpu" / "check_objective.py"

# what a GPU machine with only torch + transformers lacks: the server's and the CLI's dependencies, and pydantic.
# They are hidden from the import system (and from importlib.metadata) exactly as if they were not installed.
HIDE = """
import json, runpy, sys
from importlib.machinery import PathFinder
from importlib.metadata import DistributionFinder

HIDDEN = {"fastapi", "uvicorn", "starlette", "httpx", "websockets", "pydantic", "pydantic_core", "typer", "rich",
          "prometheus_client", "re2", "docker", "openenv", "tinker", "trl", "torchrl"}

class Hidden:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.split(".")[0] in HIDDEN else PathFinder.find_spec(name, path, target)

    @classmethod
    def find_distributions(cls, context=DistributionFinder.Context()):
        name = (context.name or "").lower().replace("-", "_")
        return iter(()) if name in HIDDEN else PathFinder.find_distributions(context)

    @classmethod
    def invalidate_caches(cls):
        PathFinder.invalidate_caches()

sys.meta_path[:] = [Hidden if f is PathFinder else f for f in sys.meta_path]
script, *args = sys.argv[1:]
sys.argv = [script, *args]
code = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as exc:
    code = exc.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in HIDDEN)
print(json.dumps({"exit": code, "loaded": loaded, "pydantic": getattr(sys.modules.get("pydantic"), "VERSION", None)}))
"""


def _run(*args: str, hide: bool) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", HIDE, str(CHECK), *args] if hide else [sys.executable, str(CHECK), *args]
    # no PYTHONPATH: the script finds the objective from its own location, not from an install of the package
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=280, env=env, cwd=ROOT / "scripts", check=False)


def test_gpu_check_runs_on_torch_and_transformers_alone() -> None:
    proc = _run("--device", "cpu", "--tiny", hide=True)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["exit"] == 0, proc.stdout + proc.stderr
    assert summary["loaded"] == ["pydantic"] and summary["pydantic"] == "stand-in", summary  # only the stand-in
    out = proc.stdout
    assert "pydantic: stand-in" in out and f"objective from {ROOT / 'openenv_echo' / 'objective'}" in out
    assert "14/14 RFC 0004 cases" in out and "FAIL" not in out
    assert "verdict: 11/11 checks OK" in out
    for variant in ("vanilla", "echo", "echo_fused", "second_forward"):
        assert f"\n  {variant} " in out


def test_gpu_check_with_pydantic_installed_and_its_failures_exit_nonzero(tmp_path: Path) -> None:
    report = tmp_path / "checks.json"
    proc = _run("--device", "cpu", "--tiny", "--sections", "conformance,gradients", "--json", str(report), hide=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(report.read_text())
    assert doc["pydantic"] == "installed" and len(doc["checks"]) == 10 and all(c["ok"] for c in doc["checks"])
    grads = [c for c in doc["checks"] if c["check"].startswith("∂L/∂logits") and "bfloat16" in c["check"]]
    assert grads and all(0 < c["rel"] <= 8e-3 for c in grads)  # bf16 is measured, not trivially zero
    if not torch.cuda.is_available():  # without a GPU the default run says what to do instead
        no_cuda = _run("--device", "cuda", hide=False)
        assert no_cuda.returncode == 2 and "--device cpu --tiny" in no_cuda.stderr


# -- the stand-in against the real pydantic ----------------------------------------------------------------------
def _standin_config_module() -> types.ModuleType:
    """``objective/_config.py`` executed with the stand-in as ``pydantic`` (a second copy of the module)."""
    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    try:
        standalone = importlib.import_module("standalone")
    finally:
        sys.path.pop(0)
    real = sys.modules["pydantic"]
    spec = importlib.util.spec_from_file_location(
        "openenv_echo.objective._config_standin", ROOT / "openenv_echo" / "objective" / "_config.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pydantic"] = standalone._pydantic_standin()
    sys.modules[spec.name] = mod  # stays: the stand-in resolves the annotations in the module's namespace
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules["pydantic"] = real
    return mod


VALID: list[dict[str, Any]] = [case.config for case in conformance.CASES] + [
    {"world_model_coeff": 0.1, "schedule": {"kind": "linear_decay", "end_coeff": 0.0, "decay_steps": 10}},
    {"world_model_coeff": 0.1, "schedule": {"kind": "step", "boundaries": [5], "values": [0.2]}},
    {"world_model_coeff": 1, "verifier_free": True, "env_temperature": "rollout"},
]
INVALID: list[dict[str, Any]] = [
    {"world_model_coeff": math.nan},
    {"world_model_coeff": 0.1, "role_coeffs": {"action": 1.0}},
    {"world_model_coeff": 0.1, "role_coeffs": {"warning": 1.0}},  # env_only does not select warning
    {"normalization": "constant"},
    {"verifier_free": True},
    {"world_loss_target": "all"},
    {"schedule": {"kind": "step"}},
    {"no_such_field": 1},
]


def test_the_pydantic_standin_builds_the_same_configs() -> None:
    standin = _standin_config_module().EchoConfig
    for raw in VALID:
        real, ours = EchoConfig(**raw), standin(**raw)
        for name in EchoConfig.model_fields:
            a, b = getattr(real, name), getattr(ours, name)
            if hasattr(a, "model_fields"):  # nested models: compare their fields
                assert all(getattr(a, f) == getattr(b, f) for f in type(a).model_fields), (raw, name)
            else:
                assert a == b and type(a) is type(b), (raw, name, a, b)
        assert [real.coeff_at(s) for s in (0, 5, 20)] == [ours.coeff_at(s) for s in (0, 5, 20)]
        assert real.target_roles == ours.target_roles
        assert all(type(k) is type(r) for k, r in zip(ours.role_coeffs, real.role_coeffs))  # Role keys, as pydantic
    for raw in INVALID:
        with pytest.raises(ValueError):
            EchoConfig(**raw)
        with pytest.raises(ValueError):
            standin(**raw)
    frozen = standin(world_model_coeff=0.1)
    with pytest.raises(TypeError):
        frozen.world_model_coeff = 0.2
