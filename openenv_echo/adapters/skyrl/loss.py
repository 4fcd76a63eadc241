"""ECHO inside SkyRL's own loss path: a policy loss registered in SkyRL's ``PolicyLossRegistry``.

For a SkyRL user it is one line before the trainer starts, then a config value::

    from openenv_echo.adapters.skyrl.loss import register_echo_policy_loss
    register_echo_policy_loss("regular")          # registers "echo_regular"
    # trainer.algorithm.policy_loss_type = "echo_regular"

``echo_<base>`` calls SkyRL's registered ``<base>`` loss unchanged (same arguments, SkyRL's ``AlgorithmConfig``
with ``policy_loss_type=<base>``) and adds the world-model term ``-Σ w_t · log p_t`` over the micro-batch, where
``w`` holds ``λ · c_role / N`` on the selected observation tokens (``world_weights``, from the project's core
``openenv_echo.objective.token_weights``). SkyRL 0.4 sums pre-scaled per-token losses (the reduction is
folded into the advantages), so the world term is a pre-scaled sum too. When every weight is 0 (λ = 0) nothing
is added: the loss and its gradient are SkyRL's own, bit for bit.

SkyRL's loss signature carries no per-token roles (``loss_mask`` is 0 on observations *and* padding), so the
weights reach the loss through a context that ``EchoPolicyWorkerMixin`` sets for each micro-batch from the
training batch's ``WORLD_WEIGHT_KEY`` tensor. Mix it into SkyRL's policy worker (``class
EchoFSDPPolicyWorker(EchoPolicyWorkerMixin, FSDPPolicyWorkerBase)``); the trainer adds the key
(``openenv_echo.adapters.skyrl.trainer.EchoPPOTrainer``). Without weights the ECHO loss refuses to run
(never a silent λ = 0). The loss pickles by reference, so it survives SkyRL's registry actor and
``sync_registries()`` into Ray workers (``EchoPolicyLoss``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

from ...objective import Denominators, EchoBatch, EchoConfig, token_weights
from ...roles import PAD_ROLE_CODE

WORLD_WEIGHT_KEY = "echo_world_weight"
"""Training-batch key of the (B, response_len) world weights, right-aligned like SkyRL's response tensors."""

_WORLD: ContextVar[torch.Tensor | None] = ContextVar("echo_world_weight", default=None)


@contextmanager
def world_weight_context(weights: torch.Tensor) -> Iterator[None]:
    """Make ``weights`` (B, response_len) the world weights of the ECHO losses called inside the block."""
    token = _WORLD.set(weights)
    try:
        yield
    finally:
        _WORLD.reset(token)


def world_weights(
    response_role_ids: Sequence[Sequence[int]],
    cfg: EchoConfig,
    *,
    width: int | None = None,
    step: int = 0,
    obs_count: Sequence[int] | None = None,
    env_keep: Sequence[bool] | torch.Tensor | None = None,
    denominators: Denominators | None = None,
) -> torch.Tensor:
    """``λ · c_role / N`` per response token, (B, width) float32, right-aligned (SkyRL 0.4's response layout:
    a response's tokens occupy the last ``len`` positions). ``response_role_ids[i][j]``: role code of response
    token j (its first token is a target, predicted by the prompt). ``env_keep`` (B,): rows whose world term the
    rollout filters keep (``openenv_echo.objective.env_keep_mask``; default all): a dropped row gets weight 0 and
    ``N`` counts the kept rows only (``EchoBatch.env_keep``). ``denominators``: the mini-batch's global counts
    when it is split over several calls (default: these rows are the whole optimizer batch)."""
    n = len(response_role_ids)
    w = width if width is not None else max((len(r) for r in response_role_ids), default=0)
    roles = torch.full((n, w), PAD_ROLE_CODE, dtype=torch.long)
    for i, r in enumerate(response_role_ids):
        if len(r) > w:
            raise ValueError(f"response {i} has {len(r)} tokens, more than width={w}")
        if r:
            roles[i, w - len(r) :] = torch.as_tensor([int(x) for x in r], dtype=torch.long)
    obs = None if obs_count is None else torch.as_tensor(list(obs_count), dtype=torch.float64)
    keep = None if env_keep is None else torch.as_tensor(env_keep, dtype=torch.bool).reshape(-1)
    batch = EchoBatch(roles, obs_count=obs, env_keep=keep, includes_sequence_start=False)
    tw = token_weights(batch, cfg, step=step, denominators=denominators)
    return tw.world.to(torch.float32)


WORLD_LOSS_METRIC = "echo/world_loss"
"""The registered loss's metric: ``λ·L_world`` of the micro-batch (RFC 0004 §6's ``echo/world_loss``); SkyRL logs it
as ``loss_metrics/echo/world_loss``, summed over the mini-batch's micro-batches."""


class EchoPolicyLoss:
    """SkyRL's policy loss ``base`` plus the world-model term, with SkyRL's policy-loss signature.

    A module-level class whose only state is ``base``: cloudpickle (SkyRL's registries ship every registered loss
    to a named Ray actor, and workers load it from there) pickles it *by reference*, so the copy a Ray worker runs
    is this class in that worker's import of this module, reading the same ``world_weight_context`` that
    ``EchoPolicyWorkerMixin`` sets there. A closure would be pickled by value and read a context nobody sets.
    """

    def __init__(self, base: str) -> None:
        self.base = base
        self.__name__ = f"echo_{base}_policy_loss"

    def __reduce__(self) -> tuple[type[EchoPolicyLoss], tuple[str]]:
        return (EchoPolicyLoss, (self.base,))

    def __call__(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        config: Any,
        loss_mask: torch.Tensor | None = None,
        rollout_logprobs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        base = self.base
        weights = _WORLD.get()
        if weights is None:
            raise RuntimeError(
                f"echo_{base} was called without world weights: mix EchoPolicyWorkerMixin into the policy worker and "
                f"put {WORLD_WEIGHT_KEY!r} into the training batch (or call it inside world_weight_context)"
            )
        if tuple(weights.shape) != tuple(log_probs.shape):
            raise ValueError(f"world weights {tuple(weights.shape)} do not match log_probs {tuple(log_probs.shape)}")
        base_config = config
        if getattr(config, "policy_loss_type", base) != base:
            base_config = dataclasses.replace(config, policy_loss_type=base)
        loss, metrics = PolicyLossRegistry.get(base)(
            log_probs, old_log_probs, advantages, base_config, loss_mask=loss_mask, rollout_logprobs=rollout_logprobs
        )
        metrics = dict(metrics)
        if bool(weights.any()):
            world = -(weights.to(device=log_probs.device, dtype=log_probs.dtype) * log_probs).sum()
            loss = loss + world
            metrics[WORLD_LOSS_METRIC] = float(world.detach())
        else:
            metrics[WORLD_LOSS_METRIC] = 0.0
        return loss, metrics


def echo_policy_loss(base: str) -> EchoPolicyLoss:
    """SkyRL's policy loss ``base`` plus the world-model term (an ``EchoPolicyLoss``)."""
    return EchoPolicyLoss(base)


def base_loss(name: str) -> str:
    """The SkyRL loss an ECHO loss wraps (``echo_regular`` → ``regular``); any other name is returned as is."""
    loss = PolicyLossRegistry.get(name) if name in PolicyLossRegistry.list_available() else None
    return loss.base if isinstance(loss, EchoPolicyLoss) else name


_LOSS_SETS = ("LOSSES_WITH_OLD_LOGPROBS", "LOSSES_WITHOUT_OLD_LOGPROBS")
_LOSS_SET_READERS = (
    "skyrl.backends.skyrl_train.utils.ppo_utils",
    "skyrl.train.trainer",
    "skyrl.train.fully_async_trainer",
)


def declare_echo_loss(name: str, base: str) -> None:
    """Put ``name`` into each of SkyRL's name-keyed loss sets that holds ``base`` (``LOSSES_WITH_OLD_LOGPROBS``,
    read by the fully-async trainer's check; ``LOSSES_WITHOUT_OLD_LOGPROBS``, read by ``_skip_policy_forward``), in
    ``ppo_utils`` and in every loaded module that imported them by name, so SkyRL's checks treat ``name`` as they
    treat ``base``. Checks written as literal lists (``validate_cfg``'s clip_cov/kl_cov) are run on the base loss
    by ``openenv_echo.adapters.skyrl.config.validate_echo_cfg``."""
    import sys

    from skyrl.backends.skyrl_train.utils import ppo_utils

    for attr in _LOSS_SETS:
        current = getattr(ppo_utils, attr)
        if base not in current or name in current:
            continue
        extended = frozenset({*current, name})
        for module_name in _LOSS_SET_READERS:  # ppo_utils itself, and every loaded module that imported the set
            module = sys.modules.get(module_name)
            if module is not None and getattr(module, attr, None) is current:
                setattr(module, attr, extended)


def register_echo_policy_loss(base: str = "regular", name: str | None = None) -> str:
    """Register ``echo_<base>`` (or ``name``) in SkyRL's ``PolicyLossRegistry`` and declare it in SkyRL's loss sets
    (``declare_echo_loss``); returns the name to put in ``trainer.algorithm.policy_loss_type``. Idempotent;
    ``base`` must be a registered SkyRL loss. With Ray up, SkyRL ships it to its registry actor at once; otherwise
    ``sync_registries()`` (``initialize_ray`` calls it) does."""
    name = name or f"echo_{base}"
    available = PolicyLossRegistry.list_available()
    if base not in available:
        raise ValueError(f"SkyRL has no policy loss {base!r}; available: {sorted(available)}")
    if name not in available:
        PolicyLossRegistry.register(name, EchoPolicyLoss(base))
    declare_echo_loss(name, base)
    return name


class EchoPolicyWorkerMixin:
    """Mix into a SkyRL policy worker (before it in the bases): each micro-batch's ECHO loss call sees the rows of
    the training batch's ``WORLD_WEIGHT_KEY`` that belong to that micro-batch. A batch without the key runs
    SkyRL's step unchanged. Needs sample-based micro-batching (``max_tokens_per_microbatch <= 0``): token-based
    packing reorders rows, so the mixin refuses it rather than guess."""

    _echo_rows: tuple[torch.Tensor, torch.Tensor, int] | None = None

    def forward_backward(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        weights = data.get(WORLD_WEIGHT_KEY) if hasattr(data, "get") else None
        if weights is None:
            return super().forward_backward(data, *args, **kwargs)  # type: ignore[misc]
        if getattr(self.cfg, "max_tokens_per_microbatch", 0) > 0:  # type: ignore[attr-defined]
            raise NotImplementedError("ECHO weights need sample-based micro-batching (max_tokens_per_microbatch <= 0)")
        if tuple(weights.shape) != tuple(data["loss_mask"].shape):
            raise ValueError(f"{WORLD_WEIGHT_KEY} {tuple(weights.shape)} != loss_mask {tuple(data['loss_mask'].shape)}")
        self._echo_rows = (data["sequences"], weights, 0)
        try:
            return super().forward_backward(data, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._echo_rows = None

    def _forward_backward_micro(self, experience: Any, *args: Any, **kwargs: Any) -> Any:
        if self._echo_rows is None:
            return super()._forward_backward_micro(experience, *args, **kwargs)  # type: ignore[misc]
        sequences, weights, start = self._echo_rows
        n = int(experience.sequences.shape[0])
        if not torch.equal(experience.sequences.to(sequences.device), sequences[start : start + n]):
            raise RuntimeError("a micro-batch does not hold the next rows of the training batch; ECHO weights refused")
        self._echo_rows = (sequences, weights, start + n)
        with world_weight_context(weights[start : start + n]):
            return super()._forward_backward_micro(experience, *args, **kwargs)  # type: ignore[misc]


__all__ = [
    "WORLD_LOSS_METRIC",
    "WORLD_WEIGHT_KEY",
    "EchoPolicyLoss",
    "EchoPolicyWorkerMixin",
    "base_loss",
    "declare_echo_loss",
    "echo_policy_loss",
    "register_echo_policy_loss",
    "world_weight_context",
    "world_weights",
]
