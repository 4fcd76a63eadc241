"""Converters from env rollouts to what each trainer consumes, one function per format.

Input: ``openenv_echo.adapters.rollouts.Rollout`` objects (prompt/completion split, per-token roles, sampler
log-probs), e.g. from ``run_rollouts``, or built from a tokenized trajectory
with ``rollout_from_tokenized``. Trainer libraries are imported only by the converter that needs them.

* ``to_trl`` — a TRL ``rollout_func`` result (``env_mask`` = TRL's tool mask: 1 on action tokens only);
* ``to_loss_weights`` — prime-rl/verifiers-style named per-token loss-weight streams (``rl``, ``ce``);
* ``to_tinker_datums`` — ``tinker.types.Datum``s for ``echo_custom_loss`` (next-token aligned);
* ``to_skyrl`` — a SkyRL ``GeneratorOutput`` dict with the per-token roles;
* ``to_hf_dataset`` — a Hugging Face ``datasets.Dataset`` with the schema ``HF_FEATURES``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch

from ..objective import EchoConfig
from ..roles import Role, target_positions, world_target_mask
from .rollouts import Rollout, end_completion

HF_SCHEMA: dict[str, str] = {
    "prompt_ids": "list<int64>: token ids before the first action (system/user messages, reset observation)",
    "completion_ids": "list<int64>: everything after, to the end-of-completion rule",
    "role_ids": "list<int8>: one role code per completion token (0 context, 1 action, 2 env_output, 3 warning)",
    "logprobs": "list<float32>: sampler log-prob on action tokens, 0.0 elsewhere",
    "reward": "float64: the episode's summed env reward",
    "reset_options": "string: JSON object the episode was reset with (its world)",
    "truncated": "bool: a length limit cut the completion",
    "obs_count": "int64: observation tokens (env_output + warning) before any cut",
    "end": "string: done | max_turns | length | error: ...",
}
"""Column -> type and meaning of ``to_hf_dataset``'s dataset (the documented schema)."""


def rollout_from_tokenized(
    tt: Any,
    *,
    eos_ids: Sequence[int],
    reward: float | None = None,
    logprobs: Sequence[float] | None = None,
    reset_options: dict[str, Any] | None = None,
) -> Rollout:
    """A ``Rollout`` from one ``TokenizedTrajectory`` (split at the first action, end rule applied).
    ``logprobs`` (one per token of the whole sequence) default to 0.0."""
    ids = [int(x) for x in tt.input_ids]
    roles = [int(x) for x in tt.role_ids]
    if Role.ACTION.code not in roles:
        raise ValueError("the trajectory has no action token: nothing for a trainer to train")
    k = roles.index(Role.ACTION.code)
    if k == 0:
        raise ValueError("the first token is an action: trainers need a non-empty prompt")
    comp, comp_roles, terminated = end_completion(ids[k:], roles[k:], eos_ids)
    lp = list(logprobs) if logprobs is not None else [0.0] * len(ids)
    if len(lp) != len(ids):
        raise ValueError(f"{len(lp)} logprobs for {len(ids)} tokens")
    return Rollout(
        prompt_ids=ids[:k],
        completion_ids=comp,
        role_ids=comp_roles,
        logprobs=[float(x) if r == Role.ACTION.code else 0.0 for x, r in zip(lp[k:], comp_roles)],
        reward=float(reward if reward is not None else (tt.reward or 0.0)),
        reset_options=dict(reset_options or {}),
        reset_text="",
        truncated=not terminated,
        obs_count=int(tt.obs_count),
        turns=sum(1 for a, b in zip([None, *comp_roles], comp_roles) if b == Role.ACTION.code and a != b),
        end="done" if terminated else "length",
    )


def to_trl(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """The dict a TRL ``rollout_func`` returns: ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``
    (TRL's tool mask: 1 on action tokens, so observations are never policy targets), the roles
    (``echo_role_ids``), ``echo_obs_count``, and ``env_reward`` / ``env_world`` for reward functions."""
    from .trl import rollouts_output

    return rollouts_output(rollouts)


def to_loss_weights(rollouts: Sequence[Rollout], cfg: EchoConfig, step: int = 0) -> list[dict[str, list[float]]]:
    """Per-token loss-weight streams over ``prompt_ids + completion_ids`` (prime-rl / verifiers ``loss_weights``):
    ``rl`` = 1.0 on action tokens, ``ce`` = λ·c_role on the selected observation tokens (λ at ``step``), 0 elsewhere.
    Token 0 is never a target. Normalization is the trainer's (prime-rl divides each stream by its own count)."""
    lam = cfg.coeff_at(step)
    out = []
    for r in rollouts:
        roles = [Role.CONTEXT.code] * len(r.prompt_ids) + list(r.role_ids)
        rid = torch.tensor(roles, dtype=torch.long)
        selected = world_target_mask(rid, cfg.target_roles).tolist()
        ce = [lam * cfg.role_coeff(Role.from_code(x)) if sel else 0.0 for x, sel in zip(roles, selected)]
        action = (target_positions(rid) & (rid == Role.ACTION.code)).tolist()
        out.append({"rl": [1.0 if a else 0.0 for a in action], "ce": ce})
    return out


def to_tinker_datums(
    rollouts: Sequence[Rollout], advantages: Sequence[float], cfg: EchoConfig, step: int = 0
) -> list[Any]:
    """``tinker.types.Datum``s for ``openenv_echo.adapters.tinker.echo_custom_loss`` (one per rollout:
    ``target_tokens``, ``advantages``, ``sampling_logprobs``, ``env_weights``, shifted to next-token targets)."""
    from .tinker import build_custom_datums

    ids = [r.prompt_ids + r.completion_ids for r in rollouts]
    roles = [[Role.CONTEXT.code] * len(r.prompt_ids) + list(r.role_ids) for r in rollouts]
    lps = [[0.0] * len(r.prompt_ids) + list(r.logprobs) for r in rollouts]
    obs = [r.obs_count for r in rollouts]
    return build_custom_datums(ids, roles, list(advantages), lps, cfg, step=step, obs_count=obs)


def to_skyrl(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """A SkyRL ``GeneratorOutput`` (``prompt_token_ids``, ``response_ids``, ``rewards``, ``loss_masks`` = 1 on
    action tokens, ``stop_reasons``, ``rollout_logprobs``) with each response token's role code under
    ``openenv_echo.adapters.skyrl.ROLE_KEY``: what ``EchoGymGenerator`` returns and ``EchoPPOTrainer`` turns into
    the world weights of SkyRL's ``echo_<base>`` policy loss."""
    from .skyrl import ROLE_KEY

    return {
        "prompt_token_ids": [list(r.prompt_ids) for r in rollouts],
        "response_ids": [list(r.completion_ids) for r in rollouts],
        "rewards": [float(r.reward) for r in rollouts],
        "loss_masks": [[1 if x == Role.ACTION.code else 0 for x in r.role_ids] for r in rollouts],
        "stop_reasons": ["length" if r.truncated else "stop" for r in rollouts],
        "rollout_metrics": None,
        "rollout_logprobs": [list(r.logprobs) for r in rollouts],
        ROLE_KEY: [list(r.role_ids) for r in rollouts],
    }


def to_hf_dataset(rollouts: Sequence[Rollout]) -> Any:
    """A ``datasets.Dataset``, one row per rollout, columns and types as ``HF_SCHEMA`` documents."""
    import datasets

    features = datasets.Features(
        {
            "prompt_ids": datasets.Sequence(datasets.Value("int64")),
            "completion_ids": datasets.Sequence(datasets.Value("int64")),
            "role_ids": datasets.Sequence(datasets.Value("int8")),
            "logprobs": datasets.Sequence(datasets.Value("float32")),
            "reward": datasets.Value("float64"),
            "reset_options": datasets.Value("string"),
            "truncated": datasets.Value("bool"),
            "obs_count": datasets.Value("int64"),
            "end": datasets.Value("string"),
        }
    )
    rows = {
        "prompt_ids": [r.prompt_ids for r in rollouts],
        "completion_ids": [r.completion_ids for r in rollouts],
        "role_ids": [r.role_ids for r in rollouts],
        "logprobs": [r.logprobs for r in rollouts],
        "reward": [r.reward for r in rollouts],
        "reset_options": [json.dumps(r.reset_options, sort_keys=True) for r in rollouts],
        "truncated": [r.truncated for r in rollouts],
        "obs_count": [r.obs_count for r in rollouts],
        "end": [r.end for r in rollouts],
    }
    return datasets.Dataset.from_dict(rows, features=features)


__all__ = [
    "HF_SCHEMA",
    "rollout_from_tokenized",
    "to_hf_dataset",
    "to_loss_weights",
    "to_skyrl",
    "to_tinker_datums",
    "to_trl",
]
