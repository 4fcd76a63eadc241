"""The SkyRL entrypoint with ECHO: SkyRL 0.4's ``main_base`` with the ECHO generator, trainer and policy worker.

Run it with SkyRL's own CLI overrides, directly or through SkyRL's ``override_entrypoint``::

    python -m openenv_echo.adapters.skyrl.entry trainer.algorithm.policy_loss_type=echo_regular \\
        trainer.algorithm.world_model_coeff=0.05 environment.skyrl_gym.openenv_echo.base_url=http://... ...
    python -m skyrl.train.entrypoints.main_base \\
        trainer.override_entrypoint=openenv_echo.adapters.skyrl.entry trainer.algorithm.world_model_coeff=0.05 ...

``main`` parses the overrides into ``EchoSkyRLTrainConfig`` (``openenv_echo.adapters.skyrl.config``), runs
``validate_echo_cfg`` (which registers the ``echo_<base>`` loss before Ray starts, so ``initialize_ray``'s
``sync_registries`` ships it), starts Ray as SkyRL does and runs ``EchoPPOExp`` in a Ray task, as SkyRL's
``skyrl_entrypoint`` runs ``BasePPOExp``. ``EchoPPOExp`` is SkyRL's ``BasePPOExp`` with two of its hooks
overridden: ``get_generator`` (``EchoGymGenerator``: SkyRL's generator, per-token roles in its output) and
``get_trainer`` (``EchoPPOTrainer``: SkyRL's trainer, world weights per policy mini-batch, and the policy worker
SkyRL picks for ``trainer.strategy`` built with ``EchoPolicyWorkerMixin``). Everything else (tokenizer, datasets,
inference engines, placement, the training loop ``RayPPOTrainer.train``) is SkyRL's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import ray
from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
from skyrl.train.entrypoints.main_base import BasePPOExp

from .config import (
    EchoAlgorithmConfig,
    EchoSkyRLTrainConfig,
    EchoTrainerConfig,
    OpenEnvEchoEnvConfig,
    echo_config,
    validate_echo_cfg,
)
from .generator import EchoGymGenerator
from .gym import register_env
from .trainer import EchoPPOTrainer


class EchoPPOExp(BasePPOExp):  # type: ignore[misc]
    """SkyRL's ``BasePPOExp`` with ECHO's generator and trainer (see the module docstring)."""

    def __init__(self, cfg: Any) -> None:
        validate_echo_cfg(cfg)  # in this process too: registers the loss and declares it in SkyRL's loss sets
        register_env()
        super().__init__(cfg)

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> EchoGymGenerator:
        if cfg.generator.vision_language_generator:
            raise ValueError("ECHO's generator is text only (generator.vision_language_generator=false)")
        return EchoGymGenerator(
            generator_cfg=cfg.generator,
            skyrl_gym_cfg=cfg.environment.skyrl_gym,
            inference_engine_client=inference_engine_client,
            tokenizer=tokenizer,
            policy_model_name=resolve_policy_model_name(cfg),
        )

    def get_trainer(
        self,
        cfg: Any,
        tracker: Any,
        tokenizer: Any,
        train_dataset: Any,
        eval_dataset: Any,
        inference_engine_client: Any,
        generator: Any,
        colocate_pg: Any,
    ) -> EchoPPOTrainer:
        return EchoPPOTrainer(
            cfg=cfg,
            tracker=tracker,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client,
            generator=generator,
            colocate_pg=colocate_pg,
        )


@ray.remote(num_cpus=1)
def echo_entrypoint(cfg: Any) -> None:
    """SkyRL's ``skyrl_entrypoint`` with ``EchoPPOExp``: the training loop runs in a Ray task, not on the head."""
    EchoPPOExp(cfg).run()


def parse_cfg(argv: Sequence[str]) -> Any:
    """``EchoSkyRLTrainConfig`` from SkyRL CLI overrides, validated (SkyRL's checks and ECHO's)."""
    cfg = EchoSkyRLTrainConfig.from_cli_overrides(list(argv))
    validate_echo_cfg(cfg)
    return cfg


def run(cfg: Any) -> None:
    """Start Ray as SkyRL's entrypoint does (``initialize_ray``: ``ray.init``, then ``sync_registries``) and train
    in ``echo_entrypoint``."""
    from skyrl.train.utils.utils import initialize_ray

    initialize_ray(cfg)
    ray.get(echo_entrypoint.remote(cfg))


def main(argv: Sequence[str] | None = None) -> None:
    """Train with ECHO through SkyRL's entrypoint (``argv``: SkyRL overrides; default ``sys.argv[1:]``, which is
    also what SkyRL's ``main_base.main`` leaves when it dispatches on ``trainer.override_entrypoint``)."""
    run(parse_cfg(sys.argv[1:] if argv is None else argv))


__all__ = [
    "EchoAlgorithmConfig",
    "EchoPPOExp",
    "EchoSkyRLTrainConfig",
    "EchoTrainerConfig",
    "OpenEnvEchoEnvConfig",
    "echo_config",
    "echo_entrypoint",
    "main",
    "parse_cfg",
    "run",
    "validate_echo_cfg",
]

if __name__ == "__main__":  # run as `python -m`: use the importable module, so Ray pickles its names by reference
    from openenv_echo.adapters.skyrl import entry as skyrl_entry

    skyrl_entry.main()
