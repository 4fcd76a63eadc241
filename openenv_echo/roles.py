"""The four token roles of the openenv-echo role spec and their wire/tensor encodings.

A role says who wrote a piece of a rollout:

* ``context``    – task prompts, system text and chat-template scaffolding; never a loss target by default.
* ``action``     – what the policy emitted; the RL (policy-gradient) target.
* ``env_output`` – what the world answered (stdout, file contents, query results, errors); the ECHO target.
* ``warning``    – harness boilerplate (echoed commands, wrappers, truncation notices, format warnings, parse
  errors); excluded from the world-model target by default.

The role is decided by whoever emits the text, at the moment it is emitted (see ``rfcs/0001-role-spec.md``).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Literal, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import torch

ROLE_SPEC_VERSION = "1.1"
"""Version of the role spec carried on the wire (``Observation.role_spec``) and in saved trajectories."""


class Role(str, Enum):
    """Who wrote a character (and so a token) of a rollout."""

    CONTEXT = "context"
    ACTION = "action"
    ENV_OUTPUT = "env_output"
    WARNING = "warning"

    @property
    def code(self) -> int:
        """Small integer used in tensors (``role_ids``): context 0, action 1, env_output 2, warning 3."""
        return _CODES[self]

    @classmethod
    def from_code(cls, code: int) -> Role:
        return _BY_CODE[code]


_CODES = {Role.CONTEXT: 0, Role.ACTION: 1, Role.ENV_OUTPUT: 2, Role.WARNING: 3}
_BY_CODE = {v: k for k, v in _CODES.items()}

PAD_ROLE_CODE = -1
"""``role_ids`` value of padding positions: padding is carried explicitly, never inferred from token ids."""

ROLES: tuple[Role, ...] = tuple(Role)

RoleArray = TypeVar("RoleArray", "np.ndarray", "torch.Tensor")
"""Role ids as a numpy array or a torch tensor: the rules below are written once for both."""


# -- role rules: which tokens train what, shared by tokenization, the objective and every trainer adapter ----------
# One convention everywhere (normative text: rfcs/0003-token-masks.md and rfcs/0004-echo-objective.md):
# ``role_ids[..., t]`` is the role of token t *as a prediction target* (predicted by the logits at t-1); padding is
# ``PAD_ROLE_CODE``. The functions below work on numpy arrays and torch tensors alike (1-D rows or (B, T) batches,
# the last axis is the token axis) and never look at token ids or log-prob values.

OBSERVATION_ROLES: tuple[Role, ...] = (Role.ENV_OUTPUT, Role.WARNING)
"""Roles of an observation *body* (what |O_i| counts); ``context`` scaffolding around a body is not body."""

WorldLossTarget = Literal["env_only", "warning_only", "warning_plus_env", "full_observation"]

WORLD_LOSS_TARGETS: dict[str, frozenset[Role]] = {
    "env_only": frozenset({Role.ENV_OUTPUT}),
    "warning_only": frozenset({Role.WARNING}),
    "warning_plus_env": frozenset({Role.ENV_OUTPUT, Role.WARNING}),
    # everything the policy did not write after its first action: observation bodies, warnings and the chat
    # scaffolding around them (TRL's ``1 - tool_mask``, the SkyRL reference's ``full_observation``)
    "full_observation": frozenset({Role.ENV_OUTPUT, Role.WARNING, Role.CONTEXT}),
}
"""Roles each ``world_loss_target`` word selects as world-model (CE) targets (the SkyRL reference's words)."""

RFC010_WORLD_LOSS_TARGETS: dict[str, str] = {"env_only": "env_only", "all": "warning_plus_env"}
"""OpenEnv RFC 010's ``world_loss_target`` words and ours for the same roles (RFC 010's ``all`` is env + warning)."""


def check_world_loss_target(word: str) -> WorldLossTarget:
    """``word`` if it is a known ``world_loss_target``; a clear error otherwise (``all`` is refused: it meant
    env + warning + scaffold here before and means env + warning in OpenEnv's RFC 010)."""
    if word == "all":
        raise ValueError(
            "world_loss_target='all' is ambiguous and no longer accepted: for env_output + warning (OpenEnv RFC 010's "
            "'all') use 'warning_plus_env'; for every non-action token after the first action, chat scaffolding "
            "included (this project's former 'all'), use 'full_observation'"
        )
    if word not in WORLD_LOSS_TARGETS:
        raise ValueError(f"unknown world_loss_target {word!r}; known: {sorted(WORLD_LOSS_TARGETS)}")
    return word  # type: ignore[return-value]  # checked against the Literal's values just above


def target_positions(role_ids: RoleArray, includes_sequence_start: bool = True) -> RoleArray:
    """Bool mask of positions that can be a prediction target: not padding and, when the row starts at the sequence
    start, not its first real token (it has no predictor; also after left padding). Completion slices whose first
    token is predicted by the prompt (TRL, SkyRL responses) pass ``includes_sequence_start=False``."""
    valid: RoleArray = role_ids != PAD_ROLE_CODE
    if includes_sequence_start:
        valid = valid & ~(valid & (valid.cumsum(-1) == 1))
    return valid


def after_first_action(role_ids: RoleArray) -> RoleArray:
    """Bool mask of positions strictly after the first ``action`` token of their row."""
    is_action = role_ids == Role.ACTION.code
    seen = is_action.cumsum(-1)  # actions up to and including t
    after: RoleArray = (seen > 0) & ~((seen == 1) & is_action)
    return after


def world_target_mask(role_ids: RoleArray, roles: frozenset[Role], includes_sequence_start: bool = True) -> RoleArray:
    """Bool mask of the world-model targets of ``roles``: target positions of those roles after the row's first
    action (the prompt and the reset observation are not consequences of the agent's actions)."""
    mask = target_positions(role_ids, includes_sequence_start) & after_first_action(role_ids)
    selected = role_ids != role_ids  # all False, same kind and shape as role_ids
    for role in roles:
        selected = selected | (role_ids == role.code)
    out: RoleArray = mask & selected
    return out


def observation_count(role_ids: RoleArray) -> RoleArray:
    """|O_i|: observation body tokens (``env_output`` + ``warning``) after the row's first action, per row.

    The one definition used by the tokenizer (counted on the whole trajectory before truncation), the objective
    (``sequence_denominator="full_observation"``) and the adapters. 0 for a row without action or observation."""
    body = (role_ids == Role.ENV_OUTPUT.code) | (role_ids == Role.WARNING.code)
    count: RoleArray = (body & after_first_action(role_ids)).sum(-1)
    return count
