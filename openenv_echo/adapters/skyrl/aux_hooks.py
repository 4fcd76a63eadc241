"""SkyRL adapter: a pure world-loss function with SkyRL's batch conventions, and the generator-side masks.

Pure torch; SkyRL itself is never imported here. It follows the hook shape of SkyRL PR #1716 ("Add trainer hooks
for auxiliary policy losses", the ECHO authors' upstreaming): a policy worker's
``get_aux_policy_loss_context(data)`` and ``compute_aux_policy_loss(*, action_log_probs, policy_loss, experience,
loss_config, microbatch_weight, grad_sum_correction_factor, aux_policy_loss_context)``, with the masks carried as
``Experience.extras``. Released SkyRL (0.3.1/0.4.0) has no such hook: there a worker subclass must add
``compute_world_loss`` to the loss inside its micro-batch step. Either way the worker step needs CUDA + Ray.

Conventions (SkyRL 0.4's ``convert_prompts_responses_to_batch_tensors``, the same as
``openenv_echo.adapters.skyrl.loss``): per-response lists are aligned with ``response_ids``; batch tensors are
``(B, response_len)`` with each response **right-aligned** (its tokens in the last ``len`` positions, zeros before);
``action_log_probs[:, j]`` is the log-prob of the token at column j (predicted by the previous position, so a
response's first token *is* a target).

Generator keys (lists): ``world_role_ids`` (the per-token roles the loss reads) and, for tools written against
the reference implementation, its masks ``world_loss_masks``, ``world_warning_masks``, ``world_env_masks``,
``world_full_observation_counts`` plus ``world_loss_weights`` (per-role coefficients). Batch keys (tensors): the
same names in the singular. The loss itself is ``openenv_echo.objective.echo_loss`` on ``world_role_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...objective import Denominators, EchoBatch, EchoConfig, echo_loss, local_denominators
from ...roles import PAD_ROLE_CODE, Role, observation_count, world_target_mask

GENERATOR_KEYS = (
    "world_role_ids",
    "world_loss_masks",
    "world_loss_weights",
    "world_warning_masks",
    "world_env_masks",
    "world_full_observation_counts",
)
BATCH_KEYS = {
    "world_role_ids": "world_role_id",
    "world_loss_masks": "world_loss_mask",
    "world_loss_weights": "world_loss_weight",
    "world_warning_masks": "world_warning_mask",
    "world_env_masks": "world_env_mask",
    "world_full_observation_counts": "world_full_observation_count",
}
"""Generator list key -> training-batch tensor key (add the latter to ``zero_pad_keys``)."""


def add_world_masks(
    generator_output: Mapping[str, Any], response_role_ids: Sequence[Sequence[int]], cfg: EchoConfig
) -> dict[str, Any]:
    """``GeneratorOutput`` post-processor: a copy with the world masks added, aligned with ``response_ids``.

    ``response_role_ids[i][j]`` is the role code of ``response_ids[i][j]`` (the project's tokenization gives them;
    slice a full sequence's roles after the prompt). Raises if a response token with a non-action role has
    ``loss_masks == 1``: SkyRL would train an observation token with the policy gradient.
    """
    responses = generator_output["response_ids"]
    if len(response_role_ids) != len(responses):
        raise ValueError(f"{len(responses)} responses but {len(response_role_ids)} role rows")
    loss_masks = generator_output.get("loss_masks")
    out: dict[str, list[Any]] = {k: [] for k in GENERATOR_KEYS}
    for i, (ids, roles) in enumerate(zip(responses, response_role_ids)):
        if len(ids) != len(roles):
            raise ValueError(f"response {i}: {len(ids)} tokens but {len(roles)} roles")
        rid = torch.as_tensor([int(r) for r in roles], dtype=torch.long).reshape(1, -1)
        if rid.numel() and (int(rid.min()) < 0 or int(rid.max()) > 3):
            raise ValueError(f"response {i}: role codes must be 0..3")
        if loss_masks is not None:
            lm = torch.as_tensor(loss_masks[i]).reshape(1, -1)
            if lm.shape != rid.shape:
                raise ValueError(f"response {i}: loss_masks has {lm.numel()} entries for {rid.numel()} tokens")
            leak = (lm > 0) & (rid != Role.ACTION.code)
            if leak.any():
                raise ValueError(
                    f"response {i}: loss_masks is 1 on {int(leak.sum())} non-action tokens; observation tokens "
                    "must never be policy targets"
                )
        by_code = torch.tensor([cfg.role_coeff(Role.from_code(c)) for c in range(4)], dtype=torch.float64)
        selected = world_target_mask(rid, cfg.target_roles, includes_sequence_start=False)[0]
        coeffs = torch.where(selected, by_code[rid[0]], torch.zeros((), dtype=torch.float64))
        out["world_role_ids"].append(rid[0].tolist())
        out["world_loss_weights"].append(coeffs.tolist())
        out["world_loss_masks"].append((coeffs > 0).long().tolist())
        out["world_warning_masks"].append((rid[0] == Role.WARNING.code).long().tolist())
        out["world_env_masks"].append((rid[0] == Role.ENV_OUTPUT.code).long().tolist())
        out["world_full_observation_counts"].append(int(observation_count(rid)[0]))
    result = dict(generator_output)
    result.update(out)
    return result


def world_training_tensors(
    generator_output: Mapping[str, Any], response_length: int | None = None, num_rows: int | None = None
) -> dict[str, torch.Tensor]:
    """The world masks as ``(B, response_len)`` tensors, right-aligned like SkyRL 0.4's response tensors (zeros before
    a response; role ids -1 there), plus ``(B,)`` observation counts. ``num_rows`` adds dummy rows (SkyRL's
    ``pad_batch``)."""
    rows = generator_output["world_loss_masks"]
    n = len(rows)
    width = response_length if response_length is not None else max((len(r) for r in rows), default=0)
    total = num_rows if num_rows is not None else n
    if total < n:
        raise ValueError(f"num_rows={total} is below the {n} responses")
    out: dict[str, torch.Tensor] = {}
    roles = torch.full((total, width), PAD_ROLE_CODE, dtype=torch.long)
    for i, r in enumerate(generator_output["world_role_ids"]):
        if len(r) > width:
            raise ValueError(f"response {i} has {len(r)} tokens, more than response_length={width}")
        if r:
            roles[i, width - len(r) :] = torch.as_tensor(r, dtype=torch.long)
    out[BATCH_KEYS["world_role_ids"]] = roles
    for key in ("world_loss_masks", "world_loss_weights", "world_warning_masks", "world_env_masks"):
        t = torch.zeros((total, width), dtype=torch.float32)
        for i, r in enumerate(generator_output[key]):
            if len(r) > width:
                raise ValueError(f"response {i} has {len(r)} tokens, more than response_length={width}")
            if r:
                t[i, width - len(r) :] = torch.as_tensor(r, dtype=torch.float32)
        out[BATCH_KEYS[key]] = t
    counts = torch.zeros(total, dtype=torch.float32)
    counts[:n] = torch.as_tensor(generator_output["world_full_observation_counts"], dtype=torch.float32)
    out[BATCH_KEYS["world_full_observation_counts"]] = counts
    return out


def _world_batch(
    role_ids: torch.Tensor,
    full_observation_count: torch.Tensor | None = None,
    env_keep: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
) -> EchoBatch:
    """The ``EchoBatch`` of SkyRL response rows (a response's first token is a target; rows whose
    ``response_mask`` is empty, e.g. SkyRL's zero-filled pad rows, are padding)."""
    rid = role_ids.long()
    if response_mask is not None:
        rid = rid.masked_fill((response_mask.sum(dim=-1) == 0).unsqueeze(-1), PAD_ROLE_CODE)
    obs = None if full_observation_count is None else full_observation_count.reshape(-1).to(torch.float64)
    return EchoBatch(rid, obs_count=obs, env_keep=env_keep, includes_sequence_start=False)


def get_aux_policy_loss_context(
    data: Mapping[str, torch.Tensor], cfg: EchoConfig, *, all_reduce: bool = False, world_size: int = 1
) -> dict[str, float]:
    """Global denominators of one mini-batch (call once per ``forward_backward``, before micro-batching).

    ``world_tokens``: selected tokens; ``world_sequences``: real rows (``response_mask`` has a 1; dummy pad rows
    excluded). ``all_reduce`` sums them over the data-parallel group, ``world_size`` rescales for averaged
    gradients, so every rank normalizes by the same global counts (pitfall P6).
    """
    role_ids = data.get("world_role_id")
    if role_ids is None:
        raise KeyError("the batch has no world_role_id (see world_training_tensors)")
    mask = data.get("world_loss_mask")
    keep = None if mask is None else (mask > 0).any(dim=-1)
    batch = _world_batch(role_ids, data.get("world_full_observation_count"), keep, data.get("response_mask"))
    dens = local_denominators(batch, cfg)
    if all_reduce:
        dens = dens.all_reduce(device=role_ids.device)
    if world_size > 1:
        dens = dens.per_rank(world_size)
    return {"world_tokens": dens.world_tokens, "world_sequences": dens.world_sequences}


def compute_world_loss(
    action_log_probs: torch.Tensor,
    world_role_id: torch.Tensor,
    cfg: EchoConfig,
    *,
    full_observation_count: torch.Tensor | None = None,
    env_keep: torch.Tensor | None = None,
    token_denominator: float | None = None,
    sequence_denominator: float | None = None,
    step: int = 0,
    logprobs_temperature: float = 1.0,
    policy_loss: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """``λ(step) · L_world`` of one micro-batch in SkyRL's conventions, and the seam's metrics.

    ``world_role_id`` (B, L): role codes aligned with ``action_log_probs`` (-1 on padding). ``token_denominator``
    / ``sequence_denominator``: the global counts from ``get_aux_policy_loss_context`` (default: this
    micro-batch's own). ``env_keep`` (B,) bool: rows whose world term is kept (rollout filters). Returns
    ``(None, metrics)`` when λ = 0 (nothing to add). ``logprobs_temperature``: the temperature SkyRL divided the
    logits by; refused with ``env_temperature="one"`` unless 1 (the function only sees log-probs).
    """
    if action_log_probs.shape != world_role_id.shape or action_log_probs.dim() != 2:
        raise ValueError(
            f"action_log_probs {tuple(action_log_probs.shape)} and world_role_id {tuple(world_role_id.shape)} "
            "must both be (B, response_len)"
        )
    if cfg.env_temperature == "one" and logprobs_temperature != 1.0:
        raise ValueError(
            f"env_temperature='one' but SkyRL's log-probs are at temperature {logprobs_temperature}; set "
            "EchoConfig(env_temperature='rollout') or score at T=1"
        )
    batch = _world_batch(world_role_id, full_observation_count, env_keep)
    local = local_denominators(batch, cfg)
    dens = Denominators(
        0.0,
        0.0,
        local.world_tokens if token_denominator is None else float(token_denominator),
        local.world_sequences if sequence_denominator is None else float(sequence_denominator),
    )
    pol = policy_loss.detach() if policy_loss is not None else torch.zeros((), device=action_log_probs.device)
    out = echo_loss(action_log_probs, batch, cfg, step=step, denominators=dens, policy_loss=pol)
    return (out.world_loss if cfg.coeff_at(step) != 0.0 else None), out.metrics


def compute_aux_policy_loss(
    *,
    action_log_probs: torch.Tensor,
    policy_loss: torch.Tensor,
    experience: Any,
    loss_config: Any = None,
    microbatch_weight: float = 1.0,
    grad_sum_correction_factor: float = 1.0,
    aux_policy_loss_context: Mapping[str, float] | None = None,
    echo_config: EchoConfig,
    step: int = 0,
    logprobs_temperature: float = 1.0,
    **_: Any,
) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """The PR #1716 ``compute_aux_policy_loss`` hook body: reads the roles from ``experience.extras`` and the global
    denominators from the context. The returned loss is already normalized over the whole mini-batch, so it is
    added to each micro-batch's loss without ``microbatch_weight`` (as the reference worker does). A row whose
    ``world_loss_mask`` was zeroed (the reference's way of filtering a rollout) has no world term."""
    extras = getattr(experience, "extras", None) or {}
    role_ids = extras.get("world_role_id")
    ctx = aux_policy_loss_context or {}
    if role_ids is None:
        if echo_config.coeff_at(step) != 0.0:
            raise KeyError("ECHO is on but experience.extras has no world_role_id (add it via world_training_tensors)")
        return None, {}
    mask = extras.get("world_loss_mask")
    keep = None if mask is None else (mask > 0).any(dim=-1).to(action_log_probs.device)
    return compute_world_loss(
        action_log_probs,
        role_ids.to(action_log_probs.device),
        echo_config,
        full_observation_count=extras.get("world_full_observation_count"),
        env_keep=keep,
        token_denominator=ctx.get("world_tokens"),
        sequence_denominator=ctx.get("world_sequences"),
        step=step,
        logprobs_temperature=logprobs_temperature,
        policy_loss=policy_loss,
    )


def config_from_skyrl(algorithm: Mapping[str, Any]) -> EchoConfig:
    """An ``EchoConfig`` from the reference implementation's algorithm settings (``world_model_coeff``,
    ``world_loss_normalization`` ∈ {selected_tokens, full_observation_tokens}, ``loss_reduction``,
    ``max_seq_len``, ``world_loss_target``, ``world_model_coeff_schedule`` and its fields, ``wm_filter_*``)."""
    a = dict(algorithm)
    reduction = a.get("loss_reduction", "token_mean")
    norm = {"token_mean": "token_mean", "sequence_mean": "sequence_mean", "seq_mean_token_sum_norm": "constant"}.get(
        reduction
    )
    if norm is None:
        raise ValueError(f"unknown SkyRL loss_reduction {reduction!r}")
    seq = {"selected_tokens": "selected", "full_observation_tokens": "full_observation"}[
        a.get("world_loss_normalization", "selected_tokens")
    ]
    schedule: dict[str, Any] = {"kind": "constant"}
    kind = a.get("world_model_coeff_schedule", "constant")
    if kind == "linear_decay":
        schedule = {
            "kind": "linear_decay",
            "end_coeff": a["world_model_coeff_end"],
            "decay_steps": a["total_training_steps"],
        }
    elif kind == "step_decay":
        schedule = {
            "kind": "step",
            "boundaries": list(a["world_model_coeff_steps"]),
            "values": list(a["world_model_coeff_values"]),
        }
    target = a.get("world_loss_target", "env_only")  # the reference's words are ours
    return EchoConfig.model_validate(  # validated (strings to literals, dicts to sub-models) like the constructor
        {
            "world_model_coeff": float(a.get("world_model_coeff", 0.0)),
            "world_loss_target": target,
            "normalization": norm,
            "sequence_denominator": seq,
            "constant_denominator": a.get("max_seq_len") if norm == "constant" else None,
            "schedule": schedule,
            "filters": {
                "min_valid_tool_call_share": a.get("wm_filter_min_valid_tool_call_pct"),
                "min_parse_clean_share": a.get("wm_filter_min_parse_clean_pct"),
                "min_correct_share": a.get("wm_filter_min_correct_pct"),
            },
            "env_temperature": "rollout",
        }
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
