"""Trainer adapters for the ECHO objective, each behind its optional extra and imported lazily.

``import openenv_echo.adapters`` imports no trainer library. Import the one you use:

* ``openenv_echo.adapters.trl``     – ``EchoGRPOTrainer`` (``pip install openenv-echo[trl]``)
* ``openenv_echo.adapters.torchrl`` – ``EchoGRPOLoss`` (``[torchrl]``)
* ``openenv_echo.adapters.tinker``  – ``build_datums`` / ``echo_step`` / ``echo_custom_loss`` (``[tinker]``)
* ``openenv_echo.adapters.skyrl``   – ``compute_world_loss`` / ``add_world_masks`` (pure torch; SkyRL optional)
* ``openenv_echo.adapters.verifiers`` – ``EchoEnv``, a verifiers environment for prime-rl (``[verifiers]``, own venv)
* ``openenv_echo.adapters.prime_rl``  – token roles, the ``ce`` stream and the echo filter on verifiers traces
"""

from __future__ import annotations

import importlib
from types import ModuleType

ADAPTERS: dict[str, str] = {
    "trl": "openenv_echo.adapters.trl",
    "torchrl": "openenv_echo.adapters.torchrl",
    "tinker": "openenv_echo.adapters.tinker",
    "skyrl": "openenv_echo.adapters.skyrl",
    "verifiers": "openenv_echo.adapters.verifiers",
    "prime_rl": "openenv_echo.adapters.prime_rl",
}
_EXTRAS = {"trl": "trl", "torchrl": "torchrl", "tinker": "tinker", "skyrl": "skyrl", "verifiers": "verifiers"}


def load_adapter(name: str) -> ModuleType:
    """Import one adapter module by name, with a clear message when its trainer library is missing."""
    if name not in ADAPTERS:
        raise ValueError(f"unknown adapter {name!r}; known: {sorted(ADAPTERS)}")
    try:
        return importlib.import_module(ADAPTERS[name])
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"the {name} adapter needs its trainer library ({e.name}); install openenv-echo[{_EXTRAS.get(name, 'train')}]"
        ) from e


__all__ = ["ADAPTERS", "load_adapter"]
