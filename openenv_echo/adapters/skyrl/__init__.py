"""SkyRL adapter (one folder): ECHO as a policy loss registered in SkyRL 0.4, fed by SkyRL's own generator and trainer.

One seam: ``.loss``'s ``echo_<base>`` policy loss adds ``-Σ w_t · log p_t`` to SkyRL's loss inside its micro-batch
step, with the world weights ``w`` that ``.trainer`` computes per mini-batch from the per-token roles ``.generator``
puts in the generator output under ``ROLE_KEY``. ``import openenv_echo.adapters.skyrl`` is pure (it holds only
``ROLE_KEY``, so converters can write SkyRL-shaped output without SkyRL); the submodules import SkyRL 0.4
(Python >= 3.12, ``pip install openenv-echo[skyrl]``) and are imported by name:

* ``.loss``      – ``register_echo_policy_loss`` (SkyRL's ``PolicyLossRegistry``), ``world_weights``,
  ``EchoPolicyWorkerMixin``
* ``.gym``       – ``OpenEnvTextEnv``: any server as a skyrl-gym text env, ``run_episodes``
* ``.config``    – ``EchoAlgorithmConfig`` / ``EchoSkyRLTrainConfig``, ``validate_echo_cfg``, ``config_from_skyrl``
* ``.generator`` – ``EchoGymGenerator``: SkyRL's generator with per-token roles
* ``.trainer``   – ``EchoPPOTrainer``: SkyRL's trainer with world weights per mini-batch
* ``.entry``     – SkyRL's entrypoint with ECHO (``python -m openenv_echo.adapters.skyrl.entry``, or SkyRL's
  ``trainer.override_entrypoint=openenv_echo.adapters.skyrl.entry``)

When SkyRL ships an auxiliary-loss hook (its PR #1716, ``compute_aux_policy_loss``), it is a one-function wrapper
of ``.loss``: the hook returns ``-(world_weights · action_log_probs).sum()`` for the micro-batch's rows.
"""

from __future__ import annotations

ROLE_KEY = "echo_response_role_ids"
"""``GeneratorOutput`` key: per response, the role code of each response token (aligned with ``response_ids``);
``EchoGymGenerator`` and ``openenv_echo.adapters.converters.to_skyrl`` write it, ``EchoPPOTrainer`` reads it."""

__all__ = ["ROLE_KEY"]
