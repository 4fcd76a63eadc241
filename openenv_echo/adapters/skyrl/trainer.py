"""SkyRL's own trainer with ECHO's world weights: ``EchoPPOTrainer(RayPPOTrainer)``.

``RayPPOTrainer.convert_to_training_input`` turns the generator's lists into SkyRL's training batch (right-aligned
response tensors, the policy mini-batch boundaries, dp padding). The subclass runs it unchanged and adds
``openenv_echo.adapters.skyrl.loss.WORLD_WEIGHT_KEY``: ``λ(step)·c_role/N`` per response token, computed by
``openenv_echo.adapters.skyrl.loss.world_weights`` **once per policy mini-batch** (SkyRL folds its own loss
reduction per mini-batch, so ``N`` counts that mini-batch's selected tokens), from the roles
``openenv_echo.adapters.skyrl.generator.EchoGymGenerator`` put in the generator output. The rows SkyRL adds
when it pads the batch to the data-parallel size copy row 0 for every key but ``loss_mask``; their world weights
are set to 0 here, so no row is counted twice. ECHO's settings come from ``cfg.trainer.algorithm``
(``openenv_echo.adapters.skyrl.config.EchoAlgorithmConfig``).

``build_models`` receives the worker classes SkyRL's entrypoint picked for ``trainer.strategy`` (FSDP or Megatron
Ray actor classes) and builds them with ``EchoPolicyWorkerMixin`` mixed into the policy worker
(``echo_policy_worker``), with the same Ray options; critic and reference workers are SkyRL's.
"""

from __future__ import annotations

from typing import Any

import torch
from skyrl.train.trainer import RayPPOTrainer

from ...objective import EchoConfig
from .config import echo_config
from .generator import ROLE_KEY
from .loss import WORLD_WEIGHT_KEY, EchoPolicyWorkerMixin, world_weights


def echo_policy_worker(actor_cls: Any) -> Any:
    """SkyRL's policy worker Ray actor class (``ray.remote(num_gpus=1)(FSDPPolicyWorkerBase)``, or Megatron's) with
    ``EchoPolicyWorkerMixin`` before its class, under the same Ray options. A plain class gets the mixin only."""
    import ray

    meta = getattr(actor_cls, "__ray_metadata__", None)
    if meta is None:
        base = actor_cls
    else:  # Ray keeps the decorated class as `__ray_actor_class__` of its modified class
        base = meta.modified_class.__ray_actor_class__
    if issubclass(base, EchoPolicyWorkerMixin):
        return actor_cls
    cls = type(f"Echo{base.__name__}", (EchoPolicyWorkerMixin, base), {"__module__": __name__})
    return cls if meta is None else ray.remote(**dict(actor_cls._default_options))(cls)


def mini_batch_world_weights(
    roles: list[list[int]],
    response_mask: torch.Tensor,
    boundaries: list[tuple[int, int]],
    cfg: EchoConfig,
    *,
    step: int = 0,
) -> torch.Tensor:
    """``(rows, response_len)`` world weights, each policy mini-batch ``[start, end)`` normalized on its own; rows
    outside every boundary (SkyRL's padding rows) are 0. A response SkyRL truncated keeps the roles of the tokens
    it kept (``response_mask`` gives each row's length)."""
    rows, width = response_mask.shape
    lengths = response_mask.sum(dim=-1).long().tolist()
    out = torch.zeros((rows, width), dtype=torch.float32)
    for start, end in boundaries:
        part = []
        for i in range(start, end):
            if lengths[i] > len(roles[i]):
                raise ValueError(f"row {i}: {lengths[i]} response tokens but {len(roles[i])} roles")
            part.append(roles[i][: lengths[i]])
        out[start:end] = world_weights(part, cfg, width=width, step=step)
    return out


class EchoPPOTrainer(RayPPOTrainer):  # type: ignore[misc]
    """``RayPPOTrainer`` whose training batches carry the ECHO world weights (see the module docstring)."""

    def build_models(self, PolicyWorker: Any, CriticWorker: Any, RefWorker: Any) -> None:
        super().build_models(echo_policy_worker(PolicyWorker), CriticWorker, RefWorker)

    def convert_to_training_input(self, generator_output: Any, uids: list[str]) -> Any:
        training_input = super().convert_to_training_input(generator_output, uids)
        roles = generator_output.get(ROLE_KEY)
        if roles is None:
            raise KeyError(f"the generator output has no {ROLE_KEY!r}: use EchoGymGenerator")
        n = len(generator_output["response_ids"])
        if len(roles) != n:
            raise ValueError(f"{n} responses but {len(roles)} role rows")
        boundaries = training_input.metadata["policy_mini_batch_boundaries"]
        if boundaries and boundaries[-1][1] > n:
            raise ValueError("a policy mini-batch reaches past the generated rows")
        cfg = echo_config(self.cfg.trainer.algorithm)
        training_input[WORLD_WEIGHT_KEY] = mini_batch_world_weights(
            list(roles) + [[] for _ in range(training_input.batch_size - n)],
            training_input["response_mask"],
            boundaries,
            cfg,
            step=int(self.global_step),
        )
        return training_input


__all__ = ["EchoPPOTrainer", "echo_policy_worker", "mini_batch_world_weights"]
