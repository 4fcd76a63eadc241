"""SkyRL adapter (one folder): the world masks and loss with SkyRL's batch conventions, and SkyRL 0.4's seams.

``import openenv_echo.adapters.skyrl`` is pure torch (the names below, from ``aux_hooks``); the submodules that
import SkyRL 0.4 (Python >= 3.12, ``pip install openenv-echo[skyrl]``) are imported by name:

* ``.loss``      – ``register_echo_policy_loss`` (SkyRL's ``PolicyLossRegistry``), ``world_weights``,
  ``EchoPolicyWorkerMixin``: the seam SkyRL 0.4 runs
* ``.gym``       – ``OpenEnvTextEnv``: any server as a skyrl-gym text env, ``run_episodes``
* ``.config``    – ``EchoAlgorithmConfig`` / ``EchoSkyRLTrainConfig``, ``validate_echo_cfg``
* ``.generator`` – ``EchoGymGenerator``: SkyRL's generator with per-token roles
* ``.trainer``   – ``EchoPPOTrainer``: SkyRL's trainer with world weights per mini-batch
* ``.entry``     – SkyRL's entrypoint with ECHO (``python -m openenv_echo.adapters.skyrl.entry``, or SkyRL's
  ``trainer.override_entrypoint=openenv_echo.adapters.skyrl.entry``)
"""

from __future__ import annotations

from .aux_hooks import (
    BATCH_KEYS,
    GENERATOR_KEYS,
    add_world_masks,
    compute_aux_policy_loss,
    compute_world_loss,
    config_from_skyrl,
    get_aux_policy_loss_context,
    world_training_tensors,
)

__all__ = [
    "BATCH_KEYS",
    "GENERATOR_KEYS",
    "add_world_masks",
    "compute_aux_policy_loss",
    "compute_world_loss",
    "config_from_skyrl",
    "get_aux_policy_loss_context",
    "world_training_tensors",
]
