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

ROLE_SPEC_VERSION = "1.0"
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
