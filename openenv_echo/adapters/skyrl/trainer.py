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

ECHO's rollout filters for the world term (``wm_filter_min_correct_pct``, ``keep_zero_variance_env=False``) are
decided **once per optimizer batch** by the core ``openenv_echo.objective.env_keep_mask`` (``skyrl_env_keep``), per
prompt group (SkyRL's ``uids``), from each response's reward (the sum of SkyRL's per-token rewards; correct =
reward > 0, SkyRL's pass@n rule). The mask reaches ``world_weights`` as ``EchoBatch.env_keep``: a dropped row has
no world term and ``N`` counts the kept rows only; its policy term is SkyRL's. The filter counts go to
``self.all_metrics`` as ``echo/filter/*``.

``build_models`` receives the worker classes SkyRL's entrypoint picked for ``trainer.strategy`` (FSDP or Megatron
Ray actor classes) and builds them with ``EchoPolicyWorkerMixin`` mixed into the policy worker
(``echo_policy_worker``), with the same Ray options; critic and reference workers are SkyRL's.
"""

from __future__ import annotations

from typing import Any

import torch
from skyrl.train.trainer import RayPPOTrainer

from ...objective import EchoConfig, RolloutStats, env_keep_mask
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


def response_rewards(rewards: list[Any]) -> torch.Tensor:
    """(n,) float64: each response's reward from SkyRL's ``rewards`` (a float per response, or per-token lists after
    ``postprocess_generator_output``, whose sum is the response's return)."""
    return torch.tensor(
        [float(sum(r)) if isinstance(r, list | tuple) else float(r) for r in rewards], dtype=torch.float64
    )


def skyrl_env_keep(cfg: EchoConfig, rewards: list[Any], uids: list[str]) -> tuple[torch.Tensor, dict[str, float]]:
    """The (n,) world-term keep mask of one optimizer batch and its filter counts: the core ``env_keep_mask`` with
    SkyRL's ``uids`` as prompt groups, ``rewards`` as the zero-variance rule's rewards and ``reward > 0`` as
    ``RolloutStats.correct`` (the only rollout statistic SkyRL's generator output carries; ``config_from_skyrl``
    refuses the others)."""
    if len(rewards) != len(uids):
        raise ValueError(f"{len(rewards)} rewards but {len(uids)} uids")
    r = response_rewards(rewards)
    index = {u: k for k, u in enumerate(dict.fromkeys(uids))}
    groups = torch.tensor([index[u] for u in uids], dtype=torch.long)
    stats = RolloutStats(correct=r > 0) if cfg.filters.min_correct_share is not None else RolloutStats()
    result = env_keep_mask(cfg, groups, len(uids), rewards=r, stats=stats)
    return result.keep, result.metrics


def mini_batch_world_weights(
    roles: list[list[int]],
    response_mask: torch.Tensor,
    boundaries: list[tuple[int, int]],
    cfg: EchoConfig,
    *,
    step: int = 0,
    env_keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(rows, response_len)`` world weights, each policy mini-batch ``[start, end)`` normalized on its own; rows
    outside every boundary (SkyRL's padding rows) are 0. A response SkyRL truncated keeps the roles of the tokens
    it kept (``response_mask`` gives each row's length). ``env_keep`` (one bool per row of ``roles``, from
    ``skyrl_env_keep`` over the optimizer batch): the rollout filters' verdict; each mini-batch takes its rows."""
    rows, width = response_mask.shape
    if env_keep is not None and tuple(env_keep.shape) != (len(roles),):
        raise ValueError(f"env_keep must have shape ({len(roles)},), got {tuple(env_keep.shape)}")
    lengths = response_mask.sum(dim=-1).long().tolist()
    out = torch.zeros((rows, width), dtype=torch.float32)
    for start, end in boundaries:
        part = []
        for i in range(start, end):
            if lengths[i] > len(roles[i]):
                raise ValueError(f"row {i}: {lengths[i]} response tokens but {len(roles[i])} roles")
            part.append(roles[i][: lengths[i]])
        keep = None if env_keep is None else env_keep[start:end]
        out[start:end] = world_weights(part, cfg, width=width, step=step, env_keep=keep)
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
        keep = None
        if cfg.filters.active or not cfg.keep_zero_variance_env:
            kept, metrics = skyrl_env_keep(cfg, list(generator_output["rewards"]), list(uids))
            self.all_metrics.update({f"echo/{k}": v for k, v in metrics.items()})
            keep = torch.cat([kept, torch.zeros(training_input.batch_size - n, dtype=torch.bool)])
        training_input[WORLD_WEIGHT_KEY] = mini_batch_world_weights(
            list(roles) + [[] for _ in range(training_input.batch_size - n)],
            training_input["response_mask"],
            boundaries,
            cfg,
            step=int(self.global_step),
            env_keep=keep,
        )
        return training_input


__all__ = ["EchoPPOTrainer", "echo_policy_worker", "mini_batch_world_weights", "response_rewards", "skyrl_env_keep"]
