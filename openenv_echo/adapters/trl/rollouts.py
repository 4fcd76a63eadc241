"""TRL adapter, rollout side: the batch keys ``EchoGRPOTrainer`` reads and a ready multi-turn ``rollout_func``.

``rollout_output`` / ``rollouts_output`` turn recorded rollouts into what TRL's ``rollout_func`` returns (completion
ids, log-probs and one role code per completion token under ``ROLE_KEY``, plus the optional filter keys);
``env_rollout_func`` runs episodes on an env server with the trainer's own model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...roles import Role
from ..rollouts import HFSampler, Rollout, check_groups, run_rollouts

ROLE_KEY = "echo_role_ids"
"""Batch key of the (B, T_completion) role ids (and the rollout_func output key of per-completion role lists)."""
ENV_KEEP_KEY = "echo_env_keep"
VERIFIER_FREE_KEY = "echo_verifier_free"
"""Optional rollout_func key: one bool per completion; those rollouts get only the env term."""
OBS_COUNT_KEY = "echo_obs_count"
STATS_KEYS = {
    "valid_tool_call_share": "echo_valid_tool_call_share",
    "parse_clean_share": "echo_parse_clean_share",
    "correct": "echo_correct",
}
"""Optional rollout_func keys (one value per completion) feeding the world-term rollout filters."""
RESET_KEY = "env_reset"
"""Dataset column: the env's reset options of that row (a dict or a JSON object string, e.g. ``{"seed": 7}``).
TRL repeats each row ``num_generations`` times, so every completion of a GRPO group runs the same world."""


# -- rollout_func helpers ---------------------------------------------------------------------------------------
def _role_code(r: Any) -> int:
    if isinstance(r, Role):
        return r.code
    if isinstance(r, str):
        return Role(r).code
    code = int(r)
    if code not in (0, 1, 2, 3):
        raise ValueError(f"unknown role code {r!r} (expected 0..3 or a Role)")
    return code


def split_at_first_action(
    input_ids: Sequence[int], role_ids: Sequence[int | Role], *, trim_trailing_context: bool = True
) -> tuple[list[int], list[int], list[int]]:
    """Split one tokenized trajectory into TRL's ``(prompt_ids, completion_ids, completion_role_ids)``.

    The prompt is everything before the first ``action`` token (system/user messages, the reset observation);
    the completion is the rest: actions, observations and their scaffolding, with roles kept per token.
    ``trim_trailing_context`` drops template scaffolding after the last token (e.g. the newline a template puts
    after an end-of-turn token), so a completion that ends on an action ends on the model's EOS, as TRL's
    truncation check expects.
    """
    ids = [int(i) for i in input_ids]
    roles = [_role_code(r) for r in role_ids]
    if len(ids) != len(roles):
        raise ValueError(f"{len(ids)} input ids but {len(roles)} roles")
    try:
        k = roles.index(Role.ACTION.code)
    except ValueError:
        raise ValueError("the trajectory has no action token: nothing for GRPO to train") from None
    if k == 0:
        raise ValueError("the first token is an action: TRL needs a non-empty prompt before the completion")
    end = len(ids)
    if trim_trailing_context:
        while end > k and roles[end - 1] == Role.CONTEXT.code:
            end -= 1
    return ids[:k], ids[k:end], roles[k:end]


def rollout_output(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    completion_role_ids: Sequence[Sequence[int | Role]],
    logprobs: Sequence[Sequence[float]] | None = None,
    *,
    env_keep: Sequence[bool] | None = None,
    obs_count: Sequence[int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The dict a TRL ``rollout_func`` returns, with ECHO roles.

    Adds ``env_mask`` (1 on action tokens, 0 elsewhere: TRL's policy mask; it never trains observation tokens)
    and ``echo_role_ids``. ``logprobs`` are the sampler's per-token log-probs (0.0 on non-sampled tokens is fine:
    the env term never reads them). ``extra`` keys are passed through to TRL (reward functions see them).
    """
    n = len(completion_ids)
    if len(prompt_ids) != n or len(completion_role_ids) != n:
        raise ValueError(
            f"prompt_ids ({len(prompt_ids)}), completion_ids ({n}) and completion_role_ids "
            f"({len(completion_role_ids)}) must have one entry per completion"
        )
    roles = []
    for i, (ids, rs) in enumerate(zip(completion_ids, completion_role_ids)):
        if len(ids) != len(rs):
            raise ValueError(f"completion {i}: {len(ids)} ids but {len(rs)} roles")
        roles.append([_role_code(r) for r in rs])
    if logprobs is not None and [len(x) for x in logprobs] != [len(x) for x in completion_ids]:
        raise ValueError("logprobs must have one value per completion token")
    out: dict[str, Any] = {
        "prompt_ids": [list(map(int, p)) for p in prompt_ids],
        "completion_ids": [list(map(int, c)) for c in completion_ids],
        "logprobs": [list(map(float, x)) for x in logprobs] if logprobs is not None else None,
        "env_mask": [[1 if r == Role.ACTION.code else 0 for r in rs] for rs in roles],
        ROLE_KEY: roles,
    }
    if env_keep is not None:
        if len(env_keep) != n:
            raise ValueError("env_keep must have one value per completion")
        out[ENV_KEEP_KEY] = [bool(k) for k in env_keep]
    if obs_count is not None:
        if len(obs_count) != n:
            raise ValueError("obs_count must have one value per completion")
        out[OBS_COUNT_KEY] = [int(c) for c in obs_count]
    out.update(extra)
    return out


def rollouts_output(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """``rollout_output`` of env rollouts (``openenv_echo.adapters.rollouts.Rollout``), plus ``env_reward`` (the
    episode's summed reward) and ``env_world`` (its reset text) for reward functions."""
    return rollout_output(
        [r.prompt_ids for r in rollouts],
        [r.completion_ids for r in rollouts],
        [r.role_ids for r in rollouts],
        [r.logprobs for r in rollouts],
        obs_count=[r.obs_count for r in rollouts],
        env_reward=[r.reward for r in rollouts],
        env_world=[r.reset_text for r in rollouts],
    )


def _trainer_eos_ids(trainer: Any) -> list[int]:
    """The ids TRL's truncation check counts as a clean end: ``eos_token_ids`` (1.x) or ``eos_token_id`` (0.29)."""
    ids = getattr(trainer, "eos_token_ids", None)
    if ids is None:
        ids = [getattr(trainer, "eos_token_id", None) or trainer.processing_class.eos_token_id]
    return [int(i) for i in ids if i is not None]


def env_rollout_func(
    base_url: str,
    *,
    to_action: Callable[[str], dict[str, Any]],
    max_turns: int = 4,
    max_new_tokens: int = 32,
    client_kwargs: dict[str, Any] | None = None,
) -> Callable[[list[Any], Any], dict[str, Any]]:
    """A ready ``rollout_func`` for ``EchoGRPOTrainer``: multi-turn episodes on the env server at ``base_url``.

    All completions of a call run concurrently (one session each, sampling batched with ``trainer.model`` at
    ``trainer.temperature``); each is reset with its dataset row's ``RESET_KEY`` options, so a GRPO group
    shares one world (checked). Completions respect ``args.max_completion_length`` and follow the
    end-of-completion rule (``openenv_echo.adapters.rollouts.end_completion``). The env's summed reward is
    passed to reward functions as ``env_reward``; ``env_world`` holds each completion's reset text.
    """

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        if not all(isinstance(p, list) for p in prompts):
            raise TypeError("env_rollout_func needs conversational prompts (lists of chat messages)")
        options = list(getattr(trainer, "echo_reset_options", None) or [None] * len(prompts))
        if len(options) != len(prompts):
            raise ValueError(f"{len(options)} reset options for {len(prompts)} prompts")
        num_gen = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        check_groups(options, num_gen)
        tok = trainer.processing_class
        eos = _trainer_eos_ids(trainer)
        model = trainer.accelerator.unwrap_model(trainer.model)
        sampler = HFSampler(model, tok, temperature=float(trainer.temperature), eos_ids=eos)
        rollouts = run_rollouts(
            base_url,
            tok,
            sampler,
            options,
            prompts,
            to_action=to_action,
            max_turns=max_turns,
            max_completion_length=int(trainer.args.max_completion_length),
            max_new_tokens=max_new_tokens,
            eos_ids=eos,
            client_kwargs=client_kwargs,
        )
        return rollouts_output(rollouts)

    return rollout_func


__all__ = [
    "ENV_KEEP_KEY",
    "OBS_COUNT_KEY",
    "RESET_KEY",
    "ROLE_KEY",
    "STATS_KEYS",
    "VERIFIER_FREE_KEY",
    "env_rollout_func",
    "rollout_output",
    "rollouts_output",
    "split_at_first_action",
]
