"""Trainer adapters for the ECHO objective, each behind its optional extra and imported lazily.

``import openenv_echo.adapters`` imports no trainer library. Import the one you use:

* ``openenv_echo.adapters.trl``     – ``EchoGRPOTrainer`` (``pip install openenv-echo[trl]``)
* ``openenv_echo.adapters.torchrl`` – ``EchoGRPOLoss`` (``[torchrl]``)
* ``openenv_echo.adapters.tinker``  – ``build_datums`` / ``echo_step`` / ``echo_custom_loss`` (``[tinker]``)
* ``openenv_echo.adapters.skyrl``   – the SkyRL folder below; the package itself holds only ``ROLE_KEY`` (no SkyRL import)
* ``openenv_echo.adapters.verifiers`` – ``EchoEnv``, a verifiers environment for prime-rl (``[verifiers]``, own venv)
* ``openenv_echo.adapters.prime_rl``  – token roles, the ``ce`` stream and the echo filter on verifiers traces

Python >= 3.12 with ``pip install openenv-echo[skyrl]`` (SkyRL 0.4; ``make setup-trainers`` builds it), in the
SkyRL folder (one seam: a policy loss registered in SkyRL, its world weights from the generator's per-token roles):

* ``openenv_echo.adapters.skyrl.loss``      – ``register_echo_policy_loss`` (SkyRL's ``PolicyLossRegistry``),
  ``world_weights``, ``EchoPolicyWorkerMixin``
* ``openenv_echo.adapters.skyrl.gym``       – ``OpenEnvTextEnv``: any server as a skyrl-gym text env, ``run_episodes``
* ``openenv_echo.adapters.skyrl.config``    – ``EchoAlgorithmConfig`` / ``EchoSkyRLTrainConfig``: λ, the role
  coefficients and the env server as SkyRL config overrides, ``validate_echo_cfg``, ``config_from_skyrl``
* ``openenv_echo.adapters.skyrl.entry``     – SkyRL's entrypoint with ECHO (``python -m`` it, or SkyRL's
  ``trainer.override_entrypoint``): ``main``, ``EchoPPOExp``
* ``openenv_echo.adapters.skyrl.generator`` – ``EchoGymGenerator``: SkyRL's generator with per-token roles
* ``openenv_echo.adapters.skyrl.trainer``   – ``EchoPPOTrainer``: SkyRL's trainer with world weights per mini-batch

``load_adapter`` also knows ``skyrl_cpu`` and ``tinker_server``, CPU stand-ins that live in ``openenv_echo.testing``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ADAPTERS: dict[str, str] = {
    "trl": "openenv_echo.adapters.trl",
    "torchrl": "openenv_echo.adapters.torchrl",
    "tinker": "openenv_echo.adapters.tinker",
    "skyrl": "openenv_echo.adapters.skyrl",
    "skyrl_loss": "openenv_echo.adapters.skyrl.loss",
    "skyrl_cpu": "openenv_echo.testing.skyrl_cpu",
    "skyrl_gym": "openenv_echo.adapters.skyrl.gym",
    "skyrl_config": "openenv_echo.adapters.skyrl.config",
    "skyrl_entry": "openenv_echo.adapters.skyrl.entry",
    "skyrl_generator": "openenv_echo.adapters.skyrl.generator",
    "skyrl_trainer": "openenv_echo.adapters.skyrl.trainer",
    "tinker_server": "openenv_echo.testing.tinker_server",
    "verifiers": "openenv_echo.adapters.verifiers",
    "prime_rl": "openenv_echo.adapters.prime_rl",
}
_EXTRAS = {"trl": "trl", "torchrl": "torchrl", "tinker": "tinker", "skyrl": "train", "verifiers": "verifiers"}
_EXTRAS |= {"prime_rl": "train"} | dict.fromkeys(
    (
        "skyrl_loss",
        "skyrl_cpu",
        "skyrl_gym",
        "skyrl_config",
        "skyrl_entry",
        "skyrl_generator",
        "skyrl_trainer",
        "tinker_server",
    ),
    "skyrl",
)


def load_adapter(name: str) -> ModuleType:
    """Import one adapter module by name, with a clear message when its trainer library is missing."""
    if name not in ADAPTERS:
        raise ValueError(f"unknown adapter {name!r}; known: {sorted(ADAPTERS)}")
    try:
        return importlib.import_module(ADAPTERS[name])
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"the {name} adapter needs its trainer library ({e.name}); install openenv-echo[{_EXTRAS[name]}]"
            + (" (Python >= 3.12)" if _EXTRAS[name] == "skyrl" else "")
        ) from e


__all__ = ["ADAPTERS", "load_adapter"]
