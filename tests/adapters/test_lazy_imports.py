"""Importing the package, the objective or the adapters package never imports a trainer library."""

from __future__ import annotations

import subprocess
import sys

import pytest

TRAINERS = ("trl", "torchrl", "tinker", "skyrl_train", "skyrl", "ray", "tensordict", "verifiers", "renderers")

CHECK = f"""
import sys
import openenv_echo, openenv_echo.objective, openenv_echo.adapters, openenv_echo.adapters.skyrl
import openenv_echo.adapters.prime_rl, openenv_echo.testing.generate_server
loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({TRAINERS!r}))
assert not loaded, loaded
heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {{"transformers", "datasets", "accelerate"}})
assert not heavy, heavy
print("ok")
"""


def test_core_and_adapters_package_import_no_trainer() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_load_adapter_names_and_errors() -> None:
    from openenv_echo.adapters import ADAPTERS, load_adapter

    assert set(ADAPTERS) == {
        "trl",
        "torchrl",
        "tinker",
        "skyrl",
        "skyrl_loss",
        "skyrl_cpu",
        "skyrl_gym",
        "skyrl_config",
        "skyrl_entry",
        "skyrl_generator",
        "skyrl_trainer",
        "tinker_server",
        "verifiers",
        "prime_rl",
    }
    with pytest.raises(ValueError, match="unknown adapter"):
        load_adapter("verl")
    try:
        import skyrl
    except ImportError:  # this venv (Python 3.11): the SkyRL 0.4 adapters say what to install
        with pytest.raises(ImportError, match=r"openenv-echo\[skyrl\] \(Python >= 3.12\)"):
            load_adapter("skyrl_loss")
    import openenv_echo.adapters.skyrl as skyrl

    assert load_adapter("skyrl") is skyrl  # the named module itself: the SkyRL folder, pure
    assert skyrl.ROLE_KEY == "echo_response_role_ids"  # the generator-output key converters write without SkyRL
    assert callable(load_adapter("prime_rl").keep_world_targets)  # prime-rl's side imports without verifiers


def test_the_verifiers_adapter_names_its_extra_where_verifiers_is_missing() -> None:
    import importlib.util

    from openenv_echo.adapters import load_adapter

    if importlib.util.find_spec("verifiers") is not None:
        pytest.skip("verifiers is installed here (.venv-verifiers): tests/verifiers covers the adapter")
    with pytest.raises(
        ImportError, match=r"needs its trainer library \(verifiers\); install openenv-echo\[verifiers\]"
    ):
        load_adapter("verifiers")


RAY_PROVIDER = """
import sys
import openenv_echo, openenv_echo.providers
from openenv_echo.providers import RayProvider
from openenv_echo import RayProvider as top
import openenv_echo.providers.ray as module
assert RayProvider is top is module.RayProvider
assert "RayProvider" in openenv_echo.__all__ and "RayProvider" in openenv_echo.providers.__all__
assert "ray" not in sys.modules, "importing RayProvider must not import Ray"
print("ok")
"""


def test_ray_provider_is_exported_lazily_beside_the_others() -> None:
    out = subprocess.run([sys.executable, "-c", RAY_PROVIDER], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
